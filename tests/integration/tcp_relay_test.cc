// The partition harness (tests/integration/tcp_relay.h) on real sockets: an echo server behind
// it passes, goes silent without closing (blackhole) and delivers what was held once it passes
// again, and resets; and PostgreSQL through it, by vramd's own store over libpq.
#include "integration/tcp_relay.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "integration/postgres_server.h"
#include "store/postgres_store.h"

namespace vramd::testing {
namespace tcp_relay_test {

using namespace std::chrono_literals;

// Echoes every connection until it closes; one thread per connection.
class EchoServer {
 public:
  EchoServer() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a);
    ::listen(fd_, 16);
    socklen_t len = sizeof a;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    accept_ = std::thread([this] {
      while (true) {
        int c = ::accept(fd_, nullptr, nullptr);
        if (c < 0) return;
        conns_.emplace_back([c] {
          char buf[4096];
          ssize_t n;
          while ((n = ::recv(c, buf, sizeof buf, 0)) > 0) ::send(c, buf, size_t(n), MSG_NOSIGNAL);
          ::close(c);
        });
      }
    });
  }
  ~EchoServer() {
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
    accept_.join();
    for (auto& t : conns_) t.join();
  }
  int port() const { return port_; }

 private:
  int fd_ = -1, port_ = 0;
  std::thread accept_;
  std::vector<std::thread> conns_;
};

int dial(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// What arrives within `wait`: the bytes, "" for silence, "<closed>" or "<reset>".
std::string read_for(int fd, std::chrono::milliseconds wait) {
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, int(wait.count())) == 0) return "";
  char buf[256];
  ssize_t n = ::recv(fd, buf, sizeof buf, 0);
  if (n > 0) return std::string(buf, size_t(n));
  if (n == 0) return "<closed>";
  return errno == ECONNRESET ? "<reset>" : "<error>";
}

void say(int fd, const std::string& s) { ::send(fd, s.data(), s.size(), MSG_NOSIGNAL); }

TEST(TcpRelay, PassesThenHoldsInSilenceThenDeliversWhatItHeld) {
  EchoServer echo;
  TcpRelay relay("127.0.0.1", echo.port());
  int fd = dial(relay.port());
  ASSERT_GE(fd, 0);
  say(fd, "ping");
  EXPECT_EQ(read_for(fd, 2s), "ping");

  relay.set_mode(TcpRelay::Mode::blackhole);
  std::this_thread::sleep_for(100ms);  // the relay's poll picks the mode up within 20 ms
  say(fd, "held");
  EXPECT_EQ(read_for(fd, 500ms), "") << "silence, not an error or a close";
  // A new connection is accepted (the kernel's handshake) and then hears nothing either.
  int late = dial(relay.port());
  ASSERT_GE(late, 0);
  say(late, "late");
  EXPECT_EQ(read_for(late, 300ms), "");

  relay.set_mode(TcpRelay::Mode::pass);
  EXPECT_EQ(read_for(fd, 2s), "held") << "what was sent into the blackhole arrives after it";
  EXPECT_EQ(read_for(late, 2s), "late");
  ::close(fd);
  ::close(late);
}

TEST(TcpRelay, ResetClosesEveryConnectionWithAnRstAndRefusesNewOnes) {
  EchoServer echo;
  TcpRelay relay("127.0.0.1", echo.port());
  int fd = dial(relay.port());
  ASSERT_GE(fd, 0);
  say(fd, "ping");
  ASSERT_EQ(read_for(fd, 2s), "ping");
  relay.set_mode(TcpRelay::Mode::reset);
  EXPECT_EQ(read_for(fd, 2s), "<reset>");
  int again = dial(relay.port());
  if (again >= 0) {  // the handshake may complete before the relay resets it
    EXPECT_EQ(read_for(again, 2s), "<reset>");
    ::close(again);
  }
  ::close(fd);
  // Passing again, new connections work.
  relay.set_mode(TcpRelay::Mode::pass);
  std::this_thread::sleep_for(100ms);
  int fresh = dial(relay.port());
  ASSERT_GE(fresh, 0);
  say(fresh, "back");
  EXPECT_EQ(read_for(fresh, 2s), "back");
  ::close(fresh);
}

// vramd's PostgreSQL store (libpq, loaded at run time) through the relay: it opens and writes
// while the relay passes; a reset is an error at once, not a hang; passing again, it opens anew.
TEST(TcpRelay, PostgresThroughTheRelayWorksAndAResetIsAnErrorNotAHang) {
  PostgresServer* pg = PostgresServer::get();
  VRAMD_REQUIRE_POSTGRES(pg);
  std::string db = pg->create_database("relay");
  TcpRelay relay("127.0.0.1", pg->port());
  std::string url = pg->url(db);
  std::string port = fmt::format(":{}/", pg->port());
  url.replace(url.find(port), port.size(), fmt::format(":{}/", relay.port()));

  auto s = open_postgres_stores(url, "gpu1", 100);
  ASSERT_TRUE(s.ok()) << s.error();
  ASSERT_TRUE(s->hosts);
  EXPECT_TRUE(s->hosts->beat("{}").ok());
  EXPECT_GE(relay.accepted(), 1);

  relay.set_mode(TcpRelay::Mode::reset);
  std::this_thread::sleep_for(100ms);
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(s->hosts->beat("{}").ok());
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s);

  relay.set_mode(TcpRelay::Mode::pass);
  std::this_thread::sleep_for(100ms);
  auto again = open_postgres_stores(url, "gpu1", 100);
  ASSERT_TRUE(again.ok()) << again.error();
  EXPECT_TRUE(again->hosts->beat("{}").ok());
}

}  // namespace tcp_relay_test
}  // namespace vramd::testing
