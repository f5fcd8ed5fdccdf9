#include "proxy/limiter.h"

#include <boost/asio/redirect_error.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace vramd {

namespace asio = boost::asio;

asio::awaitable<bool> ConcurrencyLimit::acquire() {
  if (max_concurrent_ <= 0) co_return true;
  if (active_ < max_concurrent_ && queue_.empty()) {
    ++active_;
    co_return true;
  }
  if (static_cast<int>(queue_.size()) >= max_queue_) co_return false;
  auto w = std::make_shared<Waiter>(co_await asio::this_coro::executor);
  w->timer.expires_at(asio::steady_timer::time_point::max());
  queue_.push_back(w);
  while (!w->granted) {
    boost::system::error_code ec;
    co_await w->timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
  co_return true;
}

void ConcurrencyLimit::release() {
  if (max_concurrent_ <= 0) return;
  --active_;
  // The slot passes to the oldest waiter, which counts as active from now on.
  if (!queue_.empty() && active_ < max_concurrent_) {
    auto w = queue_.front();
    queue_.pop_front();
    ++active_;
    w->granted = true;
    w->timer.cancel();
  }
}

}  // namespace vramd
