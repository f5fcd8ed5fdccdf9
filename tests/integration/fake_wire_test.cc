// The fake GPU servers on the wire (tests/fakes/fake_wire.cc): each trait of a real server that
// hurt vramd's proxy (issue 46), observed on real sockets from a plain blocking client: the
// worker limit, the idle close, the cap on requests per connection, the close after an error,
// and the head and body written apart with Nagle on (../shared/reference/transport.md).
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "integration/test_util.h"
#include "testgpu/fake_gpu_state.h"

namespace vramd {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using testing::Child;
using testing::eventually;
using testing::TempDir;

milliseconds ms_since(Clock::time_point t) {
  return std::chrono::duration_cast<milliseconds>(Clock::now() - t);
}

// One fake-gpu-server process of `kind` with the given flags, on a test GPU of its own.
class WireFake {
 public:
  WireFake(const std::string& kind, std::vector<std::string> extra = {}) {
    std::string state = dir_.file("state.json");
    EXPECT_TRUE(
        write_fake_gpu_state(state, make_fake_gpu_state({{"NVIDIA GeForce RTX 3090", 24 * GiB}})));
    port_ = testing::free_port();
    std::vector<std::string> argv = {testing::build_dir() + "/fake-gpu-server",
                                     "--kind",
                                     kind,
                                     "--port",
                                     std::to_string(port_),
                                     "--state",
                                     state};
    argv.insert(argv.end(), extra.begin(), extra.end());
    log_ = dir_.file("out.log");
    child_ = std::make_unique<Child>(argv, std::vector<std::string>{}, log_);
  }
  bool wait_ready() {
    return eventually([&] {
      std::ifstream in(log_);
      std::stringstream s;
      s << in.rdbuf();
      return s.str().find("ready " + std::to_string(port_)) != std::string::npos;
    });
  }
  int port() const { return port_; }
  Child& child() { return *child_; }

 private:
  TempDir dir_;
  std::string log_;
  int port_ = 0;
  std::unique_ptr<Child> child_;
};

// What one response looked like as it arrived.
struct WireResponse {
  int status = 0;
  std::string head;  // status line and headers
  std::string body;
  bool head_alone = false;       // the first recv() held the head and not one byte of the body
  milliseconds head_to_body{0};  // from the head's arrival to the body's last byte
  bool has_header(const std::string& line) const {
    return head.find("\r\n" + line + "\r\n") != std::string::npos;
  }
};

// A blocking HTTP/1.1 client on one TCP connection, reading each response as it arrives.
class WireConn {
 public:
  explicit WireConn(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  }
  ~WireConn() { close(); }
  WireConn(const WireConn&) = delete;
  WireConn& operator=(const WireConn&) = delete;
  bool connected() const { return connected_; }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  bool send_get(const std::string& target) {
    std::string req = "GET " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
    return ::send(fd_, req.data(), req.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(req.size());
  }
  // Whether a byte (or the end) arrives within `within`.
  bool readable(milliseconds within) {
    if (!buffer_.empty()) return true;
    pollfd p{fd_, POLLIN, 0};
    return ::poll(&p, 1, static_cast<int>(within.count())) == 1;
  }
  // The next response (a Content-Length body), or nullopt when the connection ends first or
  // nothing comes within `within`.
  std::optional<WireResponse> read_response(milliseconds within = milliseconds(5000)) {
    WireResponse r;
    auto deadline = Clock::now() + within;
    std::size_t end_of_head = std::string::npos;
    Clock::time_point head_at{};
    bool first = true;
    for (;;) {
      if (end_of_head == std::string::npos) end_of_head = buffer_.find("\r\n\r\n");
      if (end_of_head != std::string::npos) {
        if (head_at == Clock::time_point{}) head_at = Clock::now();
        std::size_t length = content_length(buffer_.substr(0, end_of_head + 2));
        if (buffer_.size() >= end_of_head + 4 + length) {
          if (first) r.head_alone = buffer_.size() == end_of_head + 4 && length > 0;
          r.head = buffer_.substr(0, end_of_head + 2);
          r.body = buffer_.substr(end_of_head + 4, length);
          buffer_.erase(0, end_of_head + 4 + length);
          r.head_to_body = std::chrono::duration_cast<milliseconds>(Clock::now() - head_at);
          r.status = std::atoi(r.head.substr(9, 3).c_str());
          return r;
        }
        if (first) r.head_alone = buffer_.size() == end_of_head + 4;
        first = false;
      }
      auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
      if (left.count() <= 0 || !readable(left)) return std::nullopt;
      char chunk[65536];
      ssize_t n = ::recv(fd_, chunk, sizeof chunk, 0);
      if (n <= 0) return std::nullopt;
      buffer_.append(chunk, static_cast<std::size_t>(n));
    }
  }
  // How long until the server ends the connection (recv returns 0), or nullopt when it does
  // not within `within` (or sends bytes instead).
  std::optional<milliseconds> time_to_eof(milliseconds within) {
    auto start = Clock::now();
    if (!readable(within)) return std::nullopt;
    char c;
    if (::recv(fd_, &c, 1, 0) != 0) return std::nullopt;
    return ms_since(start);
  }

 private:
  static std::size_t content_length(const std::string& head) {
    std::string lower = head;
    std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
    auto at = lower.find("\r\ncontent-length:");
    return at == std::string::npos ? 0 : std::strtoul(lower.c_str() + at + 17, nullptr, 10);
  }
  int fd_ = -1;
  bool connected_ = false;
  std::string buffer_;
};

// llama-server's worker pool: with N connections open and idle, the (N+1)th is accepted but
// answered only once one of them closes (the 5-7 s stall of issue 46, item b).
TEST(FakeWire, LlamacppQueuesTheConnectionBeyondItsWorkersUntilOneCloses) {
  WireFake fake("llamacpp", {"--workers", "2", "--keep-alive", "30s"});
  ASSERT_TRUE(fake.wait_ready());
  WireConn a(fake.port()), b(fake.port()), c(fake.port());
  ASSERT_TRUE(a.connected() && b.connected() && c.connected());
  for (WireConn* conn : {&a, &b}) {
    ASSERT_TRUE(conn->send_get("/health"));
    auto r = conn->read_response();
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200);
  }
  ASSERT_TRUE(c.send_get("/health"));
  EXPECT_FALSE(c.readable(milliseconds(700))) << "the third connection was served";
  auto closed = Clock::now();
  a.close();
  auto r = c.read_response(milliseconds(3000));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_LT(ms_since(closed).count(), 1000);
  // b still holds its worker: it is answered on the connection it kept.
  ASSERT_TRUE(b.send_get("/health"));
  EXPECT_TRUE(b.read_response());
}

TEST(FakeWire, QueuedConnectionIsServedWhenAnIdleOneTimesOut) {
  WireFake fake("llamacpp", {"--workers", "1", "--keep-alive", "1s"});
  ASSERT_TRUE(fake.wait_ready());
  WireConn a(fake.port()), b(fake.port());
  ASSERT_TRUE(a.send_get("/health"));
  ASSERT_TRUE(a.read_response());
  auto idle_from = Clock::now();
  ASSERT_TRUE(b.send_get("/health"));
  auto r = b.read_response(milliseconds(4000));
  ASSERT_TRUE(r);
  auto waited = ms_since(idle_from);
  EXPECT_GE(waited.count(), 900);
  EXPECT_LT(waited.count(), 2500);
  EXPECT_TRUE(a.time_to_eof(milliseconds(100)));  // a's idle close freed the worker
}

// cpp-httplib's keep-alive: `Keep-Alive: timeout=5, max=100` on each answer, then a FIN 5 s
// after the last response byte.
TEST(FakeWire, LlamacppClosesAnIdleConnectionFiveSecondsAfterItsLastResponse) {
  WireFake fake("llamacpp");
  ASSERT_TRUE(fake.wait_ready());
  WireConn conn(fake.port());
  ASSERT_TRUE(conn.send_get("/health"));
  auto r = conn.read_response();
  ASSERT_TRUE(r);
  EXPECT_TRUE(r->has_header("Keep-Alive: timeout=5, max=100")) << r->head;
  auto eof = conn.time_to_eof(milliseconds(8000));
  ASSERT_TRUE(eof);
  EXPECT_GE(eof->count(), 4950);
  EXPECT_LT(eof->count(), 5600);
}

TEST(FakeWire, LlamacppHundredthResponseSaysCloseAndCloses) {
  // --nodelay on only so that a hundred requests take no 40 ms each.
  WireFake fake("llamacpp", {"--nodelay", "on"});
  ASSERT_TRUE(fake.wait_ready());
  WireConn conn(fake.port());
  for (int i = 1; i <= 100; ++i) {
    ASSERT_TRUE(conn.send_get("/health")) << i;
    auto r = conn.read_response();
    ASSERT_TRUE(r) << i;
    if (i < 100) {
      ASSERT_TRUE(r->has_header("Keep-Alive: timeout=5, max=100")) << i << r->head;
      ASSERT_EQ(r->head.find("Connection: close"), std::string::npos) << i;
    } else {
      EXPECT_TRUE(r->has_header("Connection: close")) << r->head;
      EXPECT_EQ(r->head.find("Keep-Alive:"), std::string::npos) << r->head;
    }
  }
  auto eof = conn.time_to_eof(milliseconds(1000));
  ASSERT_TRUE(eof);
}

// Issue 46, item a: llama-server b4747 writes the head, then the body, with Nagle on. On a
// reused connection the body waits for the client's delayed ACK of the head (40 ms on Linux).
TEST(FakeWire, LlamacppBodyWaitsForTheDelayedAckOnAKeptConnection) {
  WireFake fake("llamacpp");
  ASSERT_TRUE(fake.wait_ready());
  WireConn conn(fake.port());
  int stalled = 0;
  for (int i = 0; i < 8; ++i) {
    ASSERT_TRUE(conn.send_get("/health"));
    auto r = conn.read_response();
    ASSERT_TRUE(r);
    if (r->head_alone && r->head_to_body.count() >= 30) ++stalled;
    EXPECT_LT(r->head_to_body.count(), 1000);
  }
  EXPECT_GE(stalled, 4) << "the body came with its head: no split write held by Nagle";
}

TEST(FakeWire, NodelayOrOneWriteSendsTheBodyAtOnce) {
  // The same stand-in with TCP_NODELAY (llama-server from b4760): the two segments leave at once.
  WireFake nodelay("llamacpp", {"--nodelay", "on"});
  // One send for head and body (cpp-httplib >= 0.34): the whole answer in the first recv.
  WireFake one_write("llamacpp", {"--split-writes", "off"});
  ASSERT_TRUE(nodelay.wait_ready());
  ASSERT_TRUE(one_write.wait_ready());
  WireConn a(nodelay.port()), b(one_write.port());
  std::vector<long> gaps;
  for (int i = 0; i < 8; ++i) {
    ASSERT_TRUE(a.send_get("/health"));
    auto r = a.read_response();
    ASSERT_TRUE(r);
    gaps.push_back(r->head_to_body.count());
    ASSERT_TRUE(b.send_get("/health"));
    auto whole = b.read_response();
    ASSERT_TRUE(whole);
    EXPECT_FALSE(whole->head_alone) << i;
    EXPECT_EQ(whole->head_to_body.count(), 0) << i;
  }
  std::sort(gaps.begin(), gaps.end());
  EXPECT_LT(gaps[gaps.size() / 2], 20) << "median head-to-body gap with TCP_NODELAY";
}

// uvicorn (vLLM's defaults): head and body apart but with TCP_NODELAY, so no stall; no
// Keep-Alive header; the idle close at 5 s.
TEST(FakeWire, VllmSendsAtOnceAndClosesAfterFiveIdleSeconds) {
  WireFake fake("vllm");
  ASSERT_TRUE(fake.wait_ready());
  WireConn conn(fake.port());
  std::vector<long> gaps;
  for (int i = 0; i < 8; ++i) {
    ASSERT_TRUE(conn.send_get("/health"));
    auto r = conn.read_response();
    ASSERT_TRUE(r);
    EXPECT_EQ(r->head.find("Keep-Alive:"), std::string::npos);
    gaps.push_back(r->head_to_body.count());
  }
  std::sort(gaps.begin(), gaps.end());
  EXPECT_LT(gaps[gaps.size() / 2], 20);
  auto eof = conn.time_to_eof(milliseconds(8000));
  ASSERT_TRUE(eof);
  EXPECT_GE(eof->count(), 4950);
  EXPECT_LT(eof->count(), 5600);
}

// cpp-httplib >= 0.28: an answer >= 400 ends the connection. b4747's 0.19 keeps it.
TEST(FakeWire, CloseOnErrorEndsTheConnectionAfterA404) {
  WireFake closes("llamacpp", {"--close-on-error", "on"});
  WireFake keeps("llamacpp");
  ASSERT_TRUE(closes.wait_ready());
  ASSERT_TRUE(keeps.wait_ready());
  WireConn a(closes.port()), b(keeps.port());
  ASSERT_TRUE(a.send_get("/nope"));
  auto r = a.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
  EXPECT_TRUE(r->has_header("Connection: close")) << r->head;
  EXPECT_TRUE(a.time_to_eof(milliseconds(1000)));

  ASSERT_TRUE(b.send_get("/nope"));
  auto kept = b.read_response();
  ASSERT_TRUE(kept);
  EXPECT_EQ(kept->status, 404);
  EXPECT_TRUE(kept->has_header("Keep-Alive: timeout=5, max=100")) << kept->head;
  ASSERT_TRUE(b.send_get("/health"));
  EXPECT_TRUE(b.read_response());
}

// The HTTP server's defaults (vramd's own API server; the kinds with no reference): no worker
// limit, no cap on requests, no Keep-Alive header, one send per answer.
TEST(FakeWire, GenericHttpKeepsTheServersOwnWays) {
  WireFake fake("generic_http");
  ASSERT_TRUE(fake.wait_ready());
  std::vector<std::unique_ptr<WireConn>> idle;
  for (int i = 0; i < 20; ++i) {
    idle.push_back(std::make_unique<WireConn>(fake.port()));
    ASSERT_TRUE(idle.back()->send_get("/health"));
    ASSERT_TRUE(idle.back()->read_response(milliseconds(2000))) << i;
  }
  WireConn conn(fake.port());
  for (int i = 0; i < 120; ++i) {
    ASSERT_TRUE(conn.send_get("/health"));
    auto r = conn.read_response();
    ASSERT_TRUE(r) << i;
    ASSERT_EQ(r->head.find("Keep-Alive:"), std::string::npos);
    ASSERT_EQ(r->head.find("Connection: close"), std::string::npos) << i;
    ASSERT_FALSE(r->head_alone) << i;
  }
}

TEST(FakeWire, BadWireFlagsExitTwo) {
  for (auto flags : std::vector<std::vector<std::string>>{{"--nodelay", "maybe"},
                                                          {"--workers", "-1"},
                                                          {"--keep-alive", "0s"},
                                                          {"--max-requests"}}) {
    WireFake fake("llamacpp", flags);
    int status = fake.child().wait_exit(milliseconds(3000));
    ASSERT_TRUE(WIFEXITED(status)) << flags[0];
    EXPECT_EQ(WEXITSTATUS(status), 2) << flags[0];
  }
}

}  // namespace
}  // namespace vramd
