// The Docker Engine socket's answers (src/host/docker.h): the raw HTTP response and the
// /containers/json body.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "host/docker.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  (void)vramd::parse_http_response(text, true);
  (void)vramd::parse_http_response(text, false);
  (void)vramd::parse_containers_json(text);
  return 0;
}
