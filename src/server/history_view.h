// The durations history as the API shows it (docs/history.md, docs/api.md "History"): records,
// comparisons by version or arguments, and crashes split by the variant they ran on. Pure.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/durations.h"
#include "core/result.h"
#include "store/crash_store.h"

namespace vramd {

nlohmann::json to_json(const DurationRecord& r);
nlohmann::json to_json(const DurationGroup& g);
// The variants oldest first, each with what changed from the one before it (args_diff) and
// from the first (args_from_first).
nlohmann::json variants_json(const std::vector<ServiceVariant>& variants);

// `since` as an RFC 3339 time, or a duration back from `now` ("7d", "12h").
Result<TimePoint> parse_since(const std::string& text, TimePoint now);

// One service's crashes (any order) split by the variant each ran on, per signature: how many
// on each, over how many days it ran, and one line to read ("cuda-async-offload: 7 in 3.0 days
// on args 1a2b3c4d5e6f, 0 in 9.0 days since +--disable-async-offload"). A signature whose
// suggested fix names an option that `current_args` now holds is marked applied, since the
// first variant that held it.
nlohmann::json crash_split_json(const std::vector<CrashRecord>& crashes,
                                const std::vector<ServiceVariant>& variants,
                                const std::vector<std::string>& current_args, TimePoint now);

}  // namespace vramd
