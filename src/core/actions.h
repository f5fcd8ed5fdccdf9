// The Arbiter's output: what the shell must do, as plain values (DESIGN.md: actions in, effects
// out). The shell answers some of them with an event (named in each comment).
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "core/clock.h"
#include "core/demand.h"
#include "core/durations.h"
#include "core/lease.h"
#include "core/service_status.h"
#include "core/sleep.h"
#include "core/unload.h"

namespace vramd {

// ---- Actions: what the shell must do ----

// A service's version or arguments changed (the event "service.changed").
struct ServiceChange {
  std::string old_version, new_version;
  std::string old_args_fp, new_args_fp;
  std::vector<std::string> args_diff;  // core/durations.h args_diff: "+--disable-async-offload"
};

// A change worth telling people about ("comfyui now holds 16.3 GiB on GPU 0").
struct EventRecord {
  TimePoint at{};  // wall time: what people read
  std::string
      type;  // "gpu.lost", "gpu.recovered", "gpu.error", "owner.appeared", "owner.gone", ...
  std::optional<unsigned> gpu;
  std::string subject;  // owner or service name, when there is one
  std::string message;
  std::optional<UnloadVerdict> verdict;  // for "unload.*" verdicts: the figures
  std::optional<ServiceChange> change;   // for "service.changed": the old and new values
  // For "lease.*": the lease it tells of. The shell writes such an event in one transaction with
  // the LeaseChanged of that lease that follows it (Daemon::apply pairs them by this id).
  std::optional<uint64_t> lease;
};
struct EmitEvent {
  EventRecord event;
};
// Call the service's unload API, as deep as `depth` (core/sleep.h); answer with UnloadCallDone.
struct CallUnload {
  std::string service;
  uint64_t unload_id = 0;
  SleepDepth depth = SleepDepth::sleep2;
  std::vector<int> pids;  // suspend: its processes, for cuda-checkpoint rather than its server
};
// Call the service's wake, undoing a sleep at `depth`; answer with WakeCallDone.
struct CallWake {
  std::string service;
  uint64_t wake_id = 0;
  SleepDepth depth = SleepDepth::sleep1;
  std::vector<int> pids;  // suspend: the processes to restore (Asleep::pids)
};
// How a wake (WakeRequested) ended.
enum class WakeOutcome {
  ready,      // the service takes the request now
  refused,    // it cannot be made ready (no room, not startable, unknown): see message
  failed,     // the server refused the wake call, or its start failed
  timed_out,  // not ready within its wake_timeout
  cancelled,  // WakeCancelled: the client went away
};
const char* to_string(WakeOutcome o);
// A wake has its outcome: the request that asked (WakeRequested.id) goes on or gets the message.
struct WakeFinished {
  uint64_t id = 0;
  WakeOutcome outcome = WakeOutcome::ready;
  std::string message;  // why not, for the client; what happened, for a ready one
  std::string holder;   // who holds the memory in the way, when known
  Duration took{0};     // from the request to the outcome
  std::optional<SleepDepth> depth;  // the sleep it woke from
  std::vector<std::string> evicted;  // services unloaded or stopped to make room for it
};
// A held request's wake is still under way, now for this reason ("waiting for GPU room: ...",
// "waking vllm from level 1, ~3 s"): a streaming client receives it as an SSE comment.
struct WakeProgressed {
  uint64_t id = 0;
  std::string text;
};
// A wake's time was learned (core/sleep.h WakeTime): keep it in the store.
struct RememberWakeTime {
  WakeTime time;
};
// Keep a service's demand histogram (core/demand.h): written at most once per busy spell.
struct RememberDemand {
  DemandHistory demand;
};
// Probe the service `after` from now (core/probe_pacing.h), whatever wait its probe loop was
// told before; answer with ProbeDone. Each ProbeDone is answered with one of these.
struct ScheduleProbe {
  std::string service;
  Duration after{0};
};
// Sample every 250 ms while an unload (or a stop) is being verified, at the configured interval
// otherwise.
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
  Command action = Command::restart;
  Control via = Control::container;  // container | unit
  std::string target;                // container name or unit name
  Duration stop_timeout{0};          // stop, restart: how long before the engine kills it
};
// A lease was created or changed state: persist it, wake whoever waits on it; an ended one
// leaves the Arbiter (its job record is the shell's to keep). The EmitEvent right before it
// ("lease.<state>", its message starting "lease #<id> ") tells this change: the shell writes the
// two in one transaction, so a kill -9 cannot keep one and lose the other.
struct LeaseChanged {
  Lease lease;
};
// A service's load peak grew (core/wake.h): keep it in the store for the next start of vramd.
struct RememberLoadPeak {
  LoadPeak peak;
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
// A managed child, a container or a unit died unexpectedly: keep its log tail and diagnose it
// (the shell reads the log: the child's file, the container's logs from the engine, the unit's
// from the journal).
struct RecordCrash {
  std::string service;
  int pid = 0;
  std::optional<int> exit_code;
  std::optional<int> signal;
  TimePoint at{};      // wall time
  std::string reason;  // vramd's own cause when it has one ("start timed out after 2m")
  std::vector<std::pair<std::string, Bytes>>
      gpu_holders;  // who held GPU memory then, largest first
  std::string container;  // a container's exit: its logs come from the engine, by this name
  std::string unit;       // a unit's exit: its logs come from the journal, by this name
  bool oom = false;       // the engine says the kernel killed it for memory
};
// A start/stop/restart request has its outcome.
struct CommandFinished {
  uint64_t request_id = 0;
  bool ok = false;
  std::string message;
};
// A service was added at run time (ServiceDiscovered): give it an adapter and probe it.
struct WatchService {
  std::string service;
};
// A version and argument set a service runs with (core/durations.h): keep it in the store.
struct RememberVariant {
  ServiceVariant variant;
};
// Prompts a service finished (ComfyUI's /history), stamped with what they ran on: keep them in
// the store, in the next batch.
struct RecordDurations {
  std::vector<DurationRecord> records;
};
// Suspend a preemptible lease's GPU processes (cuda-checkpoint: lock, checkpoint; each put back
// to running if any fails); answer with LeaseSuspendDone.
struct SuspendLease {
  uint64_t id = 0;
  std::vector<int> pids;
  Duration lock_timeout{0};
};
// Resume them on their GPU (restore, unlock); answer with LeaseResumeDone.
struct ResumeLease {
  uint64_t id = 0;
  std::vector<int> pids;
};
// At vramd's start: read processes' CUDA state (`--get-state`), those of a lease kept suspended
// (the store may be behind them) or of a service holding nothing (suspended before vramd
// started?); answer with SuspensionChecked. `lease` 0: the service's.
struct CheckSuspension {
  uint64_t lease = 0;
  std::string service;
  std::vector<int> pids;
};
using Action =
    std::variant<EmitEvent, CallUnload, SetFastSampling, UnloadFinished, Lifecycle, LeaseChanged,
                 SpawnService, SignalService, CheckHealth, RecordCrash, CommandFinished,
                 RememberLoadPeak, WatchService, ScheduleProbe, CallWake, WakeFinished,
                 WakeProgressed, RememberWakeTime, RememberDemand, RememberVariant,
                 RecordDurations, SuspendLease, ResumeLease, CheckSuspension>;

// An event to emit now ("comfyui now holds 16.3 GiB on GPU 0"), stamped with the wall time.
inline EmitEvent make_event(const Now& now, std::string type, std::optional<unsigned> gpu,
                            std::string subject, std::string message) {
  return EmitEvent{
      EventRecord{now.wall, std::move(type), gpu, std::move(subject), std::move(message)}};
}

// An event about lease `lease` (EventRecord::lease).
inline EmitEvent lease_event(const Now& now, std::string type, uint64_t lease,
                             std::optional<unsigned> gpu, std::string subject, std::string message) {
  EmitEvent e = make_event(now, std::move(type), gpu, std::move(subject), std::move(message));
  e.event.lease = lease;
  return e;
}

}  // namespace vramd
