// A simulator trace (JSON lines, src/sim/trace.h) → Trace: any text gives a trace or an error
// with path:line:column, never a crash; a parsed trace's references hold.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "sim/trace.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto t = vramd::sim::parse_trace(text, "fuzz.jsonl");
  if (!t) {
    if (t.error().rfind("fuzz.jsonl", 0) != 0) std::abort();  // every error names the file
    return 0;
  }
  for (const auto& r : t->requests)
    if (r.service >= t->services.size() || r.t > t->end) std::abort();
  for (const auto& s : t->services)
    if (!t->gpu(s.gpu)) std::abort();
  for (const auto& j : t->jobs)
    if (!t->gpu(j.gpu) || j.t > t->end) std::abort();
  return 0;
}
