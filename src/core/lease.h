// Leases: bytes of one GPU (and optionally host RAM) reserved for a holder (DESIGN.md "Lease",
// "Budget", "Admission", "Eviction on demand"). Plain values; the Arbiter decides on them.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/units.h"

namespace vramd {

// What becomes of a granted lease whose host's heartbeat lapses ([daemon] host_timeout).
enum class OnHostLost {
  requeue,  // queued again in the shared queue, for another host to grant
  end,      // ended ("host lost")
};
const char* to_string(OnHostLost o);
std::optional<OnHostLost> parse_on_host_lost(std::string_view s);

// lost: a shared lease this host gave up while cut off from the store (self-fencing, issue 30),
// or that another host re-queued while this one was taken for lost: its holder must stop.
// suspended: a granted preemptible lease whose GPU memory vramd moved into host RAM (NVIDIA's
// cuda-checkpoint, issue 28) to make room for higher-priority work; its holder still runs (its
// CUDA calls block) and it is resumed on the same GPU once its room is back. Still granted.
enum class LeaseState { queued, granted, released, expired, cancelled, timed_out, lost, suspended };
const char* to_string(LeaseState s);
std::optional<LeaseState> parse_lease_state(std::string_view s);
// Holds its grant: granted, or suspended (its grant kept, its memory in host RAM).
inline bool holds_grant(LeaseState s) {
  return s == LeaseState::granted || s == LeaseState::suspended;
}
inline bool is_active(LeaseState s) { return s == LeaseState::queued || holds_grant(s); }

struct LeaseRequest {
  std::optional<unsigned> gpu;  // nullopt: any GPU
  Bytes vram = 0;
  std::optional<Bytes> ram;  // host RAM, checked against MemAvailable
  std::string holder;        // who asks ("vramd run", "flux-worker")
  std::optional<int> pid;    // holder pid: the lease ends when it exits
  uint64_t pid_start_ticks = 0;  // /proc/PID/stat field 22 when pid is set (pid reuse)
  int priority = 0;          // higher first
  std::string label;         // job name for history and stats ("flux")
  std::string service;       // the service this lease is for (its exclusive group applies)
  std::string group;         // exclusive group (or the service's)
  std::optional<Duration> wait_timeout;  // queued longer than this -> timed_out
  std::string command;       // program name, for job history
  // vramd's own lease for starting `service` (start admission): no holder process and no
  // heartbeat; it ends once the service is up (its memory is then its own).
  bool start = false;
  // vramd's own claim for the room of a request's wake (core/wakes.h): no holder process and no
  // heartbeat; it ends once the load has shown on the GPU (its memory is then the service's).
  bool wake = false;
  // A wake's claim for a prewarm (docs/proxy.md "Prewarm"): granted only where it fits as it
  // is, never by evicting anyone; one that does not fit is cancelled at once.
  bool prewarm = false;
  // Several hosts on one PostgreSQL store (issue 17, core/cluster.h): a lease in the shared
  // queue, which any host (or only `host`, when named) may claim and grant.
  bool cluster = false;
  std::string host;  // the host it must run on; empty: any
  OnHostLost on_host_lost = OnHostLost::requeue;
  // Its GPU processes may be suspended (cuda-checkpoint) for work of higher priority, a
  // request's wake or a service's start, and resumed on the same GPU later (issue 28).
  bool preemptible = false;
};

// A preemptible lease being suspended, suspended, or being resumed (issue 28).
struct LeaseSuspension {
  enum class Step {
    suspending,  // the utility runs on its processes
    verifying,   // it said done: waiting for the samples to show the bytes gone from the GPU
    suspended,   // its bytes are in host RAM (LeaseState::suspended)
    resuming,    // the utility restores them (still LeaseState::suspended)
  };
  Step step = Step::suspending;
  std::vector<int> pids;   // its processes that held GPU memory when it was suspended
  Bytes bytes = 0;         // what they held on its GPU then: charged to host RAM meanwhile
  std::string for_whom;    // "lease #9 (flux-hi)", "ollama's request", "the start of comfyui"
  MonoTime told_at{};      // the utility said it was done (verifying from then)
  Duration took{0};        // how long the utility took to suspend
  std::optional<MonoTime> at;  // suspended (the bytes seen gone)
  std::optional<MonoTime> retry_at;  // a resume that failed is tried again then
};
const char* to_string(LeaseSuspension::Step s);
std::optional<LeaseSuspension::Step> parse_suspension_step(std::string_view s);

// One owner in the way of a queued lease: who, how much, and what vramd does about it.
struct LeaseBlocker {
  std::string owner;
  std::string kind;  // "service" | "lease" | "container" | "unit" | "process" | "unknown"
  Bytes bytes = 0;
  // "idle 12 min: unloading", "busy", "pinned", "idle 10 s (< min_idle 30 s)", "unload
  // ineffective, backoff until …", "lease #4", "unknown (candidates: python3[812])"
  std::string state;
  bool evicting = false;
  std::vector<std::string> candidates;  // for unknown memory: "python3[812]"
};

struct LeaseReason {
  std::string text;  // "needs 12.0 GiB on GPU 0; 7.1 GiB free; comfyui holds 16.3 GiB, idle 12 min: unloading"
  std::optional<unsigned> gpu;
  Bytes needs = 0;
  Bytes free = 0;
  std::vector<LeaseBlocker> blockers;
  std::optional<uint64_t> behind;  // the lease ahead of it on that GPU
  bool considered = false;         // an admission pass has looked at it (else text is a placeholder)
};

struct Lease {
  uint64_t id = 0;
  uint64_t seq = 0;  // admission order within a priority (FIFO); kept across restarts
  LeaseRequest request;
  LeaseState state = LeaseState::queued;
  std::optional<unsigned> gpu;  // granted GPU
  // Monotonic, as every time the core keeps (wall time for people: Now::wall_of).
  MonoTime requested_at{};
  std::optional<MonoTime> granted_at;
  // The fencing token of its grant (0: never granted). Every grant takes a new one, larger than
  // any before it: a shared lease from the store's sequence (lease_tokens), any other from this
  // host's count. A job that writes to shared storage refuses a writer with a smaller token
  // (GET /v1/leases/ID?token=T; docs/api.md "Guarantees").
  uint64_t token = 0;
  std::optional<MonoTime> ended_at;
  std::string end_reason;  // why it ended: "released", "holder 1234 exited", ...
  LeaseReason reason;      // while queued: why it waits
  MonoTime last_heartbeat{};
  Bytes held = 0;       // what its holder uses on its GPU now
  Bytes peak_vram = 0;  // most its holder used while granted
  bool overuse_reported = false;
  std::optional<int> exit_status;
  std::vector<std::string> evicted;  // services unloaded or stopped to make room for it
  // A cluster lease this host queued that another host claimed: that host (not kept in the
  // store; this host shows the lease as granted there and asks the store for more).
  std::string elsewhere;
  std::optional<LeaseSuspension> suspension;  // while being suspended, suspended or resumed
  std::string suspend_refused;  // a suspend failed: the tool's words; it is not tried again

  // Owner name of the holder's memory in holdings: "flux#7" (label, else holder, else "lease").
  std::string owner_name() const;
};

}  // namespace vramd
