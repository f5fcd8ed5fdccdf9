#include "daemon/sd_notify.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string_view>

namespace vramd {
namespace {

// A whole decimal number with no sign, spaces or trailing text; nullopt otherwise.
std::optional<std::uint64_t> parse_unsigned(std::string_view text) {
  if (text.empty()) return std::nullopt;
  std::uint64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

}  // namespace

bool sd_notify(const std::string& state) {
  if (state.empty()) return false;
  const char* env = std::getenv("NOTIFY_SOCKET");
  if (env == nullptr) return false;
  std::string_view name(env);
  // "/path" or "@abstract"; anything else (a relative path, systemd's newer "vsock:" form) is not
  // supported here.
  if (name.size() < 2 || (name[0] != '/' && name[0] != '@')) return false;

  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  socklen_t len = 0;
  if (name[0] == '@') {
    // Abstract namespace: a leading NUL, then the name's bytes; the length counts exactly those,
    // with no trailing NUL (which would be part of the name).
    if (name.size() > sizeof(addr.sun_path)) return false;
    addr.sun_path[0] = '\0';
    std::memcpy(addr.sun_path + 1, name.data() + 1, name.size() - 1);
    len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + name.size());
  } else {
    if (name.size() >= sizeof(addr.sun_path)) return false;  // room for the terminating NUL
    std::memcpy(addr.sun_path, name.data(), name.size());
    len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + name.size() + 1);
  }

  int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  ssize_t sent = -1;
  do {
    sent = ::sendto(fd, state.data(), state.size(), MSG_NOSIGNAL,
                    reinterpret_cast<sockaddr*>(&addr), len);
  } while (sent < 0 && errno == EINTR);
  int saved = errno;
  ::close(fd);
  errno = saved;
  return sent >= 0 && static_cast<std::size_t>(sent) == state.size();
}

std::optional<std::chrono::microseconds> sd_watchdog_interval() {
  const char* usec_env = std::getenv("WATCHDOG_USEC");
  if (usec_env == nullptr) return std::nullopt;
  if (const char* pid_env = std::getenv("WATCHDOG_PID"); pid_env != nullptr) {
    auto pid = parse_unsigned(pid_env);
    if (!pid || *pid == 0 || *pid != static_cast<std::uint64_t>(::getpid())) return std::nullopt;
  }
  auto usec = parse_unsigned(usec_env);
  // 0 means off; UINT64_MAX is systemd's "infinity"; values past microseconds' range are rejected.
  using Rep = std::chrono::microseconds::rep;
  if (!usec || *usec == 0 || *usec > static_cast<std::uint64_t>(std::numeric_limits<Rep>::max())) {
    return std::nullopt;
  }
  return std::chrono::microseconds(static_cast<Rep>(*usec));
}

}  // namespace vramd
