#include "daemon/sampler.h"

namespace vramd {

SampleTaken take_sample(GpuReader& reader, HostScanner& scanner, const HostScanRequest& request) {
  SampleTaken s;
  // GPU first: the process list names PIDs the host scan then finds alive.
  s.gpus = reader.read();
  s.host = scanner.scan(request);
  return s;
}

TimePoint system_now() {
  return std::chrono::time_point_cast<std::chrono::milliseconds>(std::chrono::system_clock::now());
}

}  // namespace vramd
