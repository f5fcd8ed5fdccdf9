// Supervision's timings, shared by its two files (supervision.cc: processes vramd runs;
// supervision_containers.cc: containers). Not for use outside core/supervision*.
#pragma once

#include <optional>
#include <string>

#include "core/clock.h"
#include "core/units.h"

namespace vramd::supervision_detail {

inline constexpr Duration kStartingHealthInterval = std::chrono::seconds(1);
inline constexpr Duration kFirstBackoff = std::chrono::seconds(1);
inline constexpr Duration kMaxBackoff = std::chrono::minutes(5);
inline constexpr Duration kStopVerifyTimeout = std::chrono::seconds(10);
inline constexpr Duration kHealthyResetsBackoff = std::chrono::minutes(1);
inline constexpr Bytes kHeld = 64 * MiB;  // less than this left on the GPU counts as gone

// "exited with status 1", "killed by SIGKILL".
std::string exit_text(std::optional<int> code, std::optional<int> sig);

}  // namespace vramd::supervision_detail
