// The Arbiter: the pure core. It is fed events with the time they happened and returns the
// actions to take; queries return snapshots. No I/O, no clock, no threads (DESIGN.md).
#pragma once

#include <deque>
#include <set>
#include <tuple>
#include <unordered_map>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "core/config.h"
#include "core/history.h"
#include "core/lease.h"
#include "core/model.h"
#include "core/owners.h"
#include "core/service_model.h"
#include "core/unload.h"

namespace vramd {

// ---- Events: what happened ----

// One sample of every GPU and of the host, taken together.
struct SampleTaken {
  GpuReading gpus;
  HostSnapshot host;
};
// A service's API answered a probe (or failed to).
struct ProbeDone {
  std::string service;
  ServiceProbe probe;
};
// Someone asks to free a service's memory. request_id (non-zero) is echoed in UnloadFinished.
struct UnloadRequested {
  std::string service;
  std::string reason = "manual";  // "manual" | "eviction"
  uint64_t request_id = 0;
  bool force = false;  // ignore the backoff and a busy probe
};
// The server answered the unload call that CallUnload asked for.
struct UnloadCallDone {
  std::string service;
  uint64_t unload_id = 0;
  UnloadCall call;
  Duration took{0};
};
// A restart or stop that the Arbiter asked for has finished.
struct LifecycleDone {
  std::string service;
  std::string action;  // "restart" | "stop"
  bool ok = false;
  std::string message;
};
// Time passes (every 250 ms): deadlines are checked even when no sample arrives.
struct Tick {};
// A client asks for a lease. The shell numbers it (ids never repeat, across restarts too) and
// fills the holder pid's start ticks; the Arbiter queues it and admits it when it fits.
struct LeaseRequested {
  uint64_t id = 0;
  LeaseRequest request;
};
// The client is done with a lease (granted: released; queued: cancelled).
struct LeaseReleased {
  uint64_t id = 0;
  std::optional<int> exit_status;
};
// The client is still there (any request about the lease counts).
struct LeaseHeartbeat {
  uint64_t id = 0;
};
// A lease holder's process is gone (its pid exited, or was reused by another process).
struct HolderExited {
  uint64_t id = 0;
};
// Someone asks to start, stop or restart a service. request_id (non-zero) is echoed in
// CommandFinished.
struct ServiceCommand {
  std::string service;
  std::string action;  // "start" | "stop" | "restart"
  uint64_t request_id = 0;
  bool force = false;  // start at once, without waiting for GPU room (start admission)
};
// The shell started (or failed to start, or re-adopted after a restart of vramd) a managed child.
struct ChildStarted {
  std::string service;
  bool ok = false;
  int pid = 0;
  uint64_t start_ticks = 0;
  std::string error;  // why it could not start ("port 8188 is taken by python3[812]")
  bool adopted = false;
};
// A managed child exited. Adopted children are not ours to wait for: no status then.
struct ChildExited {
  std::string service;
  int pid = 0;
  std::optional<int> exit_code;
  std::optional<int> signal;
};
// A health check that CheckHealth asked for has its answer.
struct HealthChecked {
  std::string service;
  bool ok = false;
  std::string message;
};
using Event = std::variant<SampleTaken, ProbeDone, UnloadRequested, UnloadCallDone, LifecycleDone,
                           Tick, LeaseRequested, LeaseReleased, LeaseHeartbeat, HolderExited,
                           ServiceCommand, ChildStarted, ChildExited, HealthChecked>;

// ---- Actions: what the shell must do ----

// A change worth telling people about ("comfyui now holds 16.3 GiB on GPU 0").
struct EventRecord {
  TimePoint at{};
  std::string type;  // "gpu.lost", "gpu.recovered", "gpu.error", "owner.appeared", "owner.gone", ...
  std::optional<unsigned> gpu;
  std::string subject;  // owner or service name, when there is one
  std::string message;
  std::optional<UnloadVerdict> verdict;  // for "unload.*" verdicts: the figures
};
struct EmitEvent {
  EventRecord event;
};
// Call the service's unload API; answer with UnloadCallDone.
struct CallUnload {
  std::string service;
  uint64_t unload_id = 0;
};
// Sample every 250 ms while an unload is being verified, at the configured interval otherwise.
struct SetFastSampling {
  bool on = false;
};
// An unload has its verdict. request_id is that of the UnloadRequested (0 for TTL unloads).
struct UnloadFinished {
  uint64_t request_id = 0;
  bool refused = false;  // not attempted (busy, in backoff, unknown service): see message
  UnloadVerdict verdict;
};
// Restart or stop a service by the means vramd has for it; answer with LifecycleDone.
struct Lifecycle {
  std::string service;
  std::string action;  // "restart" | "stop"
  std::string via;     // "container" | "unit"
  std::string target;  // container name or unit name
};
// A lease was created or changed state: persist it, wake whoever waits on it; an ended one
// leaves the Arbiter (its job record is the shell's to keep).
struct LeaseChanged {
  Lease lease;
};
// Start the service's `start` command (own process group and session, output to its log);
// answer with ChildStarted.
struct SpawnService {
  std::string service;
};
// Send a signal to a managed child's process group.
struct SignalService {
  std::string service;
  int pid = 0;
  int signal = 0;
};
// Run the service's health check; answer with HealthChecked.
struct CheckHealth {
  std::string service;
};
// A managed child died unexpectedly: keep its log tail and diagnose it (the shell reads the log).
struct RecordCrash {
  std::string service;
  int pid = 0;
  std::optional<int> exit_code;
  std::optional<int> signal;
  TimePoint at{};
  std::string reason;  // vramd's own cause when it has one ("start timed out after 2m")
  std::vector<std::pair<std::string, Bytes>> gpu_holders;  // who held GPU memory then, largest first
};
// A start/stop/restart request has its outcome.
struct CommandFinished {
  uint64_t request_id = 0;
  bool ok = false;
  std::string message;
};
using Action = std::variant<EmitEvent, CallUnload, SetFastSampling, UnloadFinished, Lifecycle,
                            LeaseChanged, SpawnService, SignalService, CheckHealth, RecordCrash,
                            CommandFinished>;

// A service whose process vramd runs (it has `start`).
struct ManagedState {
  // "stopped" | "queued" (waiting for GPU room: start admission) | "starting" | "running" |
  // "stopping" | "backoff" (waiting to restart) | "failed"
  std::string state = "stopped";
  std::optional<uint64_t> start_lease;  // the lease its start waits on, or holds until it is up
  std::optional<int> pid;
  uint64_t start_ticks = 0;
  bool adopted = false;
  std::optional<TimePoint> started_at;
  std::optional<TimePoint> healthy_since;
  std::optional<TimePoint> stop_sent_at;
  bool kill_sent = false;
  std::optional<TimePoint> next_health;
  bool health_in_flight = false;
  int health_failures = 0;
  std::string last_health;  // the last check's message
  std::deque<TimePoint> restarts;  // within restart_window
  Duration backoff{0};
  std::optional<TimePoint> restart_at;
  bool restart_after_stop = false;
  std::string crash_on_exit;  // set when vramd ends it for a failure (start timeout, health)
  std::string reason;         // why it failed, or the last thing that happened
  std::optional<int> last_exit_code, last_signal;
  std::optional<TimePoint> last_exit_at;
  int restart_count = 0;  // since vramd started
  // Stop verification: the GPU holdings must go.
  std::optional<TimePoint> verify_until;
  TimePoint stop_requested_at{};
  Bytes bytes_at_stop = 0;
  std::vector<std::pair<uint64_t, std::string>> waiting;  // (request id, "start"|"stop")
};

// What vramd knows about a configured service right now.
struct ServiceStatus {
  std::string name;
  std::string kind;
  std::string url;
  // "unknown" (not probed yet) | "up" | "unreachable" | "unloading"
  std::string state = "unknown";
  std::optional<bool> busy;
  std::optional<int> queue_depth;
  std::vector<std::string> models;
  std::string probe_error;
  std::optional<TimePoint> last_probe;
  std::optional<TimePoint> last_activity;
  std::optional<TimePoint> idle_since;  // while idle: last_activity (derived, not kept)
  Bytes bytes = 0;                      // Σ of its holdings over all GPUs
  std::vector<std::pair<unsigned, Bytes>> per_gpu;
  std::optional<unsigned> last_gpu;  // the GPU it was last seen holding memory on
  std::optional<Bytes> rss;
  std::optional<Bytes> self_reported_vram;
  std::optional<Duration> unload_after_idle;
  std::optional<UnloadVerdict> last_unload;
  std::optional<TimePoint> backoff_until;
  std::string can_restart;  // "container" | "unit" | "" (how vramd could restart or stop it)
  Duration reload_cost{0};  // how long a load took (measured), or the kind's default
  std::optional<TimePoint> load_started;  // its memory is growing from (almost) nothing
  bool reload_measured = false;
  std::optional<ManagedState> managed;  // services with `start`
};

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

// Idle since last activity while reachable and not busy; nullopt otherwise.
std::optional<TimePoint> idle_since(const ServiceStatus& st);

class Arbiter {
 public:
  explicit Arbiter(Config config);

  // Feeds one event that happened at `now`. Returns the actions to take, in order.
  std::vector<Action> handle(const Event& event, TimePoint now);

  // What the host scan must gather for owner resolution.
  HostScanRequest scan_request() const;

  const StatusSnapshot& status() const { return status_; }
  std::vector<ServiceStatus> services(TimePoint now) const;
  const ServiceStatus* service(const std::string& name) const;
  bool fast_sampling() const { return !unloads_.empty(); }
  // REQUIRES: gpu < number of GPUs seen; else an empty view.
  HistoryView history(unsigned gpu, TimePoint now, Duration window, size_t max_points) const;
  const Config& config() const { return config_; }

  // Leases: active ones (queued in admission order, then granted), and recently ended ones.
  std::vector<Lease> leases() const;
  bool has_leases() const { return !leases_.empty(); }
  const Lease* lease(uint64_t id) const;
  // Queued leases ahead of this one on its GPU (0 = next); nullopt when not queued.
  std::optional<size_t> queue_position(uint64_t id) const;
  // GPU -> the queued lease first in line there (as of the last admission pass).
  const std::map<unsigned, uint64_t>& queue_heads() const { return heads_; }
  // Holder pids to watch: (lease id, pid, start ticks).
  std::vector<std::tuple<uint64_t, int, uint64_t>> lease_holders() const;
  // Host RAM not yet promised to granted leases.
  std::optional<Bytes> ram_available() const;
  // Brings back the active leases the store kept across a restart. `alive`: lease ids whose
  // holder pid still runs (same start time). Returns what changed (leases that end now).
  // `first_free_id`: the lowest id the store has never used.
  std::vector<Action> restore_leases(std::vector<Lease> leases, const std::vector<uint64_t>& alive,
                                     TimePoint now, uint64_t first_free_id = 1);
  // The id the next LeaseRequested should carry (the Arbiter also takes ids for its own start
  // leases, so ids come from one counter).
  uint64_t next_lease_id() const { return next_lease_id_; }

 private:
  std::vector<Action> on_sample(const SampleTaken& s, TimePoint now);
  std::vector<Action> on_probe(const ProbeDone& e, TimePoint now);
  std::vector<Action> on_unload_requested(const UnloadRequested& e, TimePoint now);
  std::vector<Action> on_unload_call_done(const UnloadCallDone& e, TimePoint now);
  std::vector<Action> on_lifecycle_done(const LifecycleDone& e, TimePoint now);
  std::vector<Action> on_tick(const Tick& e, TimePoint now);
  std::vector<Action> on_lease_requested(const LeaseRequested& e, TimePoint now);
  std::vector<Action> on_lease_released(const LeaseReleased& e, TimePoint now);
  std::vector<Action> on_lease_heartbeat(const LeaseHeartbeat& e, TimePoint now);
  std::vector<Action> on_holder_exited(const HolderExited& e, TimePoint now);
  std::vector<Action> on_service_command(const ServiceCommand& e, TimePoint now);
  std::vector<Action> on_child_started(const ChildStarted& e, TimePoint now);
  std::vector<Action> on_child_exited(const ChildExited& e, TimePoint now);
  std::vector<Action> on_health_checked(const HealthChecked& e, TimePoint now);

  // An unload in progress: from the call to the verdict.
  struct UnloadRun {
    uint64_t id = 0;
    uint64_t request_id = 0;
    std::string service;
    std::string reason;
    TimePoint requested_at{};
    std::map<unsigned, Bytes> before;  // per GPU
    std::optional<Bytes> rss_before;
    std::optional<UnloadVerification> verification;  // set once the call returned
    Duration call_duration{0};
  };
  void update_service_holdings(TimePoint now, std::vector<Action>& actions);
  void check_idle_ttl(TimePoint now, std::vector<Action>& actions);
  void advance_unloads(TimePoint now, std::vector<Action>& actions);
  // escalate: "" (by outcome and on_ineffective_unload) or the action wanted ("stop").
  void finish_unload(UnloadRun& run, UnloadOutcome outcome, const std::string& message,
                     const std::string& escalate, TimePoint now, std::vector<Action>& actions);
  void start_unload(const std::string& service, const std::string& reason, uint64_t request_id,
                    TimePoint now, std::vector<Action>& actions);
  std::map<Owner, Bytes> self_reports() const;

  // Supervision (arbiter_supervisor.cc).
  void command(const std::string& service, const std::string& action, uint64_t request_id,
               TimePoint now, std::vector<Action>& actions, bool force = false);
  // Starts a managed service: through start admission when it has a vram_estimate (a start
  // lease; launch() once granted), else at once.
  void spawn(ServiceStatus& st, TimePoint now, std::vector<Action>& actions, bool force = false);
  void launch(ServiceStatus& st, TimePoint now, std::vector<Action>& actions);
  // Ends the service's start lease, if any (granted: released; queued: cancelled).
  void end_start_lease(ServiceStatus& st, const std::string& why, TimePoint now,
                       std::vector<Action>& actions);
  void stop_child(ServiceStatus& st, TimePoint now, std::vector<Action>& actions);
  void finish_waiters(ManagedState& m, const std::string& kind, bool ok, const std::string& message,
                      std::vector<Action>& actions);
  void supervise_tick(TimePoint now, std::vector<Action>& actions);
  void verify_stops(TimePoint now, std::vector<Action>& actions);

  // Leases (arbiter_leases.cc).
  using QueueKey = std::tuple<int, uint64_t, uint64_t>;  // (-priority, seq, id)
  static QueueKey queue_key(const Lease& l) { return {-l.request.priority, l.seq, l.id}; }
  void admit(TimePoint now, std::vector<Action>& actions);
  void end_lease(uint64_t id, LeaseState state, const std::string& why, TimePoint now,
                 std::vector<Action>& actions);
  void update_lease_holdings(TimePoint now, std::vector<Action>& actions);
  void check_lease_deadlines(TimePoint now, std::vector<Action>& actions);
  void learn_reload_costs(TimePoint now);
  // Free for a new lease on a GPU: total − reserve − used − what granted leases still reserve.
  Bytes budget(const GpuStatus& g) const;
  std::string group_of(const LeaseRequest& r) const;
  void queue_lease(uint64_t id, LeaseRequest request, TimePoint now, std::vector<Action>& actions);
  // What a service holds on one GPU (a lease for that service counts it as its own).
  Bytes service_bytes_on(const std::string& service, unsigned gpu) const;
  // A granted lease names this service: it is in use, never evicted.
  bool used_by_lease(const std::string& service) const;
  // A granted lease for `service` whose service is down: start it.
  void start_for_lease(const Lease& l, TimePoint now, std::vector<Action>& actions);

  std::map<uint64_t, Lease> leases_;  // active, by id
  std::set<QueueKey> queue_;          // queued ones, in admission order
  std::set<uint64_t> granted_;        // granted ones
  std::map<std::optional<unsigned>, size_t> queued_for_;  // queued leases per GPU asked (nullopt: any)
  TimePoint last_deadline_check_{};
  std::deque<Lease> ended_;           // the last ones that ended, newest last
  uint64_t next_seq_ = 1;
  uint64_t next_lease_id_ = 1;
  std::map<std::string, uint64_t> evicting_for_;  // service being unloaded -> lease id
  std::optional<Bytes> mem_available_;
  std::map<unsigned, uint64_t> heads_;  // GPU -> the queued lease first in line there
  std::map<std::string, Bytes> last_bytes_;  // each service's bytes in the previous sample

  Config config_;
  OwnerResolver resolver_;
  StatusSnapshot status_;
  // Per GPU index: since when each owner has held memory, and the learned baseline.
  std::map<unsigned, std::map<Owner, TimePoint>> since_;
  std::map<unsigned, Bytes> learned_baseline_;
  std::map<unsigned, GpuHealth> health_;
  std::map<unsigned, History> history_;
  mutable std::map<std::string, ServiceStatus> services_;  // by name; idle_since filled on read
  std::map<uint64_t, UnloadRun> unloads_;          // in progress, by id
  uint64_t next_unload_id_ = 1;
  bool fast_sampling_on_ = false;
  std::unordered_map<int, ResolvedOwner> last_owners_;
};

}  // namespace vramd
