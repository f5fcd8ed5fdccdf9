// NVIDIA's `cuda-checkpoint` utility (driver 550+; ../shared/reference/gpu-and-host.md, "CUDA
// checkpoint"): suspends a running process's CUDA state (its device memory copied to host RAM,
// the GPU released, its CPU threads left running) and resumes it on the same GPU.
//
// Each operation runs the utility through `run_process` (no shell, killed after a timeout) and
// parses its answer; its own words ("Could not checkpoint on process ID 12: ...") end up in the
// error. Whatever fails, the process is put back to `running` where the utility allows it, never
// left locked or half checkpointed. Blocking: call it off the event loop.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/result.h"
#include "core/units.h"

namespace vramd {

// A process's CUDA state as `cuda-checkpoint --get-state` prints it.
enum class CudaProcessState {
  running,       // CUDA works as usual
  locked,        // CUDA calls that launch work or change the GPU block; device memory still held
  checkpointed,  // device memory is in host RAM and the GPU is released
  failed,        // the driver gave up on a checkpoint or restore: neither running nor suspended
};
std::string_view to_string(CudaProcessState s);
// "running\n" and the like. Error naming the text for anything else.
Result<CudaProcessState> parse_cuda_process_state(std::string_view text);

// Which commands the utility knows (its --help says).
enum class CheckpointForm {
  action,  // 555+: --action lock|checkpoint|restore|unlock (lock with --timeout) and --get-state
  toggle,  // 550: --toggle only (running <-> checkpointed), with --get-state to aim it
};

struct CheckpointTimeouts {
  Duration call = std::chrono::seconds(10);   // --help, --get-state, unlock; on top of a lock's
  Duration copy = std::chrono::seconds(120);  // checkpoint, restore, toggle: device memory copied
};

// What `cuda-checkpoint --help` says: its form and version ("570.86.10"; "" when it does not
// say). Error (the reason) when it offers neither form, or --toggle without --get-state.
struct CheckpointHelp {
  CheckpointForm form = CheckpointForm::action;
  std::string version;
};
Result<CheckpointHelp> parse_cuda_checkpoint_help(std::string_view help);

// A utility found to work. Its operations only read it: one may be shared by threads.
class CudaCheckpoint {
 public:
  // Runs `path --help` (path: as configured, a name looked up in PATH or a path) and tells its
  // form once. Error "suspend is not offered: REASON" (one line) when the utility is missing,
  // cannot run (no driver, an old driver) or offers nothing vramd can use.
  static Result<CudaCheckpoint> probe(const std::string& path, CheckpointTimeouts timeouts = {});

  CheckpointForm form() const { return form_; }
  const std::string& version() const { return version_; }
  const std::string& path() const { return path_; }

  // `--get-state --pid P`. Error with the utility's words: not a CUDA process, no such process.
  Result<CudaProcessState> state(int pid) const;
  // running -> checkpointed: `--action lock --pid P --timeout MS` then `--action checkpoint`
  // (or one `--toggle`). Already checkpointed: nothing to do. On any failure the process is put
  // back to running (unlocked, or restored and unlocked) and the error says so, or says in which
  // state it had to be left.
  Status suspend(int pid, Duration lock_timeout) const;
  // checkpointed (or locked) -> running: `--action restore` then `--action unlock` (or one
  // `--toggle`). Already running: nothing to do. A restore that fails leaves it checkpointed,
  // its memory still in host RAM; a later resume may succeed, though a 580 driver is reported
  // to refuse every restore after one that ran out of memory (NVIDIA/cuda-checkpoint#44).
  Status resume(int pid) const;

 private:
  CudaCheckpoint(std::string path, CheckpointForm form, std::string version,
                 CheckpointTimeouts timeouts)
      : path_(std::move(path)), form_(form), version_(std::move(version)), timeouts_(timeouts) {}

  // Runs one operation; error "COMMAND: WORDS (exit N)" unless it exited 0.
  Result<std::string> run(const std::vector<std::string>& args, Duration timeout) const;
  // After a failed suspend: back to running where possible. Says what became of the process.
  std::string put_back(int pid) const;

  std::string path_;
  CheckpointForm form_;
  std::string version_;
  CheckpointTimeouts timeouts_;
};

}  // namespace vramd
