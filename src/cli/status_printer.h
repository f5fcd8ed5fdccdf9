// Prints the daemon's JSON (/v1/status, /v1/services) as tables for people. Kept apart from what
// fetches it, so the tables are tested on plain JSON.
#pragma once

#include <nlohmann/json.hpp>
#include <ostream>
#include <string>

#include "core/units.h"

namespace vramd {

// `now` is used for "since" ages.
void print_status(std::ostream& out, const nlohmann::json& status, TimePoint now);

// The STATE column of `vramd services`: the probe state ("up", "unreachable", ...), and for a
// service vramd runs its process state too: "up · running", or the process state alone
// ("stopped", "queued", "backoff", "failed") while its API is not answering anyway.
std::string service_state_text(const nlohmann::json& service);

// `vramd services`: one row per service, and under it what went wrong (probe error, why the
// process failed or waits). `now` is used for idle ages.
void print_services(std::ostream& out, const nlohmann::json& services, TimePoint now);

// One refresh of `vramd status --watch`: a header line ("Every 2.0s: vramd status   <time>"),
// then `body` (the table, or the error line). On a terminal the screen is cleared first; elsewhere
// every snapshot after the first is preceded by a blank line.
std::string watch_frame(const std::string& header, const std::string& body, bool tty, bool first);

}  // namespace vramd
