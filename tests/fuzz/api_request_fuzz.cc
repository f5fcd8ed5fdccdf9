// What the API parses from a request (src/server/target.h, src/core/units.h): the target's path
// and query string, and the values of its parameters and of a lease body's fields (sizes,
// durations, times). The input's first line is the target; the rest is a JSON body whose string
// fields go through the same parsers the API uses. (The lease body's field checks themselves
// are inline in src/server/api.cc and are not reached here.)
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/lease.h"
#include "core/units.h"
#include "server/target.h"

namespace {

void values(std::string_view v) {
  if (auto s = vramd::parse_size(v)) (void)vramd::format_size(*s);
  if (auto d = vramd::parse_duration(v)) {
    auto back = vramd::parse_duration(vramd::format_duration(*d));
    if (!back || *back != *d) __builtin_trap();  // format_duration prints the exact value
    (void)vramd::format_age(*d);
  }
  if (auto t = vramd::parse_rfc3339(v)) (void)vramd::format_rfc3339(*t);
  // A lease's on_host_lost (several hosts): what parses prints back as itself.
  if (auto o = vramd::parse_on_host_lost(v); o && v != vramd::to_string(*o)) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  size_t nl = text.find('\n');
  vramd::Target t = vramd::parse_target(text.substr(0, nl));
  for (const auto& [k, v] : t.query) {
    (void)t.param(k);
    (void)t.flag(k);
    values(v);
  }
  if (nl == std::string_view::npos) return 0;
  nlohmann::json body = nlohmann::json::parse(text.substr(nl + 1), nullptr, false);
  if (body.is_discarded() || !body.is_object()) return 0;
  for (const auto& [k, v] : body.items()) {
    if (v.is_string()) values(v.get<std::string>());
  }
  (void)body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return 0;
}
