// Requests whose answer someone awaits on the daemon's loop (an unload's verdict, a lifecycle
// command's result, a wake's outcome): by id, the answer when it comes, and a timer that the
// answer, the wait's limit or the daemon's stop ends. One loop thread: no locks.
#pragma once

#include <utility>  // (before Boost.Asio's awaitable.hpp, which uses std::exchange)

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>

namespace vramd {

struct NoExtra {};

// T: the answer. Extra: what the daemon keeps beside a pending request (a wake's service and
// who hears its progress).
template <typename T, typename Extra = NoExtra>
class Waiters {
 public:
  using Clock = std::chrono::steady_clock;

  explicit Waiters(boost::asio::io_context& io) : io_(io) {}

  // A new request's id: 1, 2, 3, ... (unique among these waiters' requests).
  uint64_t next_id() { return next_id_++; }

  // Someone will wait for `id`'s answer, for at most `limit` from now (a wait may set its own).
  Extra& add(uint64_t id, std::optional<Clock::duration> limit = std::nullopt) {
    auto& e = entries_[id];
    e = std::make_unique<Entry>(io_);
    if (limit)
      e->timer.expires_after(*limit);
    else
      e->timer.expires_at(Clock::time_point::max());
    return e->extra;
  }

  // The answer to `id`: its waiter wakes. An id no one waits for is ignored.
  void answer(uint64_t id, T result) {
    if (auto it = entries_.find(id); it != entries_.end()) {
      it->second->result = std::move(result);
      it->second->timer.cancel();
    }
  }

  // A request not answered yet: its Extra, or null.
  Extra* pending(uint64_t id) {
    auto it = entries_.find(id);
    return it != entries_.end() && !it->second->result ? &it->second->extra : nullptr;
  }
  template <typename F>  // f(id, extra) for each request not answered yet
  void for_each_pending(F f) const {
    for (const auto& [id, e] : entries_)
      if (!e->result) f(id, e->extra);
  }

  // Waits for `id`'s answer, then forgets it. `max`: how long from now (zero: not at all);
  // without it, until the limit given to add(), else until answered. nullopt when no answer
  // came in time, the id is unknown, or the daemon stops.
  boost::asio::awaitable<std::optional<T>> wait(uint64_t id,
                                                std::optional<Clock::duration> max = std::nullopt) {
    auto it = entries_.find(id);
    if (it == entries_.end()) co_return std::nullopt;
    Entry* e = it->second.get();
    bool wait = !e->result && !stopped_ && (!max || max->count() > 0);
    if (wait && max) e->timer.expires_after(*max);
    if (wait) {
      boost::system::error_code ec;
      co_await e->timer.async_wait(boost::asio::redirect_error(boost::asio::use_awaitable, ec));
    }
    std::optional<T> out = std::move(e->result);
    entries_.erase(id);
    co_return out;
  }

  // The daemon stops: every wait returns now, and later ones at once.
  void stop() {
    stopped_ = true;
    for (auto& [id, e] : entries_) e->timer.cancel();
  }

  size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    explicit Entry(boost::asio::io_context& io) : timer(io) {}
    boost::asio::steady_timer timer;
    std::optional<T> result;
    Extra extra;
  };
  boost::asio::io_context& io_;
  std::map<uint64_t, std::unique_ptr<Entry>> entries_;
  uint64_t next_id_ = 1;
  bool stopped_ = false;
};

}  // namespace vramd
