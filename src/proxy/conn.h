// One TCP connection of the proxy (client side or upstream) with a deadline for the operation
// under way: an AsyncStream that Beast's HTTP algorithms and asio::async_write take directly.
//
// Why not beast::tcp_stream: it arms its timer at the start of every read and write and
// cancels it at the end (two timer-queue operations, a cancelled handler to run and often a
// timerfd_settime per I/O call, four I/O calls a request), and moving one allocates a new
// implementation with three timers (the keep-alive pool moved connections twice a request).
// Here the deadline is a field: setting it is a clock read. The connection's one timer is
// re-armed only when a deadline falls before the moment it already waits for; as the clock
// moves on, the deadlines of a busy connection fall after it, so the timer fires about once a
// timeout period, finds the deadline moved on and waits again. When it fires with the deadline
// passed it cancels the socket's operations, and they end with beast::error::timeout.
//
// Lifetime: the timer's handler holds a shared_ptr, so a Conn lives in a shared_ptr (ConnPtr
// closes it when dropped). Single-threaded: everything runs on the proxy's executor.
#pragma once

#include <utility>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/error.hpp>
#include <chrono>
#include <memory>

namespace vramd::proxy_detail {

class Conn : public std::enable_shared_from_this<Conn> {
 public:
  using Clock = std::chrono::steady_clock;
  using socket_type = boost::asio::ip::tcp::socket;
  using executor_type = socket_type::executor_type;

  explicit Conn(socket_type s) : sock_(std::move(s)), timer_(sock_.get_executor()) {}
  explicit Conn(const executor_type& ex) : sock_(ex), timer_(ex) {}
  Conn(const Conn&) = delete;
  Conn& operator=(const Conn&) = delete;

  socket_type& socket() { return sock_; }
  executor_type get_executor() { return sock_.get_executor(); }

  // The operations started from now on must end by then (until the next call).
  template <class Rep, class Period>
  void expires_after(std::chrono::duration<Rep, Period> d) {
    timed_out_ = false;
    deadline_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(d);
    if (deadline_ < armed_) arm(deadline_);
  }
  void expires_never() {
    timed_out_ = false;
    deadline_ = Clock::time_point::max();
  }

  // An error of an operation on socket() itself (async_connect): the cancel of a passed
  // deadline reads as beast::error::timeout.
  boost::beast::error_code map(boost::beast::error_code ec) const {
    if (timed_out_ && ec == boost::asio::error::operation_aborted) return boost::beast::error::timeout;
    return ec;
  }

  void close() {
    boost::beast::error_code ignored;
    closed_ = true;
    sock_.close(ignored);
    timer_.cancel();
  }

  template <class MutableBuffers, class Token>
  auto async_read_some(const MutableBuffers& buffers, Token&& token) {
    return boost::asio::async_initiate<Token, void(boost::beast::error_code, std::size_t)>(
        [this](auto handler, const MutableBuffers& b) {
          sock_.async_read_some(b, Mapped<decltype(handler)>{std::move(handler), this});
        },
        token, buffers);
  }
  template <class ConstBuffers, class Token>
  auto async_write_some(const ConstBuffers& buffers, Token&& token) {
    return boost::asio::async_initiate<Token, void(boost::beast::error_code, std::size_t)>(
        [this](auto handler, const ConstBuffers& b) {
          sock_.async_write_some(b, Mapped<decltype(handler)>{std::move(handler), this});
        },
        token, buffers);
  }

 private:
  // The operation's own handler, its error read through map(). It keeps the handler's executor.
  template <class Handler>
  struct Mapped {
    Handler handler;
    Conn* conn;
    using executor_type = boost::asio::associated_executor_t<Handler, Conn::executor_type>;
    executor_type get_executor() const noexcept {
      return boost::asio::get_associated_executor(handler, conn->sock_.get_executor());
    }
    void operator()(boost::beast::error_code ec, std::size_t n) {
      ec = conn->map(ec);
      std::move(handler)(ec, n);
    }
  };

  void arm(Clock::time_point t) {
    armed_ = t;
    timer_.expires_at(t);  // cancels the wait for the later moment
    timer_.async_wait([self = shared_from_this()](const boost::beast::error_code& ec) {
      if (ec != boost::asio::error::operation_aborted) self->fired();
    });
  }
  void fired() {
    armed_ = Clock::time_point::max();
    if (closed_ || deadline_ == Clock::time_point::max()) return;
    if (Clock::now() >= deadline_) {
      timed_out_ = true;
      deadline_ = Clock::time_point::max();
      boost::beast::error_code ignored;
      sock_.cancel(ignored);
      return;
    }
    arm(deadline_);
  }

  socket_type sock_;
  boost::asio::steady_timer timer_;
  Clock::time_point deadline_ = Clock::time_point::max();
  Clock::time_point armed_ = Clock::time_point::max();  // what timer_ waits for
  bool timed_out_ = false;
  bool closed_ = false;
};

// Owns a Conn: closing it (socket and timer) when dropped, which lets the timer's handler go.
class ConnPtr {
 public:
  ConnPtr() = default;
  explicit ConnPtr(std::shared_ptr<Conn> c) : c_(std::move(c)) {}
  ConnPtr(ConnPtr&&) noexcept = default;
  ConnPtr& operator=(ConnPtr&& o) noexcept {
    if (this != &o) {
      reset();
      c_ = std::move(o.c_);
    }
    return *this;
  }
  ~ConnPtr() { reset(); }
  void reset() {
    if (c_) c_->close();
    c_.reset();
  }
  explicit operator bool() const { return static_cast<bool>(c_); }
  Conn& operator*() const { return *c_; }
  Conn* operator->() const { return c_.get(); }

 private:
  std::shared_ptr<Conn> c_;
};

}  // namespace vramd::proxy_detail
