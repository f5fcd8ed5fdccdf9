// Suspend (issue 28): whether vramd can move a process's GPU memory into host RAM and back
// (NVIDIA's cuda-checkpoint, host/cuda_checkpoint.h), as probed once when the daemon starts.
// The core suspends nothing where it is not offered, and says why once.
#pragma once

#include <string>

namespace vramd {

struct SuspendOffer {
  bool probed = false;   // the probe answered (until then: not offered, not yet known)
  bool offered = false;
  std::string tool;      // the utility, as [gpu] cuda_checkpoint names it
  std::string form;      // offered: "action" (driver 555 and later) or "toggle" (550)
  std::string version;   // offered: the utility's own, "" when it does not say
  std::string why;       // not offered: the reason, one line ("suspend is not offered: ...")
};

}  // namespace vramd
