// The real daemon under a stepped wall clock (libfaketime moves only CLOCK_REALTIME), and its
// systemd watchdog pings on a fake notify socket.
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <fstream>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/client.h"
#include "core/units.h"
#include "integration/daemon_fixture.h"
#include "integration/test_util.h"

namespace vramd {
namespace {

using nlohmann::json;
using testing::DaemonFixture;
using testing::eventually;
using testing::get;
using testing::wall_now;
using namespace std::chrono_literals;

json post(const DaemonFixture& f, const std::string& target, const json& body) {
  auto r = http_request({f.url}, "POST", target, body.dump(), 10000);
  if (!r) return json::object();
  return json::parse(r->body, nullptr, false);
}

// The newest history frame's time, as the daemon shows it (Unix seconds).
double newest_frame(const DaemonFixture& f) {
  json h = get(f, "/v1/history?gpu=0&window=15m");
  if (!h.contains("times") || h["times"].empty()) return 0;
  return h["times"].back().get<double>();
}

double unix_now() { return wall_now().time_since_epoch().count() / 1000.0; }

TEST(ClockE2E, SteppingTheWallClockExpiresNoLeaseAndHistoryFollowsTheNewClock) {
  std::string lib = testing::libfaketime_path();
  if (lib.empty()) GTEST_SKIP() << "libfaketime is not installed (Debian: libfaketime)";
  DaemonFixture f;
  std::string spec = f.dir.file("faketime");
  std::ofstream(spec) << "+0\n";
  f.extra_env = {"LD_PRELOAD=" + lib, "FAKETIME_TIMESTAMP_FILE=" + spec, "FAKETIME_NO_CACHE=1",
                 "FAKETIME_DONT_FAKE_MONOTONIC=1"};
  // Under AddressSanitizer the preloaded library comes before ASan's runtime, which ASan refuses
  // unless told that this order is meant.
  const char* asan = std::getenv("ASAN_OPTIONS");
  f.extra_env.push_back(std::string("ASAN_OPTIONS=") + (asan ? std::string(asan) + ":" : "") +
                        "verify_asan_link_order=0");
  f.daemon_toml = "lease_heartbeat = \"30s\"\n";
  f.start("");

  // A lease without a holder pid lives while it is touched within lease_heartbeat.
  json lease = post(f, "/v1/leases?wait=5s", {{"vram", "1GiB"}, {"label", "held"}});
  ASSERT_EQ(lease.value("state", ""), "granted") << lease.dump();
  int64_t id = lease["id"].get<int64_t>();

  // The wall clock jumps two hours ahead (an NTP step, a resume from suspend).
  std::ofstream(spec, std::ios::trunc) << "+2h\n";
  // Proof that the daemon sees the step: an event after it is stamped two hours ahead.
  json second = post(f, "/v1/leases?wait=5s", {{"vram", "1GiB"}, {"label", "after-step"}});
  ASSERT_EQ(second.value("state", ""), "granted") << second.dump();
  TimePoint requested = *parse_rfc3339(second["requested_at"].get<std::string>());
  EXPECT_GT(requested - wall_now(), 1h) << "libfaketime did not step the daemon's clock";
  std::this_thread::sleep_for(2s);  // ten samples and the ticks between them
  json first = get(f, fmt::format("/v1/leases/{}", id));
  EXPECT_EQ(first.value("state", ""), "granted")
      << "a 2 h step of the wall clock must not count as 2 h without a heartbeat: " << first.dump();
  EXPECT_TRUE(testing::events_of(f, "lease.expired").empty());

  // Then back by four hours: sampling and history go on (a wall-clock history would drop every
  // sample until the clock caught up), shown on the new clock.
  std::ofstream(spec, std::ios::trunc) << "-2h\n";
  ASSERT_TRUE(eventually([&] { return std::abs(newest_frame(f) - (unix_now() - 7200)) < 5; }, 5s))
      << "newest frame " << fmt::format("{:.0f}", newest_frame(f)) << ", expected about "
      << fmt::format("{:.0f}", unix_now() - 7200);
  double before = newest_frame(f);
  std::this_thread::sleep_for(1s);
  EXPECT_GT(newest_frame(f), before) << "history stopped after the clock went back";
  EXPECT_EQ(get(f, fmt::format("/v1/leases/{}", id)).value("state", ""), "granted");
}

// A datagram socket standing in for systemd's $NOTIFY_SOCKET.
class FakeNotifySocket {
 public:
  explicit FakeNotifySocket(std::string path) : path_(std::move(path)) {
    fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path_.c_str());
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    timeval tv{0, 100'000};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  }
  ~FakeNotifySocket() { ::close(fd_); }
  // Every message received within `d`.
  std::vector<std::string> receive_for(std::chrono::milliseconds d) {
    std::vector<std::string> out;
    auto end = std::chrono::steady_clock::now() + d;
    char buf[4096];
    while (std::chrono::steady_clock::now() < end) {
      ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n > 0) out.emplace_back(buf, static_cast<size_t>(n));
    }
    return out;
  }

 private:
  std::string path_;
  int fd_ = -1;
};

size_t count(const std::vector<std::string>& messages, const std::string& what) {
  size_t n = 0;
  for (const auto& m : messages) n += m.find(what) != std::string::npos;
  return n;
}

TEST(WatchdogE2E, TheEventLoopPingsAtHalfTheWatchdogInterval) {
  DaemonFixture f;
  FakeNotifySocket systemd(f.dir.file("notify.sock"));
  f.extra_env = {"NOTIFY_SOCKET=" + f.dir.file("notify.sock"), "WATCHDOG_USEC=400000"};
  f.start("");
  auto messages = systemd.receive_for(1500ms);
  EXPECT_EQ(count(messages, "READY=1"), 1u);  // sent once, at start (waiting in the socket)
  // 400 ms interval: a ping every 200 ms; 1.5 s gives at least five even on a loaded machine.
  EXPECT_GE(count(messages, "WATCHDOG=1"), 5u);
}

TEST(WatchdogE2E, NoWatchdogIntervalNoPings) {
  DaemonFixture f;
  FakeNotifySocket systemd(f.dir.file("notify.sock"));
  f.extra_env = {"NOTIFY_SOCKET=" + f.dir.file("notify.sock")};
  f.start("");
  auto messages = systemd.receive_for(800ms);
  EXPECT_EQ(count(messages, "WATCHDOG=1"), 0u);
}

}  // namespace
}  // namespace vramd
