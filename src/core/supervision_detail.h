// Supervision's timings, backend traits and shared steps, for its two files (supervision.cc: the
// state machine; supervision_containers.cc: what only an engine's services have). Not for use
// outside core/supervision*.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/actions.h"
#include "core/clock.h"
#include "core/config.h"
#include "core/events.h"
#include "core/service_status.h"
#include "core/supervised.h"
#include "core/units.h"

namespace vramd::supervision_detail {

// A start's health checks: the first soon (a server ready at once is used at once, issue 46),
// each wait twice the last, to kStartingHealthInterval (or health_interval, if shorter).
inline constexpr Duration kFirstStartCheck = std::chrono::milliseconds(25);
inline constexpr Duration kStartingHealthInterval = std::chrono::seconds(1);
inline constexpr Duration kFirstBackoff = std::chrono::seconds(1);
inline constexpr Duration kMaxBackoff = std::chrono::minutes(5);
inline constexpr Duration kStopVerifyTimeout = std::chrono::seconds(10);
inline constexpr Duration kHealthyResetsBackoff = std::chrono::minutes(1);
inline constexpr Bytes kHeld = 64 * MiB;  // less than this left on the GPU counts as gone

// What differs between the backends that run a supervised service, as data read by the one
// state machine (core/supervision.cc). Values keep each backend's behaviour as it was when the
// two machines were one; change one only with the test that shows why.
struct BackendTraits {
  // Its start waits for GPU room as a lease (start admission, core/admission.h). An engine's
  // start is asked at once.
  bool start_admission;
  // vramd ends it itself: SIGTERM, SIGKILL after stop_timeout. An engine gets stop_timeout with
  // its stop and kills by itself.
  bool vramd_kills;
  // start_timeout counts from the ask (an engine's start may take its time to be confirmed);
  // else from the child's start (the pid).
  bool timed_from_ask;
  // Shown (Supervision::find) before anything is known of it: a process vramd has not started
  // is stopped; a container or unit is what its engine says, once it says it.
  bool shown_before_told;
  // The first health check of a start: after this delay from the child's start (a process
  // needs a moment to bind its port), or at once when the engine confirms it. Those after it
  // back off (start_check_after).
  Duration first_check;
  // start_timeout ran out: end it as a crash (the restart policy decides), or answer the
  // waiters and keep checking it as a running service (health_failures restart it; an
  // engine's start may be slow but alive, and the simulator never answers checks).
  enum class OnStartTimeout { end_as_crash, answer_and_keep_checking } on_start_timeout;
  // health_failures checks in a row failed: stop it, its exit a crash under the restart policy
  // and backoff; or record the crash now and ask the engine for one restart (over max_restarts:
  // stop it, failed).
  enum class OnUnhealthy { stop_then_policy, crash_and_restart_now } on_unhealthy;
};
// REQUIRES: `via` is managed, container or unit.
const BackendTraits& traits(Control via);

// The only writer of a supervised service's phase, processes, containers and units alike (after
// systemd's service_set_state()). What entering a phase always means is done here; what differs
// by backend stays with the caller, after this call:
// - a run that leaves `running` after more than kHealthyResetsBackoff healthy ends a crash loop:
//   its next crash backs off from kFirstBackoff again;
// - `starting` is a new run: no healthy_since, no failures in a row.
// What only one phase has (a backoff's restart time, a stop's SIGTERM, a run's health checks)
// is `next`'s alternative, and goes with it: a start's checks are due once the start is
// confirmed (the pid, or the engine's word), when the caller sets them.
void enter(Supervised& s, Phase next, const Now& now);

// The one deadline of s's phase (nullopt: none): a start's start_timeout, a process's SIGKILL
// stop_timeout after its SIGTERM, a backoff's restart. Health checks are timed apart (Checks).
std::optional<MonoTime> phase_deadline(const ServiceConfig& cfg, const Supervised& s);

// A run healthy for more than kHealthyResetsBackoff ends a crash loop: its crash backs off from
// kFirstBackoff again. At an exit (before its run's healthy_since goes) and when leaving running.
void forget_backoff_after_a_healthy_run(Supervised& s, const Now& now);

// A health check's answer while running (a process or a container alike): the next check is
// scheduled and failures in a row counted, with an event at the first failure and at recovery.
// True when `health_failures` in a row are reached: the caller restarts it its own way.
bool count_health_check(Supervised& s, const HealthChecked& e, const ServiceConfig& cfg,
                        const Now& now, std::vector<Action>& actions);

// Counts a restart now in its restart_window; true when that makes more than max_restarts
// (the caller marks it failed).
bool restart_over_limit(Supervised& s, const ServiceConfig& cfg, const Now& now);

// The wait before a start's next health check after one failed: twice the last (`checks.step`,
// at least kFirstStartCheck), at most kStartingHealthInterval or `cfg.health_interval`, the
// shorter. Sets `checks.step` to it.
Duration start_check_after(Checks& checks, const ServiceConfig& cfg);

// What the restart policy made of an exit (restart, max_restarts in restart_window, backoff).
enum class AfterExit { ended, failed, backoff };
// Applies `cfg.restart` to an exit described by `how` (a failure or not), for a process or a
// container alike: stopped or failed when the policy does not restart it; failed, with
// `service.failed`, when this restart would be one too many; else a backoff doubling from
// kFirstBackoff to kMaxBackoff, with `service.backoff`. The caller then answers its waiters.
AfterExit apply_restart_policy(Supervised& s, const std::string& service, const ServiceConfig& cfg,
                               bool failure, const std::string& how, const Now& now,
                               std::vector<Action>& actions);

// "exited with status 1", "killed by SIGKILL".
std::string exit_text(std::optional<int> code, std::optional<int> sig);

}  // namespace vramd::supervision_detail
