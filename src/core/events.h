// The Arbiter's input: what happened, as plain values (DESIGN.md: the shell turns the world into
// events). Each is handed to Arbiter::handle() with the time it happened (core/clock.h).
#pragma once

#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "core/config.h"
#include "core/cluster.h"
#include "core/lease.h"
#include "core/model.h"
#include "core/service_model.h"
#include "core/service_status.h"
#include "core/suspend.h"

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
  UnloadReason reason = UnloadReason::manual;
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
  Command action = Command::restart;
  bool ok = false;
  std::string message;
  bool changed = true;  // false: nothing to do (a stop of a stopped container: HTTP 304)
};
// What the container engine says about the container of `service` (matched by
// match.container): from its /events stream (a die, with its exit code), or from a list or
// inspect when that stream (re)connects (a state read: died = false). The same for a unit
// (match.unit): systemd's word, from its state polled (supervisor/unit_watch.h): a run that
// ended is a die with ExecMainStatus (an exit code, or the signal that killed it).
struct ContainerChanged {
  std::string service;
  bool running = false;
  bool died = false;  // it exited (a die event; a unit's run ended)
  std::optional<int> exit_code;
  bool oom = false;  // the kernel killed it for memory (an oom event, State.OOMKilled, oom-kill)
  // Docker's HostConfig.RestartPolicy.Name, or a unit's Restart= (nullopt: not read).
  std::optional<EngineRestart> restart_policy;
  int restart_max = 0;    // on-failure's MaximumRetryCount (0: no limit)
  int restart_count = 0;  // RestartCount: Docker's restarts of it so far (a unit: NRestarts)
  // Units only: the signal that ended the run (ExecMainCode killed or dumped), systemd's
  // Result= (nullopt: it said none), and its MainPID while it runs (0 when none).
  std::optional<int> signal;
  std::optional<UnitResult> result;
  int main_pid = 0;
};
// Time passes: the shell sends one at Arbiter::next_deadline() (and may send more), so deadlines
// fire even when no sample arrives.
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
  Command action = Command::start;
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
// The proxy counts requests in flight to a service (src/proxy): while any is, the service is
// busy, whatever its probe says; the end of the last one is activity.
struct RequestsInFlight {
  std::string service;
  int in_flight = 0;
};
// The shell's discovery scan (`[daemon] discover`) found a GPU service that no configured service
// covers: its kind (by fingerprint), url and match, with `discovered` set.
struct ServiceDiscovered {
  ServiceConfig config;
};
// A request is held for a service that may not take it now (docs/proxy.md "Wake"): the core
// makes it ready (a start, room admitted, the adapter's wake) and answers with WakeFinished{id}.
// `can_wake`: the service's adapter has a wake call (a fact of the adapter the shell holds).
struct WakeRequested {
  uint64_t id = 0;
  std::string service;
  std::string model;  // the model the request names ("" none)
  bool can_wake = false;
};
// The client of a held request went away: its wake is not needed any more (WakeFinished with
// `cancelled`; the room it waited for goes back to the queue).
struct WakeCancelled {
  uint64_t id = 0;
};
// The server answered the wake call that CallWake asked for.
struct WakeCallDone {
  std::string service;
  uint64_t wake_id = 0;
  UnloadCall call;
  Duration took{0};
};
// Several hosts on one store: the store took this host's heartbeat, whose write began at `sent`
// (this host's monotonic clock, read before the call: the row's time is no earlier). The right
// to its granted shared leases runs host_timeout × 0.5 past the last one (self-fencing).
struct StoreContact {
  MonoTime sent{};
};
// What NVIDIA's cuda-checkpoint offers here, probed once at start off the loop
// (daemon/service_runtime.h): the core may suspend only where it is offered.
struct SuspendProbed {
  SuspendOffer offer;
};
// The shell ran cuda-checkpoint on a lease's processes (SuspendLease, ResumeLease): done, or
// failed with the utility's own words (a failed suspend leaves them running).
struct LeaseSuspendDone {
  uint64_t id = 0;
  bool ok = false;
  std::string error;
  Duration took{0};
};
struct LeaseResumeDone {
  uint64_t id = 0;
  bool ok = false;
  std::string error;
  Duration took{0};
};
// What `cuda-checkpoint --get-state` says of a lease's or a service's processes at vramd's start
// (CheckSuspension): the pids still checkpointed, those running, those locked (a suspend cut
// short: their memory still on the GPU, their CUDA calls blocked), and the utility's words for
// any it could not read or found failed.
struct SuspensionChecked {
  uint64_t lease = 0;
  std::string service;
  std::vector<int> checkpointed, running, locked;
  std::string error;
};
// vramd is stopping (SIGTERM, or `vramd serve` ends): the core answers with what becomes of the
// services it runs (on_shutdown) and decides nothing more.
struct ShuttingDown {};
using Event = std::variant<SampleTaken, ProbeDone, UnloadRequested, UnloadCallDone, LifecycleDone,
                           Tick, LeaseRequested, LeaseReleased, LeaseHeartbeat, HolderExited,
                           ServiceCommand, ChildStarted, ChildExited, HealthChecked,
                           RequestsInFlight, ServiceDiscovered, ContainerChanged, ClusterSynced,
                           WakeRequested, WakeCancelled, WakeCallDone, StoreContact, SuspendProbed,
                           LeaseSuspendDone, LeaseResumeDone, SuspensionChecked,
                           ShuttingDown>;

}  // namespace vramd
