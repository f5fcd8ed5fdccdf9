// A request target split into its path and decoded query parameters: pure, so it is fuzzed
// (tests/fuzz/api_target_fuzz.cc) apart from the API that uses it.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace vramd {

// Splits "/v1/history?gpu=0&window=15m" into path and decoded query parameters.
struct Target {
  std::string path;
  std::vector<std::pair<std::string, std::string>> query;
  const std::string* param(std::string_view name) const;
  bool flag(std::string_view name) const;  // present and not "0"/"false"
};
Target parse_target(std::string_view target);

// %XX decoded (a malformed escape is kept as written), '+' as a space.
std::string url_decode(std::string_view s);

}  // namespace vramd
