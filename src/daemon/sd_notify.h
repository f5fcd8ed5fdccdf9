// systemd's readiness and watchdog protocol, written by hand (no libsystemd): a datagram on the
// AF_UNIX socket named by $NOTIFY_SOCKET, and the watchdog interval from $WATCHDOG_USEC.
// See sd_notify(3) and sd_watchdog_enabled(3). Outside systemd (no $NOTIFY_SOCKET) both do nothing.
#pragma once

#include <chrono>
#include <optional>
#include <string>

namespace vramd {

// Sends `state` ("READY=1", "WATCHDOG=1", "STOPPING=1", "STATUS=...", several joined by '\n') to
// $NOTIFY_SOCKET (a path, or an abstract name written "@name"), as systemd's sd_notify does.
// Returns false with no socket set (not under systemd), an empty state, or on error; never throws.
// Blocking-free in practice (one sendto on a local datagram socket); safe from any thread.
bool sd_notify(const std::string& state);

// The watchdog interval from $WATCHDOG_USEC (only when $WATCHDOG_PID is unset or equals getpid());
// nullopt when none, or when either variable is not a positive decimal number. The daemon pings
// ("WATCHDOG=1") at half of it.
std::optional<std::chrono::microseconds> sd_watchdog_interval();

}  // namespace vramd
