// The proxy's connection with a deadline field and one lazily re-armed timer (proxy/conn.h):
// a passed deadline ends the operation with beast::error::timeout, also when it falls before
// the moment the timer already waits for; a stale deadline never cancels a later operation.
#include "proxy/conn.h"

#include <gtest/gtest.h>

#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <optional>

namespace vramd::proxy_detail {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using namespace std::chrono_literals;

// A connected pair on loopback: `ours` wrapped in a Conn, `theirs` a plain socket.
struct Pair {
  asio::io_context io;
  ConnPtr ours;
  tcp::socket theirs{io};
  Pair() {
    tcp::acceptor acceptor(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    tcp::socket s(io);
    s.connect(acceptor.local_endpoint());
    theirs = acceptor.accept();
    ours = ConnPtr(std::make_shared<Conn>(std::move(s)));
  }
};

TEST(ProxyConn, APassedDeadlineEndsTheReadWithTimeout) {
  Pair p;
  char c;
  std::optional<boost::beast::error_code> result;
  p.ours->expires_after(100ms);
  p.ours->async_read_some(asio::buffer(&c, 1),
                          [&](boost::beast::error_code ec, std::size_t) { result = ec; });
  p.io.run_for(10s);  // a bound for a broken build, not a timed assertion
  ASSERT_TRUE(result.has_value());
  EXPECT_EQ(*result, boost::beast::error::timeout) << result->message();
}

TEST(ProxyConn, ADeadlineBeforeTheArmedOneStillFires) {
  Pair p;
  char c;
  // The first operation arms the timer for an hour from now; it completes at once.
  asio::write(p.theirs, asio::buffer("x", 1));
  std::optional<boost::beast::error_code> first, second;
  p.ours->expires_after(1h);
  p.ours->async_read_some(asio::buffer(&c, 1),
                          [&](boost::beast::error_code ec, std::size_t) {
                            first = ec;
                            p.io.stop();  // the timer still waits: leave it armed
                          });
  p.io.run_for(10s);
  ASSERT_TRUE(first.has_value());
  EXPECT_FALSE(*first) << first->message();
  // The next one's deadline falls long before the hour: the timer is re-armed for it.
  p.io.restart();
  p.ours->expires_after(100ms);
  p.ours->async_read_some(asio::buffer(&c, 1),
                          [&](boost::beast::error_code ec, std::size_t) { second = ec; });
  p.io.run_for(10s);
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ(*second, boost::beast::error::timeout) << second->message();
}

TEST(ProxyConn, AStaleDeadlineDoesNotCancelALaterOperation) {
  Pair p;
  char c;
  asio::write(p.theirs, asio::buffer("x", 1));
  std::optional<boost::beast::error_code> first, second;
  p.ours->expires_after(100ms);  // the timer waits for 100 ms from now
  p.ours->async_read_some(asio::buffer(&c, 1),
                          [&](boost::beast::error_code ec, std::size_t) {
                            first = ec;
                            p.io.stop();  // the timer still waits: leave it armed
                          });
  p.io.run_for(10s);
  ASSERT_TRUE(first.has_value());
  EXPECT_FALSE(*first);
  // No deadline for the next read: when the old moment passes, it must not be cancelled. The
  // peer answers only after that moment (a timer of its own), and the read gets its byte.
  p.io.restart();
  p.ours->expires_never();
  p.ours->async_read_some(asio::buffer(&c, 1),
                          [&](boost::beast::error_code ec, std::size_t) { second = ec; });
  asio::steady_timer later(p.io, 400ms);
  later.async_wait([&](boost::beast::error_code) { asio::write(p.theirs, asio::buffer("y", 1)); });
  p.io.run_for(10s);
  ASSERT_TRUE(second.has_value());
  EXPECT_FALSE(*second) << second->message();
  EXPECT_EQ(c, 'y');
}

TEST(ProxyConn, DroppingTheOwnerClosesTheConnectionAndLetsItsTimerGo) {
  Pair p;
  std::weak_ptr<Conn> weak;
  {
    auto conn = std::make_shared<Conn>(std::move(p.theirs));
    weak = conn;
    ConnPtr owner(std::move(conn));
    owner->expires_after(1h);  // the timer's handler holds the Conn
    char c;
    owner->async_read_some(asio::buffer(&c, 1), [](boost::beast::error_code, std::size_t) {});
  }
  p.io.run_for(10s);
  EXPECT_TRUE(weak.expired());
  // The other end sees the close.
  char c;
  boost::beast::error_code ec;
  p.ours->socket().read_some(asio::buffer(&c, 1), ec);
  EXPECT_EQ(ec, asio::error::eof);
}

}  // namespace
}  // namespace vramd::proxy_detail
