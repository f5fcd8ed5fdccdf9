// The Prometheus text format (src/services/prometheus.h) and the busy/sum helpers over it.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "services/parsers.h"
#include "services/prometheus.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  vramd::PromExposition e = vramd::parse_prometheus(text);
  for (const auto& s : e.samples) {
    (void)e.sum(s.name);
    (void)e.declared(s.name);
  }
  (void)vramd::sum_metrics(e, {"vllm:num_requests_running", "vllm:num_requests_waiting"});
  (void)vramd::busy_from_metrics(e, {"sglang:num_running_reqs", "sglang:num_queue_reqs"});
  return 0;
}
