// The ledger: who holds what on every GPU (DESIGN.md "Attribution"). It resolves each sample's
// processes to owners, attributes every byte, keeps since-when per owner, the learned baseline,
// each GPU's health and the per-owner history. It knows nothing of services' APIs, leases or
// supervision: what it needs from them (processes vramd knows, services' own figures) is handed in.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/actions.h"
#include "core/clock.h"
#include "core/config.h"
#include "core/events.h"
#include "core/history.h"
#include "core/model.h"
#include "core/owners.h"

namespace vramd {

struct GpuStatus {
  GpuSample sample;                   // as read (processes included)
  bool per_process_available = true;  // every process has a number
  std::optional<Bytes> baseline;      // what attribution used
  std::string baseline_source;        // "configured" | "learned" | "reserved" | "residual" | ""
  std::vector<Holding> holdings;
};

struct StatusSnapshot {
  bool sampled = false;  // false until the first sample arrives
  MonoTime sampled_at{};
  std::string backend;
  std::string driver_version;
  std::string error;  // the whole read failed
  std::vector<GpuStatus> gpus;
};

class Ledger {
 public:
  // REQUIRES: `config` outlives the ledger (the Arbiter owns both).
  explicit Ledger(const Config& config);
  // The config's services changed (one was discovered): match rules are read again.
  void services_changed() { resolver_ = OwnerResolver(config_.services); }

  // What the host scan must gather for owner resolution.
  HostScanRequest scan_request() const;

  // Attributes one sample. `hints`: the processes vramd started and lease holders' pids;
  // `self_reports`: services' own figures that cover their processes. Emits gpu.* and owner.*
  // events.
  void on_sample(const SampleTaken& s, const OwnerHints& hints,
                 const std::map<Owner, Bytes>& self_reports, const Now& now,
                 std::vector<Action>& actions);

  const StatusSnapshot& status() const { return status_; }
  // REQUIRES: nothing; an unknown GPU gives an empty view.
  HistoryView history(unsigned gpu, MonoTime now, Duration window, size_t max_points) const;
  // Host RAM of each service's processes in the last sample (services with none are absent).
  const std::map<std::string, Bytes>& service_rss() const { return service_rss_; }
  // Each service's host processes, ascending.
  const std::map<std::string, std::vector<int>>& service_pids() const { return service_pids_; }
  std::optional<Bytes> mem_available() const { return mem_available_; }
  std::optional<Bytes> mem_total() const { return mem_total_; }
  // Who held GPU memory in the last sample, largest first (owner name, bytes >= at_least).
  std::vector<std::pair<std::string, Bytes>> holders(Bytes at_least) const;

 private:
  const Config& config_;
  OwnerResolver resolver_;
  StatusSnapshot status_;
  // Per GPU index: since when each owner has held memory, and the learned baseline.
  std::map<unsigned, std::map<Owner, MonoTime>> since_;
  std::map<unsigned, Bytes> learned_baseline_;
  std::map<unsigned, GpuHealth> health_;
  std::map<unsigned, History> history_;
  std::map<std::string, Bytes> service_rss_;
  std::map<std::string, std::vector<int>> service_pids_;
  std::optional<Bytes> mem_available_;
  std::optional<Bytes> mem_total_;
  // The owner of each pid the GPUs listed in the last sample: one the host no longer lists
  // (exiting, its memory not yet released) keeps it (keep_owners_of_exiting).
  std::unordered_map<int, ResolvedOwner> gpu_owners_;

  // A GPU process the host's table no longer lists keeps the owner it had while the driver still
  // lists it: a stopped service's bytes stay its own until they are gone, so its stop's verdict
  // is the GPU's (issue 46: they showed as `process ?[PID]` while it exited).
  void keep_owners_of_exiting(const SampleTaken& s, std::unordered_map<int, ResolvedOwner>& owners);
};

}  // namespace vramd
