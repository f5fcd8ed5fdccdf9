// When the shell reads the driver's process lists (issue "light on the driver"). Each of
// nvmlDeviceGet{Compute,Graphics,MPSCompute}RunningProcesses takes the driver's global lock and
// costs milliseconds (MangoHud measured 4.49 ms on an RTX 4090, where nvmlDeviceGetMemoryInfo
// took 11.6 µs), and a desktop on the same card stutters when they are polled. So every sample
// reads each GPU's memory and utilization, and its process lists only when:
//   - its used memory moved by at least `threshold` since its last lists were read;
//   - something vramd did may have changed them (a start, an exit, a grant, an unload, a wake):
//     the shell asks for every GPU's lists on the next sample (`force`);
//   - `interval` has passed since its last lists;
//   - it has never been listed, or the last lists could not be read.
// Between two reads the last lists stand for the GPU's processes (their figures moved by less
// than `threshold` in all). Pure: the shell hands in the time; it runs on the sampler thread,
// the only user of the reader.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/model.h"
#include "core/units.h"

namespace vramd {

struct ProcessScanPolicy {
  Bytes threshold = 32 * MiB;
  Duration interval = std::chrono::seconds(10);
};

class ProcessListSchedule {
 public:
  explicit ProcessListSchedule(ProcessScanPolicy policy = {}) : policy_(policy) {}

  // A sample begins at `now`; `force`: list every GPU this time (as after invalidate()).
  void begin(MonoTime now, bool force) {
    now_ = now;
    force_ = force || invalid_;
    invalid_ = false;
  }
  // The key of a GPU's lists: its UUID, else its label.
  static std::string key_of(const GpuSample& g) { return g.uuid.empty() ? g.label : g.uuid; }
  // Whether GPU `key` (key_of) must have its lists read, its memory now reading `used`.
  bool due(const std::string& key, Bytes used) const;
  // Its lists were read: they stand until the next read.
  void listed(const std::string& key, Bytes used, bool readable,
              const std::vector<ProcessMemory>& processes);
  // The lists kept for `key` (due() was false, so there are some).
  const std::vector<ProcessMemory>& last(const std::string& key) const;
  // A kept list named a pid that is gone: the next sample lists every GPU.
  void invalidate() { invalid_ = true; }

 private:
  struct Kept {
    Bytes used = 0;
    MonoTime at{};
    std::vector<ProcessMemory> processes;
  };
  ProcessScanPolicy policy_;
  MonoTime now_{};
  bool force_ = true;
  bool invalid_ = false;
  std::map<std::string, Kept> kept_;
};

}  // namespace vramd
