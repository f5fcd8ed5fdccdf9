// /proc/net/tcp and tcp6 text (src/host/ports.h).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "host/ports.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  for (const auto& l : vramd::parse_proc_net_tcp(text)) {
    if (l.port < 0 || l.port > 65535) __builtin_trap();  // a port is 16 bits
  }
  return 0;
}
