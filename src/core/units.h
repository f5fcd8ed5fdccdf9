// Sizes ("16GiB", "16GB", "512MiB", "1.5GiB") and durations ("300ms", "5m", "1h30m"):
// parsed from config and CLI arguments, printed for people.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/result.h"

namespace vramd {

using Bytes = std::uint64_t;
using Duration = std::chrono::milliseconds;
// Wall-clock time: only for what people read (event times, "since", records). It may jump (NTP,
// suspend, a hand-set clock), so no deadline is ever computed from it.
using TimePoint = std::chrono::time_point<std::chrono::system_clock, std::chrono::milliseconds>;
// Monotonic time: every deadline, timeout, idle period and duration in the core runs on it.
using MonoTime = std::chrono::time_point<std::chrono::steady_clock, std::chrono::milliseconds>;

constexpr Bytes KiB = 1024;
constexpr Bytes MiB = 1024 * KiB;
constexpr Bytes GiB = 1024 * MiB;

// Binary units (KiB, MiB, GiB, TiB) are powers of 1024; SI units (kB, MB, GB, TB) powers of 1000,
// as on a drive label; "B" is bytes. A bare number other than 0 is refused ("12: give a unit,
// e.g. 12GiB"): read as bytes, `--vram 12` granted 12 bytes. Case of the unit is ignored.
Result<Bytes> parse_size(std::string_view text);
// "16.3 GiB", "512 MiB", "0 B": binary units, one decimal above MiB.
std::string format_size(Bytes bytes);

// Units: ms, s, m, h, d; components add up ("1h30m", "1m30s"); a bare number is seconds.
Result<Duration> parse_duration(std::string_view text);
// "300ms", "5s", "5m", "1h30m", "2d3h": the exact value, largest units first.
std::string format_duration(Duration d);
// A rough age for people: "12 s", "12 min", "3 h 5 min", "2 d 4 h".
std::string format_age(Duration d);

// RFC 3339 in UTC with milliseconds: "2026-11-29T13:27:59.123Z".
std::string format_rfc3339(TimePoint t);
Result<TimePoint> parse_rfc3339(std::string_view text);

}  // namespace vramd
