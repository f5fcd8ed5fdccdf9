#include "daemon/sampler.h"

#include <algorithm>

namespace vramd {

SampleTaken take_sample(GpuReader& reader, HostScanner& scanner, const HostScanRequest& request,
                        ProcessListSchedule* lists, MonoTime now, bool list_all) {
  SampleTaken s;
  // GPU first: the process list names PIDs the host scan then finds alive.
  if (lists != nullptr) {
    lists->begin(now, list_all);
    s.gpus = reader.read(*lists);
  } else {
    s.gpus = reader.read();
  }
  HostScanRequest req = request;
  for (const auto& g : s.gpus.gpus)
    for (const auto& p : g.processes) req.pids.push_back(p.pid);
  s.host = scanner.scan(req);
  if (lists != nullptr && s.host.error.empty()) {
    // A kept list is as old as its GPU's last read: when a pid of it is no longer on the host,
    // the lists are read again on the next sample (its memory freed by less than the threshold,
    // or not yet).
    const auto& procs = s.host.processes;  // sorted by pid
    auto alive = [&](int pid) {
      auto it = std::lower_bound(procs.begin(), procs.end(), pid,
                                 [](const ProcessInfo& p, int v) { return p.pid < v; });
      return it != procs.end() && it->pid == pid;
    };
    for (const auto& g : s.gpus.gpus) {
      if (g.processes_listed) continue;
      if (std::any_of(g.processes.begin(), g.processes.end(),
                      [&](const ProcessMemory& p) { return !alive(p.pid); }))
        lists->invalidate();
    }
  }
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
