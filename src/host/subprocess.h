// Running a host tool (nvidia-smi, systemctl, journalctl) and reading what it wrote: fork/exec,
// no shell, stdin /dev/null, none of vramd's descriptors inherited, killed after a timeout.
// Blocking: called off the event loop (the sampler thread, the worker, a watch's own thread).
#pragma once

#include <string>
#include <vector>

#include "core/units.h"

namespace vramd {

struct ProcessOutput {
  std::string out;
  std::string err;
  int exit_code = -1;       // -1 when it did not exit normally
  bool timed_out = false;   // killed after the timeout
  std::string spawn_error;  // non-empty: it could not be started at all (not found, no exec)
};

// Runs argv (argv[0] looked up in PATH when it has no '/') and collects its stdout and stderr
// until it exits or `timeout` passes (then it is killed with SIGKILL).
ProcessOutput run_process(const std::vector<std::string>& argv, Duration timeout);

}  // namespace vramd
