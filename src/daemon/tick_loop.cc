#include "daemon/tick_loop.h"

#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>

#include "daemon/sampler.h"

namespace vramd {

namespace asio = boost::asio;

asio::awaitable<void> TickLoop::run() {
  while (!stopping_) {
    std::optional<MonoTime> due = hooks_.next_deadline();
    at_ = due ? std::min(*due, mono_now() + idle_) : mono_now() + idle_;
    timer_.expires_at(at_);
    boost::system::error_code ec;
    co_await timer_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    if (stopping_) break;
    if (mono_now() - last_idle_ >= idle_) {
      last_idle_ = mono_now();
      if (hooks_.idle) hooks_.idle();
    }
    if (ec) continue;  // woken for a sooner deadline: wait for that one
    if (due = hooks_.next_deadline(); due && mono_now() >= *due) hooks_.tick();
  }
}

void TickLoop::deadline_changed() {
  if (auto due = hooks_.next_deadline(); due && *due < at_) timer_.cancel();
}

void TickLoop::stop() {
  stopping_ = true;
  timer_.cancel();
}

}  // namespace vramd
