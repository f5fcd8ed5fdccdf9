// /proc/PID/cgroup text and cgroup paths (src/host/cgroup.h).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "host/cgroup.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  (void)vramd::parse_cgroup(text);
  (void)vramd::classify_cgroup_path(text);
  return 0;
}
