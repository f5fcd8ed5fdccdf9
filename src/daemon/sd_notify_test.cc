#include "daemon/sd_notify.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>

#include <gtest/gtest.h>

namespace vramd {
namespace {

namespace fs = std::filesystem;
using std::chrono::microseconds;

// Sets (or unsets, with nullopt) an environment variable for one test and restores it after.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, std::optional<std::string> value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) {
      ::setenv(name, value->c_str(), 1);
    } else {
      ::unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      ::setenv(name_, old_->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// A bound AF_UNIX datagram socket playing systemd's part.
class Receiver {
 public:
  // `name`: a path, or "@name" for the abstract namespace.
  explicit Receiver(const std::string& name) {
    fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd_ < 0) return;
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    socklen_t len = 0;
    if (name[0] == '@') {
      std::memcpy(addr.sun_path + 1, name.data() + 1, name.size() - 1);
      len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + name.size());
    } else {
      std::memcpy(addr.sun_path, name.data(), name.size());
      len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + name.size() + 1);
    }
    bound_ = ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), len) == 0;
  }
  ~Receiver() {
    if (fd_ >= 0) ::close(fd_);
  }
  Receiver(const Receiver&) = delete;
  Receiver& operator=(const Receiver&) = delete;

  bool bound() const { return bound_; }

  // The next datagram, without waiting (a local datagram is queued by the time sendto returns).
  std::optional<std::string> receive() {
    char buf[4096];
    ssize_t n = ::recv(fd_, buf, sizeof buf, MSG_DONTWAIT);
    if (n < 0) return std::nullopt;
    return std::string(buf, static_cast<std::size_t>(n));
  }

 private:
  int fd_ = -1;
  bool bound_ = false;
};

class SdNotifyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Short, fixed base: sun_path holds 108 bytes, and $TMPDIR may be long.
    char tmpl[] = "/tmp/vramd-sdnotify-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  fs::path dir_;
};

TEST_F(SdNotifyTest, SendsToPathSocket) {
  std::string path = (dir_ / "notify").string();
  Receiver systemd(path);
  ASSERT_TRUE(systemd.bound());
  ScopedEnv env("NOTIFY_SOCKET", path);

  EXPECT_TRUE(sd_notify("READY=1"));
  EXPECT_EQ(systemd.receive(), "READY=1");
  EXPECT_TRUE(sd_notify("WATCHDOG=1"));
  EXPECT_EQ(systemd.receive(), "WATCHDOG=1");
  EXPECT_TRUE(sd_notify("STOPPING=1\nSTATUS=shutting down"));
  EXPECT_EQ(systemd.receive(), "STOPPING=1\nSTATUS=shutting down");
  EXPECT_EQ(systemd.receive(), std::nullopt);  // one datagram per call, nothing more
}

TEST_F(SdNotifyTest, SendsToAbstractSocket) {
  std::string name =
      "@vramd-sdnotify-test-" + std::to_string(::getpid()) + "-" + dir_.filename().string();
  Receiver systemd(name);
  ASSERT_TRUE(systemd.bound());
  ScopedEnv env("NOTIFY_SOCKET", name);

  EXPECT_TRUE(sd_notify("READY=1"));
  EXPECT_EQ(systemd.receive(), "READY=1");

  // The address length must cover exactly the name: a receiver bound to a name that is a prefix
  // (or an extension) of it gets nothing.
  Receiver prefix(name.substr(0, name.size() - 1));
  ASSERT_TRUE(prefix.bound());
  EXPECT_TRUE(sd_notify("WATCHDOG=1"));
  EXPECT_EQ(systemd.receive(), "WATCHDOG=1");
  EXPECT_EQ(prefix.receive(), std::nullopt);
}

TEST_F(SdNotifyTest, FalseWithoutSocket) {
  ScopedEnv env("NOTIFY_SOCKET", std::nullopt);
  EXPECT_FALSE(sd_notify("READY=1"));
}

TEST_F(SdNotifyTest, FalseOnBadOrMissingSocket) {
  {
    ScopedEnv env("NOTIFY_SOCKET", (dir_ / "nobody-listens").string());
    EXPECT_FALSE(sd_notify("READY=1"));
  }
  {
    ScopedEnv env("NOTIFY_SOCKET", "");
    EXPECT_FALSE(sd_notify("READY=1"));
  }
  {
    ScopedEnv env("NOTIFY_SOCKET", "relative/path");
    EXPECT_FALSE(sd_notify("READY=1"));
  }
  {
    ScopedEnv env("NOTIFY_SOCKET", "@");
    EXPECT_FALSE(sd_notify("READY=1"));
  }
  {
    ScopedEnv env("NOTIFY_SOCKET", "/" + std::string(200, 'x'));  // longer than sun_path
    EXPECT_FALSE(sd_notify("READY=1"));
  }
  {
    ScopedEnv env("NOTIFY_SOCKET", "@" + std::string(200, 'x'));
    EXPECT_FALSE(sd_notify("READY=1"));
  }
}

TEST_F(SdNotifyTest, FalseOnEmptyState) {
  std::string path = (dir_ / "notify").string();
  Receiver systemd(path);
  ASSERT_TRUE(systemd.bound());
  ScopedEnv env("NOTIFY_SOCKET", path);
  EXPECT_FALSE(sd_notify(""));
  EXPECT_EQ(systemd.receive(), std::nullopt);
}

TEST(SdNotifyWatchdog, NoneWithoutWatchdogUsec) {
  ScopedEnv usec("WATCHDOG_USEC", std::nullopt);
  ScopedEnv pid("WATCHDOG_PID", std::nullopt);
  EXPECT_EQ(sd_watchdog_interval(), std::nullopt);
}

TEST(SdNotifyWatchdog, ParsesUsec) {
  ScopedEnv pid("WATCHDOG_PID", std::nullopt);
  {
    ScopedEnv usec("WATCHDOG_USEC", "30000000");
    EXPECT_EQ(sd_watchdog_interval(), microseconds(30'000'000));
  }
  {
    ScopedEnv usec("WATCHDOG_USEC", "1");
    EXPECT_EQ(sd_watchdog_interval(), microseconds(1));
  }
}

TEST(SdNotifyWatchdog, ChecksWatchdogPid) {
  ScopedEnv usec("WATCHDOG_USEC", "20000000");
  {
    ScopedEnv pid("WATCHDOG_PID", std::to_string(::getpid()));
    EXPECT_EQ(sd_watchdog_interval(), microseconds(20'000'000));
  }
  {
    // Meant for another process (e.g. a parent that exec'd us without clearing it).
    ScopedEnv pid("WATCHDOG_PID", std::to_string(::getpid() + 1));
    EXPECT_EQ(sd_watchdog_interval(), std::nullopt);
  }
  for (const char* bad : {"", "0", "abc", "-1", "12x", " 1"}) {
    ScopedEnv pid("WATCHDOG_PID", bad);
    EXPECT_EQ(sd_watchdog_interval(), std::nullopt) << "WATCHDOG_PID=\"" << bad << "\"";
  }
}

TEST(SdNotifyWatchdog, RejectsGarbageUsec) {
  ScopedEnv pid("WATCHDOG_PID", std::nullopt);
  for (const char* bad : {"", "0", "abc", "-5", "+5", " 5", "5 ", "5s", "1.5", "0x10",
                          "18446744073709551615",        // UINT64_MAX: systemd's "infinity"
                          "99999999999999999999999"}) {  // overflows
    ScopedEnv usec("WATCHDOG_USEC", bad);
    EXPECT_EQ(sd_watchdog_interval(), std::nullopt) << "WATCHDOG_USEC=\"" << bad << "\"";
  }
}

}  // namespace
}  // namespace vramd
