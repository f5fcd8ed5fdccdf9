// What vramd knows about each configured service: the state of its API (service policy) and,
// for services vramd runs, the state of its process (supervision). Typed states; strings only
// where JSON and CLI text are written and read (to_string / parse_*).
#pragma once

#include <deque>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/policies.h"
#include "core/sleep.h"
#include "core/units.h"
#include "core/unload.h"

namespace vramd {

// The state of a service's API, as its probes see it.
enum class ServiceState {
  unknown,      // not probed yet
  up,           // answers its probe
  unreachable,  // no answer (refused, reset, timed out)
  unloading,    // an unload of it is being verified
};
const char* to_string(ServiceState s);

// The state of the process of a service vramd runs (`start`).
enum class ManagedPhase {
  stopped,   // not running, not asked to run
  queued,    // waiting for GPU room before it starts (start admission)
  starting,  // spawned, not yet healthy
  running,   // passed its first health check (or adopted after a restart of vramd)
  stopping,  // SIGTERM sent (SIGKILL after stop_timeout)
  backoff,   // exited; restarts when the backoff runs out
  failed,    // could not start, or crashed more than max_restarts in restart_window
};
const char* to_string(ManagedPhase p);
// The phases a service vramd runs can be in, in declaration order (metrics, docs).
const std::vector<ManagedPhase>& all_managed_phases();

// A start, stop or restart asked of a service.
enum class Command {
  start,    // run it (through start admission when its size is known)
  stop,     // end it (TERM, KILL after stop_timeout), then verify its memory went
  restart,  // stop, then start
};
const char* to_string(Command c);
std::optional<Command> parse_command(std::string_view s);

// How vramd can start, stop or restart a service.
enum class Control {
  none,       // it cannot: no `start`, container or unit
  managed,    // vramd runs its process (`start`)
  container,  // through the container engine (match.container)
  unit,       // through systemd (match.unit)
};
const char* to_string(Control c);  // "" for none

// What the rest of vramd sees of a supervised service (a process vramd runs, or a container or
// unit its engine runs): a view that Supervision builds (Supervision::find); its own state, with
// each phase's data, is core/supervised.h. All times monotonic.
struct ManagedState {
  ManagedPhase state = ManagedPhase::stopped;
  std::optional<uint64_t> start_lease;  // the lease its start waits on, or holds until it is up
  std::optional<int> pid;               // a process's child, or a unit's MainPID
  bool adopted = false;
  std::optional<MonoTime> started_at;
  std::optional<MonoTime> healthy_since;
  int health_failures = 0;
  std::string last_health;             // the last check's message
  std::optional<MonoTime> restart_at;  // in backoff: when it starts again
  std::string reason;                  // why it failed, or the last thing that happened
  std::optional<int> last_exit_code, last_signal;
  int restart_count = 0;  // since vramd started
  // A container's Docker restart policy, or a unit's Restart= (nullopt for a process vramd
  // runs). vramd restarts a container or a unit only when that policy does not.
  std::optional<EngineRestart> docker_restart_policy;
};

// The most a service held while one model was its only one loaded ("" for a service that names
// no models): what a wake or start for that model must be admitted for (core/wake.h). Learned
// from samples, kept in the store across restarts.
struct LoadPeak {
  std::string service;
  std::string model;
  Bytes bytes = 0;
};

// How a service's probes are paced (core/probe_pacing.h).
struct ProbePace {
  int same_answers = 0;         // consecutive probes answering as the one before
  Bytes probed_bytes = 0;       // its holdings when last probed
  bool gpu_working = false;     // a GPU it holds memory on showed work at the last sample
  std::optional<MonoTime> due;  // when the shell's probe loop was told to probe it next
};

// What vramd knows about a configured service right now. All times monotonic.
struct ServiceStatus {
  std::string name;
  std::string kind;
  std::string url;
  ServiceState state = ServiceState::unknown;
  std::optional<bool> busy;
  int requests_in_flight = 0;  // through vramd's proxy: > 0 is busy, whatever the probe says
  std::optional<int> queue_depth;
  std::vector<std::string> models;
  // ServiceProbe::installed, kept from the last probe that listed any (for the front door).
  std::vector<std::string> installed;
  std::string probe_error;
  std::optional<MonoTime> last_probe;
  ProbePace pace;
  std::optional<MonoTime> last_activity;
  std::optional<MonoTime> idle_since;  // while idle: last_activity (derived, not kept)
  Bytes bytes = 0;                     // Σ of its holdings over all GPUs
  std::vector<std::pair<unsigned, Bytes>> per_gpu;
  std::optional<unsigned> last_gpu;  // the GPU it was last seen holding memory on
  std::optional<Bytes> rss;
  std::optional<Bytes> self_reported_vram;
  std::optional<Duration> unload_after_idle;
  std::optional<UnloadVerdict> last_unload;
  std::optional<MonoTime> last_unload_at;  // when last_unload got its verdict
  std::optional<MonoTime> backoff_until;
  Control control = Control::none;       // how vramd can start, stop or restart it
  // It has an unload call (not a `process`, not generic_http without unload_url, ...).
  bool can_unload = true;
  // Its last unload call was refused (an error from its server), or answered that it has none:
  // suspend may be chosen instead while vramd runs.
  bool unload_refused = false;
  // A suspend of its processes that failed, or left its bytes on the GPU: not tried again.
  std::string suspend_refused;
  std::vector<int> gpu_pids;   // its processes that hold GPU memory (a suspend's targets)
  std::vector<int> host_pids;  // all its processes (their CUDA state is read at vramd's start)
  Duration reload_cost{0};               // how long a load took (measured), or the kind's default
  std::optional<MonoTime> load_started;  // its memory is growing from (almost) nothing
  bool reload_measured = false;
  std::map<std::string, Bytes> load_peaks;  // model ("" none named) -> most held (LoadPeak)
  std::optional<Bytes> last_load_bytes;      // what its last load held once it settled
  // Put to sleep by vramd and not woken or loaded since (core/sleep.h).
  std::optional<Asleep> asleep;
  // Its probe says whether it sleeps (vLLM's /is_sleeping): its word ends a sleep, not its bytes.
  bool reports_sleep = false;
  // How long its wakes took, by (model, depth) (core/sleep.h WakeTime); learned, kept in the store.
  std::map<std::pair<std::string, SleepDepth>, Duration> wake_times;
  // What a sleep1 last kept in host RAM (its RSS growth then): the next sleep1's estimate.
  std::optional<Bytes> sleep1_host_ram;
  bool can_wake = false;  // its adapter has a wake call (ServiceProbe::can_wake)
  // Woken by a prewarm (docs/proxy.md "Prewarm") and not asked since: evictable at once (its
  // min_idle does not apply), and counted used or unused when that ends.
  std::optional<MonoTime> prewarmed;
  // A prewarm that went unused: not prewarmed again before this.
  std::optional<MonoTime> no_prewarm_until;
  std::optional<ManagedState> managed;  // services with `start` (filled from supervision)
  // Found by `[daemon] discover`, not configured: `discovered_by` is the fingerprint's evidence.
  bool discovered = false;
  std::string discovered_by;
  // What it runs (core/durations.h): the version its server says, the arguments it was started
  // with (the server's argv, else `start` and its environment), their fingerprint, and the last
  // change of either (service.changed).
  std::string version;
  std::vector<std::string> args;
  std::string args_fp;
  std::optional<TimePoint> changed_at;
  std::string last_change;  // "version 0.27.0 → 0.28.0; args +--disable-async-offload"
  // ComfyUI prompt ids already recorded (the newest 512): a prompt read twice is kept once.
  std::deque<std::string> recorded_prompts;
};

// Idle since last activity while reachable and not busy; nullopt otherwise.
std::optional<MonoTime> idle_since(const ServiceStatus& st);

}  // namespace vramd
