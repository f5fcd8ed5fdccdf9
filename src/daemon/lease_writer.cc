#include "daemon/lease_writer.h"

#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>

namespace vramd {

namespace asio = boost::asio;

LeaseWriter::LeaseWriter(asio::io_context& io, asio::thread_pool& store_thread,
                         std::shared_ptr<LeaseStore> store, Hooks hooks)
    : io_(io), store_thread_(store_thread), store_(std::move(store)), hooks_(std::move(hooks)) {}

void LeaseWriter::save(const Lease& lease, std::vector<StoredEvent> told) {
  ++pending_[lease.id];
  latest_.insert_or_assign(lease.id, lease);
  std::vector<StoredEvent> events;
  if (!told.empty() || unwritten_.count(lease.id)) {
    auto& unwritten = unwritten_[lease.id];
    for (auto& e : told) unwritten.push_back(std::move(e));
    events = unwritten;
  }
  asio::post(store_thread_, [this, store = store_, lease, now = hooks_.clock(),
                             events = std::move(events)] {
    Status r = store->save(lease, now, events);
    if (!r) spdlog::error("{}", r.error());
    if (hooks_.on_store_thread) hooks_.on_store_thread(r.ok());
    std::vector<int64_t> told;
    told.reserve(events.size());
    for (const auto& e : events) told.push_back(e.id);
    asio::post(io_, [this, lease, r, told = std::move(told)] { saved(lease, r, told); });
  });
}

void LeaseWriter::saved(const Lease& lease, const Status& written,
                        const std::vector<int64_t>& told) {
  uint64_t id = lease.id;
  if (written && !told.empty()) {
    if (auto it = unwritten_.find(id); it != unwritten_.end()) {
      std::erase_if(it->second, [&](const StoredEvent& e) {
        return std::find(told.begin(), told.end(), e.id) != told.end();
      });
      if (it->second.empty()) unwritten_.erase(it);
    }
  }
  if (hooks_.written) hooks_.written(written);
  if (!written) {
    // The write stays pending (no client hears of this change) until it lands: the newest
    // state of the lease is written again soon, unless a newer write is already queued (it
    // carries this change, and retries in its turn).
    if (pending_[id] > 1) {
      --pending_[id];
    } else if (!stopping_) {
      auto timer = std::make_shared<asio::steady_timer>(io_, kRewriteAfter);
      timer->async_wait([this, timer, id](const boost::system::error_code&) {
        if (stopping_) return;
        --pending_[id];
        save(Lease(latest_.at(id)));
      });
    }
    return;
  }
  if (--pending_[id] <= 0) {
    pending_.erase(id);
    latest_.erase(id);
  }
  wake(id);
}

std::vector<uint64_t> LeaseWriter::unwritten() const {
  std::vector<uint64_t> out;
  out.reserve(pending_.size());
  for (const auto& [id, n] : pending_) out.push_back(id);
  return out;
}

void LeaseWriter::wake(uint64_t id) {
  auto [from, to] = waiters_.equal_range(id);
  for (auto it = from; it != to; ++it) it->second->cancel();
}

asio::awaitable<void> LeaseWriter::wait(uint64_t id, Duration max, bool until_ended) {
  auto deadline = std::chrono::steady_clock::now() + max;
  asio::steady_timer timer(io_);
  // A watch also answers a change of state on the way (a preemptible lease suspended, resumed).
  const Lease* at_first = hooks_.find(id);
  std::optional<LeaseState> first = at_first ? std::optional(at_first->state) : std::nullopt;
  for (;;) {
    const Lease* l = hooks_.find(id);
    bool on_disk = written(id) || (l && l->state == LeaseState::lost);
    bool settled = !l || (until_ended ? !is_active(l->state) || l->state != first
                                      : l->state != LeaseState::queued);
    if (on_disk && (settled || std::chrono::steady_clock::now() >= deadline || stopping_)) break;
    // Waiting only for the write: it takes milliseconds, the deadline does not apply.
    bool write_only = settled || std::chrono::steady_clock::now() >= deadline;
    timer.expires_at(write_only ? std::chrono::steady_clock::now() + kWriteWait : deadline);
    auto it = waiters_.emplace(id, &timer);
    boost::system::error_code ec;
    co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    waiters_.erase(it);
    // The store did not answer in kWriteWait: say what we know (a lease still queued too: its
    // write may wait as long as the store is down).
    if (!ec && write_only) break;
  }
}

void LeaseWriter::stop() {
  stopping_ = true;
  for (auto& [id, t] : waiters_) t->cancel();
}

}  // namespace vramd
