// Supervision of containers (match.container, no `start`) and of units (match.unit, no
// `start`): what only an engine's services have. The commands asked of the engine (Lifecycle:
// start, stop with stop_timeout, restart), its answers (LifecycleDone) and its own word
// (ContainerChanged: running, or a die with its exit code), which move the phase. A die that
// vramd did not ask for is a crash (RecordCrash: the shell reads the container's logs); it is
// restarted per the service's `restart` policy, with backoff and max_restarts, unless Docker's
// own restart policy (a unit's Restart=) already brings it back. Health checks, deadlines and
// backoff are the one state machine's (core/supervision.cc).
#include <csignal>

#include <fmt/format.h>

#include "core/ledger.h"
#include "core/service_policy.h"
#include "core/supervision.h"
#include "core/supervision_detail.h"

namespace vramd {

using namespace supervision_detail;

namespace {

// Whether Docker starts this container again by itself after this exit.
bool docker_restarts(const ContainerChanged& e, std::optional<EngineRestart> policy, bool failure) {
  if (policy == EngineRestart::always || policy == EngineRestart::unless_stopped) return true;
  return policy == EngineRestart::on_failure && failure &&
         (e.restart_max == 0 || e.restart_count < e.restart_max);
}

// systemd.service(5), Restart=: which ends of a run systemd restarts, by the run's Result=
// (derived from the exit when systemd did not say). A stop that systemctl asked for is never
// restarted, and is an expected exit here.
UnitResult unit_result(const ContainerChanged& e) {
  if (e.result) return *e.result;
  if (e.oom) return UnitResult::oom_kill;
  if (e.signal) {
    int s = *e.signal;
    return s == SIGHUP || s == SIGINT || s == SIGTERM || s == SIGPIPE ? UnitResult::success
                                                                      : UnitResult::signal;
  }
  if (!e.exit_code) return UnitResult::unknown;  // ended and restarted between two reads
  return *e.exit_code != 0 ? UnitResult::exit_code : UnitResult::success;
}

bool systemd_restarts(UnitResult result, std::optional<EngineRestart> policy) {
  using R = UnitResult;
  if (result == R::start_limit_hit) return false;  // systemd gave up on it
  switch (policy.value_or(EngineRestart::no)) {
    case EngineRestart::always:
      return true;
    case EngineRestart::on_success:
      return result == R::success;
    case EngineRestart::on_failure:
      return result != R::success;
    case EngineRestart::on_abnormal:
      return result != R::success && result != R::exit_code;
    case EngineRestart::on_abort:
      return result == R::signal || result == R::core_dump;
    case EngineRestart::on_watchdog:
      return result == R::watchdog;
    case EngineRestart::no:
    case EngineRestart::unless_stopped:  // Docker's word, not a unit's
      return false;
  }
  return false;
}

}  // namespace

void Supervision::on_lifecycle_done(const LifecycleDone& e, const Now& now,
                                    std::vector<Action>& actions) {
  Supervised* found = engine_run(e.service);
  if (!found) return;
  Supervised& c = *found;
  Command waits_for = e.action == Command::stop ? Command::stop : Command::start;
  if (!e.ok) {
    if (e.action != Command::start && c.expected_exits > 0) --c.expected_exits;
    enter(c, phase::Failed{}, now);
    c.reason = e.message;
    finish_waiters(c, waits_for, false, e.message, actions);
    return;
  }
  if (e.action == Command::stop) {
    // A failed service stopped by vramd (over max_restarts) stays failed, as a stopped one.
    const Phase after = c.in<phase::Failed>() ? Phase{phase::Failed{}} : Phase{phase::Stopped{}};
    if (!e.changed) {
      if (c.stop_counted && c.expected_exits > 0) --c.expected_exits;  // no die will come
      enter(c, after, now);
      c.known = true;
      finish_waiters(c, Command::stop, true, fmt::format("{} was not running", e.service), actions);
      return;
    }
    enter(c, after, now);
    c.known = true;
    c.verify_until = now.mono + kStopVerifyTimeout;  // verify_stops() answers the waiters
    return;
  }
  // Started (or restarted): up once its health check answers. An answer that a later command
  // overtook (a stop while it started) changes nothing.
  c.known = true;
  bool current = c.state() == ManagedPhase::starting ||
                 (e.action == Command::restart && c.state() == ManagedPhase::stopping);
  if (!current) return;
  if (e.action == Command::restart) ++c.restart_count;
  Duration first = traits(c.via).first_check;
  enter(c, phase::Starting{Checks{now.mono + first, false, first}}, now);  // confirmed
  c.started_at = now.mono;
}

void Supervision::on_container_changed(const ContainerChanged& e, const World& world,
                                       const Now& now, std::vector<Action>& actions) {
  Supervised* found = engine_run(e.service);
  if (!found) return;
  Supervised& c = *found;
  const ServiceConfig* cfg = config_.find_service(e.service);
  if (e.restart_policy) c.docker_restart_policy = e.restart_policy;
  bool first = !c.known;
  c.known = true;
  const bool unit = c.via == Control::unit;
  if (unit && e.main_pid > 0) {
    c.pid = e.main_pid;  // its memory is the unit's (OwnerHints::unit_pids)
  } else if (unit && !e.running && c.state() != ManagedPhase::stopping && !c.verify_until) {
    c.pid.reset();  // kept while a stop is verified: its memory must go
  }

  if (!e.died) {
    if (e.running) {
      if (first) {
        // It ran before vramd looked: up, checked from now.
        enter(c, phase::Running{Checks{now.mono}}, now);
        c.started_at = now.mono;
        c.healthy_since = now.mono;
      } else if (c.state() == ManagedPhase::stopped || c.state() == ManagedPhase::failed ||
                 c.state() == ManagedPhase::backoff) {
        // Started by someone else: Docker's restart policy, `docker start`, compose.
        enter(c, phase::Starting{Checks{now.mono}}, now);  // it runs: checked from now
        c.started_at = now.mono;
        actions.emplace_back(make_event(now, "service.started", std::nullopt, e.service,
                                        fmt::format("{} runs again", label(e.service, c))));
      }
    } else if (c.state() != ManagedPhase::stopping && c.state() != ManagedPhase::backoff &&
               c.state() != ManagedPhase::failed) {
      enter(c, phase::Stopped{}, now);
      if (first) c.expected_exits = 0;
    }
    return;
  }

  c.last_exit_code = e.exit_code;
  c.last_signal = e.signal;
  forget_backoff_after_a_healthy_run(c, now);  // before its run's healthy_since goes
  if (c.expected_exits > 0) {                  // a stop or restart vramd asked for
    --c.expected_exits;
    return;
  }
  const UnitResult result = unit ? unit_result(e) : UnitResult::unknown;
  bool failure = unit ? result != UnitResult::success : e.oom || !e.exit_code || *e.exit_code != 0;
  std::string how =
      e.oom ? fmt::format("was killed for memory (OOM), status {}", e.exit_code.value_or(-1))
            : exit_text(e.exit_code, e.signal);
  if (unit && result == UnitResult::unknown)
    how = "ended, and systemd started it again before vramd read how (NRestarts grew)";
  else if (unit && result != UnitResult::success && result != UnitResult::exit_code &&
           result != UnitResult::signal && result != UnitResult::oom_kill)
    how += fmt::format(" (systemd: {})", to_string(result));  // timeout, watchdog, core-dump, ...
  if (failure)
    actions.emplace_back(RecordCrash{e.service, 0, e.exit_code, e.signal, now.wall,
                                     e.oom ? "the kernel killed it for memory (OOM)" : "",
                                     world.ledger.holders(kHeld), unit ? "" : c.target,
                                     unit ? c.target : "", e.oom});
  actions.emplace_back(make_event(now, failure ? "service.crashed" : "service.exited", std::nullopt,
                                  e.service, fmt::format("{} {}", label(e.service, c), how)));
  finish_waiters(c, std::nullopt, false, fmt::format("{} {}", e.service, how), actions);
  if (Checks* checks = c.checks()) checks->in_flight = false;
  c.healthy_since.reset();

  if (unit ? systemd_restarts(result, c.docker_restart_policy)
           : docker_restarts(e, c.docker_restart_policy, failure)) {
    // Docker (systemd) brings it back itself: vramd does not fight its policy (a second start
    // would race its own); its start is seen as a state read.
    enter(c, phase::Stopped{}, now);
    const char* by = unit ? "systemd" : "Docker";
    std::string_view policy = to_string(*c.docker_restart_policy);  // restarts: it is known
    c.reason = fmt::format("{}; {} restarts it ({} {})", how, by,
                           unit ? "Restart=" : "restart policy", policy);
    actions.emplace_back(make_event(
        now, unit ? "service.systemd_restarts" : "service.docker_restarts", std::nullopt, e.service,
        fmt::format("{} {}: {} restarts it ({}{}), not vramd", e.service, how, by,
                    unit ? "Restart=" : "restart: ", policy)));
    return;
  }
  apply_restart_policy(c, e.service, *cfg, failure, how, now, actions);
}

}  // namespace vramd
