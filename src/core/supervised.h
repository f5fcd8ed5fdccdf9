// The state of one supervised service, as Supervision keeps it (core/supervision*.cc only;
// everyone else reads the ManagedState view that Supervision::find builds). Its phase is a
// variant: what only one phase has (a backoff's restart time, a stop's SIGTERM, the health
// checks of a run) lives in that phase's alternative, and goes when the phase does. What
// outlives a phase (the crash loop, the last exit, the stop's verification, the waiters) is a
// plain field.
#pragma once

#include <deque>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "core/clock.h"
#include "core/policies.h"
#include "core/service_status.h"
#include "core/units.h"

namespace vramd::supervision_detail {

// The health checks of a run: the next one due, and whether one is out.
struct Checks {
  std::optional<MonoTime> next;  // nullopt until the start is confirmed (pid, engine's word)
  bool in_flight = false;
  // During a start: the wait before the last check, doubled after each failed one
  // (start_check_after, core/supervision_detail.h).
  Duration step{0};
};

namespace phase {
struct Stopped {};
struct Queued {};  // its start lease (Supervised::start_lease) waits for GPU room
struct Starting {
  Checks checks;
};
struct Running {
  Checks checks;
};
struct Stopping {
  // A process's SIGTERM (vramd_kills): SIGKILL follows stop_timeout after it.
  std::optional<MonoTime> term_sent_at;
  bool kill_sent = false;
  bool then_start = false;  // a process's restart: started again at its exit
  std::string crash;        // vramd ends it for failing: its exit is a crash, for this reason
};
struct Backoff {
  MonoTime restart_at{};
};
struct Failed {};
}  // namespace phase

// In ManagedPhase's order: the index is the phase (checked below).
using Phase = std::variant<phase::Stopped, phase::Queued, phase::Starting, phase::Running,
                           phase::Stopping, phase::Backoff, phase::Failed>;
template <ManagedPhase P, class T>
inline constexpr bool kPhaseIs =
    std::is_same_v<std::variant_alternative_t<static_cast<size_t>(P), Phase>, T>;
static_assert(std::variant_size_v<Phase> == 7 && kPhaseIs<ManagedPhase::stopped, phase::Stopped> &&
              kPhaseIs<ManagedPhase::queued, phase::Queued> &&
              kPhaseIs<ManagedPhase::starting, phase::Starting> &&
              kPhaseIs<ManagedPhase::running, phase::Running> &&
              kPhaseIs<ManagedPhase::stopping, phase::Stopping> &&
              kPhaseIs<ManagedPhase::backoff, phase::Backoff> &&
              kPhaseIs<ManagedPhase::failed, phase::Failed>);

// A service vramd supervises: a process it runs (`start`), or a container or a unit that an
// engine (Docker, Podman, systemd) runs for it. One kind of entry, one state machine: what
// differs by backend is data (traits()) or a branch on `via` where the backends act differently
// (the ask, the exit's meaning).
struct Supervised {
  Control via = Control::managed;  // managed | container | unit
  std::string target;              // match.container or match.unit; "" for a process

  Phase phase;  // written only by enter()
  ManagedPhase state() const { return static_cast<ManagedPhase>(phase.index()); }
  template <class P>
  P* in() {
    return std::get_if<P>(&phase);
  }
  template <class P>
  const P* in() const {
    return std::get_if<P>(&phase);
  }
  // The health checks of the run under way (starting, running); null in other phases.
  Checks* checks();
  const Checks* checks() const;

  // The lease its start waits on (queued: 0 until admission numbers it), then holds until it
  // is up or exits: past the queue, through the start and a stop asked before it was up.
  std::optional<uint64_t> start_lease;
  std::optional<int> pid;  // a process's child, or a unit's MainPID
  bool adopted = false;
  // The current or last run: shown, and read by the wake's timing (core/wake.cc).
  std::optional<MonoTime> started_at;
  std::optional<MonoTime> healthy_since;
  int health_failures = 0;  // in a row, while running
  std::string last_health;  // the last check's message
  std::string reason;       // why it failed, or the last thing that happened
  std::optional<int> last_exit_code, last_signal;
  int restart_count = 0;  // since vramd started

  // The crash loop: restarts within restart_window, and the backoff the next one waits.
  std::deque<MonoTime> restarts;
  Duration backoff{0};

  // A stop's check that the GPU memory went: asked when, holding what; verified until (set at
  // the exit, and it may outlast the stop: a restart starts it again at once).
  std::optional<MonoTime> verify_until;
  MonoTime stop_requested_at{};
  Bytes bytes_at_stop = 0;

  std::vector<std::pair<uint64_t, Command>> waiting;  // (request id, what it waits for)

  // The engine's side (untouched for a process).
  std::optional<EngineRestart> docker_restart_policy;  // Docker's policy, or a unit's Restart=
  bool known = false;      // the engine has told its state at least once
  int expected_exits = 0;  // stops and restarts vramd asked for whose die has not come yet
  // The stop under way was counted in expected_exits (it was up, or not known yet). A unit's
  // die comes from a state read, maybe after systemctl's answer: a stop that was not counted
  // must not take the count of one that was.
  bool stop_counted = false;

  // What the rest of vramd reads (Supervision::find).
  ManagedState view() const;
};

inline Checks* Supervised::checks() {
  if (auto* p = in<phase::Starting>()) return &p->checks;
  if (auto* p = in<phase::Running>()) return &p->checks;
  return nullptr;
}
inline const Checks* Supervised::checks() const { return const_cast<Supervised*>(this)->checks(); }

}  // namespace vramd::supervision_detail
