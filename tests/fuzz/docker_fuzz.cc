// The Docker Engine socket's answers (src/host/docker.h, src/host/docker_engine.h): the raw HTTP
// response, the /containers/json body, a container's inspect, one /events line, the events
// stream's chunked body fed in two pieces, and a container's logs (multiplexed and raw).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "host/docker.h"
#include "host/docker_engine.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  (void)vramd::parse_http_response(text, true);
  (void)vramd::parse_http_response(text, false);
  (void)vramd::parse_containers_json(text);
  (void)vramd::parse_container_inspect(text);
  (void)vramd::parse_docker_event(text);
  (void)vramd::parse_docker_timestamp(text);
  size_t cut = size ? data[0] % (size + 1) : 0;
  {
    vramd::ChunkedDecoder d;
    std::string out;
    if (d.feed(text.substr(0, cut), out)) (void)d.feed(text.substr(cut), out);
  }
  for (bool tty : {false, true}) {
    vramd::DockerLogDemux demux(tty);
    std::vector<std::string> lines;
    if (demux.feed(text.substr(0, cut), lines) && demux.feed(text.substr(cut), lines))
      (void)demux.finish(lines);
  }
  return 0;
}
