// Prints /v1/status JSON as a table for people. Kept apart from what fetches it.
#pragma once

#include <nlohmann/json.hpp>
#include <ostream>

#include "core/units.h"

namespace vramd {

// `now` is used for "since" ages.
void print_status(std::ostream& out, const nlohmann::json& status, TimePoint now);

}  // namespace vramd
