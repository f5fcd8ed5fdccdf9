// max_concurrent per service: requests beyond it wait in arrival order; once max_queue wait,
// the next is refused (429). Single-threaded: everything runs on the proxy's executor.
#pragma once

#include <utility>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>
#include <deque>
#include <memory>

namespace vramd {

class ConcurrencyLimit {
 public:
  // max_concurrent 0: no limit.
  ConcurrencyLimit(int max_concurrent, int max_queue)
      : max_concurrent_(max_concurrent), max_queue_(max_queue) {}

  // True once the request holds a slot; false when the queue is full (answer 429). A true
  // result must be matched by one release().
  boost::asio::awaitable<bool> acquire();
  void release();

  int active() const { return active_; }
  int queued() const { return static_cast<int>(queue_.size()); }
  int max_concurrent() const { return max_concurrent_; }
  int max_queue() const { return max_queue_; }

 private:
  struct Waiter {
    explicit Waiter(const boost::asio::any_io_executor& ex) : timer(ex) {}
    boost::asio::steady_timer timer;
    bool granted = false;
  };
  int max_concurrent_;
  int max_queue_;
  int active_ = 0;
  std::deque<std::shared_ptr<Waiter>> queue_;
};

}  // namespace vramd
