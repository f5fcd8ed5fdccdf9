// HostScanner: the narrow interface through which the shell reads the host: the process table,
// cgroups (with container names), listening ports, pid files and memory.
#pragma once

#include <string>
#include <vector>

#include "core/model.h"

namespace vramd {

class HostScanner {
 public:
  virtual ~HostScanner() = default;
  // Blocking: runs off the event loop.
  virtual HostSnapshot scan(const HostScanRequest& request) = 0;
};

}  // namespace vramd
