// The Arbiter: the pure core. It is fed events with the time they happened and returns the
// actions to take; queries return snapshots. No I/O, no clock, no threads (DESIGN.md).
#pragma once

#include <deque>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "core/config.h"
#include "core/history.h"
#include "core/model.h"
#include "core/owners.h"

namespace vramd {

// ---- Events: what happened ----

// One sample of every GPU and of the host, taken together.
struct SampleTaken {
  GpuReading gpus;
  HostSnapshot host;
};
using Event = std::variant<SampleTaken>;

// ---- Actions: what the shell must do ----

// A change worth telling people about ("comfyui now holds 16.3 GiB on GPU 0").
struct EventRecord {
  TimePoint at{};
  std::string type;  // "gpu.lost", "gpu.recovered", "gpu.error", "owner.appeared", "owner.gone", ...
  std::optional<unsigned> gpu;
  std::string subject;  // owner or service name, when there is one
  std::string message;
};
struct EmitEvent {
  EventRecord event;
};
using Action = std::variant<EmitEvent>;

// ---- Snapshots ----

struct GpuStatus {
  GpuSample sample;  // as read (processes included)
  bool per_process_available = true;  // every process has a number
  std::optional<Bytes> baseline;      // what attribution used
  std::string baseline_source;        // "configured" | "learned" | "reserved" | "residual" | ""
  std::vector<Holding> holdings;
};

struct StatusSnapshot {
  bool sampled = false;  // false until the first sample arrives
  TimePoint sampled_at{};
  std::string backend;
  std::string driver_version;
  std::string error;  // the whole read failed
  std::vector<GpuStatus> gpus;
};

class Arbiter {
 public:
  explicit Arbiter(Config config);

  // Feeds one event that happened at `now`. Returns the actions to take, in order.
  std::vector<Action> handle(const Event& event, TimePoint now);

  // What the host scan must gather for owner resolution.
  HostScanRequest scan_request() const;

  const StatusSnapshot& status() const { return status_; }
  // REQUIRES: gpu < number of GPUs seen; else an empty view.
  HistoryView history(unsigned gpu, TimePoint now, Duration window, size_t max_points) const;
  const Config& config() const { return config_; }

 private:
  std::vector<Action> on_sample(const SampleTaken& s, TimePoint now);

  Config config_;
  OwnerResolver resolver_;
  StatusSnapshot status_;
  // Per GPU index: since when each owner has held memory, and the learned baseline.
  std::map<unsigned, std::map<Owner, TimePoint>> since_;
  std::map<unsigned, Bytes> learned_baseline_;
  std::map<unsigned, GpuHealth> health_;
  std::map<unsigned, History> history_;
};

}  // namespace vramd
