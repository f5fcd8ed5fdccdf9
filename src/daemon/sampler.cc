#include "daemon/sampler.h"

namespace vramd {

SampleTaken take_sample(GpuReader& reader, HostScanner& scanner, const HostScanRequest& request) {
  SampleTaken s;
  // GPU first: the process list names PIDs the host scan then finds alive.
  s.gpus = reader.read();
  HostScanRequest req = request;
  for (const auto& g : s.gpus.gpus)
    for (const auto& p : g.processes) req.pids.push_back(p.pid);
  s.host = scanner.scan(req);
  return s;
}

TimePoint system_now() {
  return std::chrono::time_point_cast<std::chrono::milliseconds>(std::chrono::system_clock::now());
}

MonoTime mono_now() {
  return std::chrono::time_point_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now());
}

Now read_clocks() { return Now{mono_now(), system_now()}; }

}  // namespace vramd
