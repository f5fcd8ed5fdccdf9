// vramd.toml text → Config (src/core/config.h): any text gives a Config or an error, never a crash.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto c = vramd::parse_config(text, "fuzz.toml");
  if (c) {
    for (const auto& s : c->services) (void)c->find_service(s.name);
  } else {
    (void)c.error().size();
  }
  return 0;
}
