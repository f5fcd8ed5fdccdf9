#include "core/supervision.h"
#include "core/supervision_detail.h"

#include <algorithm>
#include <csignal>
#include <cstring>

#include <fmt/format.h>

#include "core/ledger.h"
#include "core/service_policy.h"
#include "core/wake.h"

namespace vramd {

using namespace supervision_detail;

namespace {

// SIGTERM to a process vramd runs (its process group); SIGKILL follows at stop_timeout (due()).
// REQUIRES: s.pid, and s is stopping.
void send_term(const std::string& service, Supervised& s, const Now& now,
               std::vector<Action>& actions) {
  phase::Stopping& stopping = std::get<phase::Stopping>(s.phase);
  stopping.term_sent_at = now.mono;
  stopping.kill_sent = false;
  actions.emplace_back(SignalService{service, *s.pid, SIGTERM});
}

}  // namespace

void supervision_detail::enter(Supervised& s, Phase next, const Now& now) {
  if (s.state() == ManagedPhase::running && !std::holds_alternative<phase::Running>(next))
    forget_backoff_after_a_healthy_run(s, now);
  s.phase = std::move(next);
  if (s.state() == ManagedPhase::starting) {
    s.healthy_since.reset();
    s.health_failures = 0;
  }
}

ManagedState Supervised::view() const {
  ManagedState v;
  v.state = state();
  v.start_lease = start_lease;
  v.pid = pid;
  v.adopted = adopted;
  v.started_at = started_at;
  v.healthy_since = healthy_since;
  v.health_failures = health_failures;
  v.last_health = last_health;
  if (const auto* b = in<phase::Backoff>()) v.restart_at = b->restart_at;
  v.reason = reason;
  v.last_exit_code = last_exit_code;
  v.last_signal = last_signal;
  v.restart_count = restart_count;
  v.docker_restart_policy = docker_restart_policy;
  return v;
}

void supervision_detail::forget_backoff_after_a_healthy_run(Supervised& s, const Now& now) {
  if (s.healthy_since && now.mono - *s.healthy_since > kHealthyResetsBackoff)
    s.backoff = Duration(0);
}

bool supervision_detail::count_health_check(Supervised& s, const HealthChecked& e,
                                            const ServiceConfig& cfg, const Now& now,
                                            std::vector<Action>& actions) {
  s.checks()->next = now.mono + cfg.health_interval;
  if (e.ok) {
    if (s.health_failures > 0)
      actions.emplace_back(make_event(now, "service.healthy", std::nullopt, e.service,
                                      fmt::format("{} answers its health check again", e.service)));
    s.health_failures = 0;
    return false;
  }
  if (++s.health_failures == 1)
    actions.emplace_back(
        make_event(now, "service.unhealthy", std::nullopt, e.service,
                   fmt::format("{} failed a health check: {}", e.service, e.message)));
  return s.health_failures >= cfg.health_failures;
}

Duration supervision_detail::start_check_after(Checks& checks, const ServiceConfig& cfg) {
  Duration most = std::min(kStartingHealthInterval, cfg.health_interval);
  checks.step = std::clamp(checks.step * 2, std::min(kFirstStartCheck, most), most);
  return checks.step;
}

bool supervision_detail::restart_over_limit(Supervised& s, const ServiceConfig& cfg,
                                            const Now& now) {
  while (!s.restarts.empty() && now.mono - s.restarts.front() > cfg.restart_window)
    s.restarts.pop_front();
  s.restarts.push_back(now.mono);
  return static_cast<int>(s.restarts.size()) > cfg.max_restarts;
}

supervision_detail::AfterExit supervision_detail::apply_restart_policy(
    Supervised& s, const std::string& service, const ServiceConfig& cfg, bool failure,
    const std::string& how, const Now& now, std::vector<Action>& actions) {
  bool again =
      cfg.restart == RestartPolicy::always || (cfg.restart == RestartPolicy::on_failure && failure);
  if (!again) {
    if (failure)
      enter(s, phase::Failed{}, now);
    else
      enter(s, phase::Stopped{}, now);
    s.reason = how;
    return AfterExit::ended;
  }
  if (restart_over_limit(s, cfg, now)) {
    enter(s, phase::Failed{}, now);
    s.reason = fmt::format("{} times in {}; last: {}", s.restarts.size(),
                           format_duration(cfg.restart_window), how);
    actions.emplace_back(
        make_event(now, "service.failed", std::nullopt, service,
                   fmt::format("{} failed: crashed {}; start it by hand once fixed "
                               "(vramd doctor {})",
                               service, s.reason, service)));
    return AfterExit::failed;
  }
  enter(s, phase::Backoff{}, now);  // first: leaving running may end the crash loop
  s.backoff = s.backoff == Duration(0) ? kFirstBackoff : std::min(s.backoff * 2, kMaxBackoff);
  s.in<phase::Backoff>()->restart_at = now.mono + s.backoff;
  s.reason = how;
  actions.emplace_back(
      make_event(now, "service.backoff", std::nullopt, service,
                 fmt::format("{} {}; restarting in {}", service, how, format_duration(s.backoff))));
  return AfterExit::backoff;
}

std::string supervision_detail::exit_text(std::optional<int> code, std::optional<int> sig) {
  if (sig) {
    const char* name = sigabbrev_np(*sig);
    return fmt::format("killed by SIG{}", name ? name : std::to_string(*sig).c_str());
  }
  if (code) return fmt::format("exited with status {}", *code);
  return "exited (status unknown: vramd adopted it after a restart)";
}

const BackendTraits& supervision_detail::traits(Control via) {
  using B = BackendTraits;
  static constexpr B kProcess{.start_admission = true,
                              .vramd_kills = true,
                              .timed_from_ask = false,
                              .shown_before_told = true,
                              .first_check = kFirstStartCheck,
                              .on_start_timeout = B::OnStartTimeout::end_as_crash,
                              .on_unhealthy = B::OnUnhealthy::stop_then_policy};
  static constexpr B kEngine{.start_admission = false,
                             .vramd_kills = false,
                             .timed_from_ask = true,
                             .shown_before_told = false,
                             .first_check = Duration(0),
                             .on_start_timeout = B::OnStartTimeout::answer_and_keep_checking,
                             .on_unhealthy = B::OnUnhealthy::crash_and_restart_now};
  return via == Control::managed ? kProcess : kEngine;
}

Supervision::Supervision(const Config& config) : config_(config) {
  for (const auto& svc : config_.services)
    if (!svc.start.empty())
      supervised_[svc.name] = Supervised{Control::managed, ""};
    else if (!svc.match.container.empty())
      supervised_[svc.name] = Supervised{Control::container, svc.match.container};
    else if (!svc.match.unit.empty())
      supervised_[svc.name] = Supervised{Control::unit, svc.match.unit};
}

Supervision::Supervised* Supervision::process(const std::string& service) {
  auto it = supervised_.find(service);
  return it != supervised_.end() && it->second.via == Control::managed ? &it->second : nullptr;
}

Supervision::Supervised* Supervision::engine_run(const std::string& service) {
  auto it = supervised_.find(service);
  return it != supervised_.end() && it->second.via != Control::managed ? &it->second : nullptr;
}

std::string Supervision::label(const std::string& service, const Supervised& s) {
  if (s.via == Control::managed) return fmt::format("{} (pid {})", service, s.pid.value_or(0));
  return fmt::format("{} ({} {})", service, s.via == Control::unit ? "unit" : "container",
                     s.target);
}

std::optional<ManagedState> Supervision::find(const std::string& service) const {
  auto it = supervised_.find(service);
  if (it == supervised_.end()) return std::nullopt;
  const Supervised& s = it->second;
  if (!traits(s.via).shown_before_told && !s.known) return std::nullopt;
  return s.view();
}

std::vector<std::pair<std::string, int>> Supervision::children() const {
  std::vector<std::pair<std::string, int>> out;
  for (const auto& [name, s] : supervised_)
    if (s.via == Control::managed && s.pid) out.emplace_back(name, *s.pid);
  return out;
}

std::vector<std::pair<std::string, int>> Supervision::unit_main_pids() const {
  std::vector<std::pair<std::string, int>> out;
  for (const auto& [name, s] : supervised_)
    if (s.via == Control::unit && s.pid) out.emplace_back(name, *s.pid);
  return out;
}

// The one deadline of s's phase: starting, its start_timeout (timed from the ask, or from the
// child's start: its pid); stopping, the SIGKILL vramd sends stop_timeout after its SIGTERM;
// backoff, its restart. nullopt for the other phases, and before what starts the clock.
std::optional<MonoTime> supervision_detail::phase_deadline(const ServiceConfig& cfg,
                                                           const Supervised& s) {
  if (s.in<phase::Starting>()) {
    if (s.started_at && (traits(s.via).timed_from_ask || s.pid))
      return *s.started_at + cfg.start_timeout + Duration(1);
  } else if (const auto* stopping = s.in<phase::Stopping>()) {
    if (s.pid && stopping->term_sent_at && !stopping->kill_sent)
      return *stopping->term_sent_at + cfg.stop_timeout;
  } else if (const auto* b = s.in<phase::Backoff>()) {
    return b->restart_at;
  }
  return std::nullopt;
}

std::optional<MonoTime> Supervision::due(const std::string& service, const Supervised& s) const {
  const ServiceConfig* cfg = config_.find_service(service);
  if (!cfg) return std::nullopt;  // gone from the config: nothing of it is timed
  std::optional<MonoTime> out;
  auto earliest = [&](std::optional<MonoTime> when) {
    if (when && (!out || *when < *out)) out = when;
  };
  earliest(phase_deadline(*cfg, s));
  // Health checks: scheduled once the start is confirmed (a new Starting has none due).
  if (const Checks* c = s.checks(); c && !c->in_flight) earliest(c->next);
  return out;
}

std::optional<MonoTime> Supervision::next_deadline() const {
  std::optional<MonoTime> out;
  for (const auto& [name, s] : supervised_)
    if (std::optional<MonoTime> t = due(name, s); t && (!out || *t < *out)) out = t;
  return out;
}

void Supervision::finish_waiters(Supervised& s, std::optional<Command> kind, bool ok,
                                 const std::string& message, std::vector<Action>& actions) {
  for (auto it = s.waiting.begin(); it != s.waiting.end();) {
    if (!kind || it->second == *kind) {
      actions.emplace_back(CommandFinished{it->first, ok, message});
      it = s.waiting.erase(it);
    } else {
      ++it;
    }
  }
}

void Supervision::command(const std::string& service, Command action, uint64_t request_id,
                          bool force, const World& world, const Now& now,
                          std::vector<Action>& actions, Intents& intents) {
  auto it = supervised_.find(service);
  if (it == supervised_.end()) {
    // A discovered service (no config) whose container or unit was found: its engine does it.
    const ServiceStatus& st = world.services.at(service);
    const ServiceConfig* cfg = config_.find_service(service);
    if (st.control == Control::none || !cfg) {
      actions.emplace_back(CommandFinished{
          request_id, false,
          fmt::format("vramd cannot {} {}: it has no start command, container or unit",
                      to_string(action), service)});
      return;
    }
    actions.emplace_back(
        Lifecycle{service, action, st.control,
                  st.control == Control::container ? cfg->match.container : cfg->match.unit});
    actions.emplace_back(CommandFinished{
        request_id, true,
        fmt::format("{} {}: asked its {}", to_string(action), service, to_string(st.control))});
    return;
  }
  Supervised& s = it->second;
  if (action == Command::stop) {
    stop(service, s, request_id, world, now, actions, intents);
    return;
  }
  const bool process = s.via == Control::managed;
  const bool up = s.state() == ManagedPhase::running || s.state() == ManagedPhase::starting;
  auto ask = [&](Command a) {
    actions.emplace_back(
        Lifecycle{service, a, s.via, s.target, config_.find_service(service)->stop_timeout});
  };
  // A restart of what runs: a process is stopped and started again at its exit; an engine
  // restarts it on one ask.
  if (action == Command::restart && (process ? s.pid.has_value() : up)) {
    if (request_id) s.waiting.emplace_back(request_id, Command::start);
    if (process) {
      if (!s.in<phase::Stopping>()) stop_child(service, s, world, now, actions);
      s.in<phase::Stopping>()->then_start = true;
      return;
    }
    s.restarts.clear();  // by hand: clears a crash loop's verdict
    s.backoff = Duration(0);
    ++s.expected_exits;
    enter(s, phase::Stopping{}, now);
    s.started_at = now.mono;  // the start timeout counts from the ask; set again when it is done
    ask(Command::restart);
    return;
  }
  if (up && (process || s.known)) {
    actions.emplace_back(CommandFinished{
        request_id, true, fmt::format("{} is already {}", service, to_string(s.state()))});
    return;
  }
  if (s.state() == ManagedPhase::queued && !force) {  // already waiting for room: wait with it
    if (request_id) s.waiting.emplace_back(request_id, Command::start);
    return;
  }
  // A start by hand clears a crash loop's verdict.
  s.restarts.clear();
  s.backoff = Duration(0);
  if (request_id) s.waiting.emplace_back(request_id, Command::start);
  if (process) {
    spawn(service, s, force, world, now, actions, intents);
    return;
  }
  enter(s, phase::Starting{}, now);  // checked once the engine says it started
  s.started_at = now.mono;           // the start timeout counts from the ask
  ask(action);
}

void Supervision::stop(const std::string& service, Supervised& s, uint64_t request_id,
                       const World& world, const Now& now, std::vector<Action>& actions,
                       Intents& intents) {
  // A start (or restart) under way ends here: its waiters are told now, not left waiting.
  finish_waiters(s, Command::start, false,
                 fmt::format("the start of {} was cancelled by a stop", service), actions);
  if (s.via == Control::managed) {
    if (auto* stopping = s.in<phase::Stopping>()) {
      stopping->then_start = false;  // a restart under way becomes this stop
      stopping->crash.clear();
    }
    if (!s.pid && s.state() == ManagedPhase::starting) {
      // Spawned, its pid not told yet: SIGTERM goes as soon as it is (on_child_started).
      if (request_id) s.waiting.emplace_back(request_id, Command::stop);
      enter(s, phase::Stopping{}, now);
      s.stop_requested_at = now.mono;
      s.bytes_at_stop = world.services.at(service).bytes;
      return;
    }
    if (!s.pid) {  // no child (an engine is asked whatever vramd knows: it may run)
      if (s.state() == ManagedPhase::queued) {
        end_start_lease(service, s, "start cancelled by a stop", intents);
        actions.emplace_back(make_event(
            now, "service.start_cancelled", std::nullopt, service,
            fmt::format("{} will not start: stop asked while it waited for GPU room", service)));
      }
      enter(s, phase::Stopped{}, now);
      actions.emplace_back(
          CommandFinished{request_id, true, fmt::format("{} is not running", service)});
      return;
    }
  }
  if (request_id) s.waiting.emplace_back(request_id, Command::stop);
  if (s.state() == ManagedPhase::stopping) return;  // one stop at a time: wait with it
  stop_child(service, s, world, now, actions);
}

void Supervision::spawn(const std::string& service, Supervised& s, bool force, const World& world,
                        const Now& now, std::vector<Action>& actions, Intents& intents) {
  const ServiceConfig* cfg = config_.find_service(service);
  if (force) {
    if (s.start_lease)
      actions.emplace_back(make_event(
          now, "service.start_forced", std::nullopt, service,
          fmt::format("{} starts now (--force): no longer waits for GPU room", service)));
    end_start_lease(service, s, "started with --force", intents);
  } else if (std::optional<LoadNeed> need =
                 cfg ? load_need(world.services.at(service), *cfg, "") : std::nullopt) {
    // Start admission: the start waits for room like a lease (evicting idle services, stopping
    // its exclusive group's other members), and launches once the lease is granted. Its size is
    // learned (core/wake.h): its measured peak, else vram_estimate, else its last load.
    enter(s, phase::Queued{}, now);
    if (s.start_lease) return;
    LeaseRequest r;
    r.vram = need->bytes;
    // Its GPU: the only one, else where it was last seen; else any.
    const auto& gpus = world.ledger.status().gpus;
    if (gpus.size() == 1)
      r.gpu = gpus[0].sample.index;
    else
      r.gpu = world.services.at(service).last_gpu;
    r.holder = "vramd";
    r.label = "start " + service;
    r.service = service;
    if (!cfg->start.empty()) r.command = cfg->start[0];
    s.start_lease = 0;  // being queued: admission gives it its id (start_lease_queued)
    intents.push_back(QueueStartLeaseIntent{service, std::move(r)});
    return;
  }
  launch(service, s, world, now, actions, intents);
}

void Supervision::start_lease_queued(const std::string& service, uint64_t lease,
                                     const LeaseRequest& r, const Now& now,
                                     std::vector<Action>& actions) {
  Supervised* s = process(service);
  if (!s) return;
  s->start_lease = lease;
  s->reason = fmt::format("waiting for {} of GPU memory (lease #{})", format_size(r.vram), lease);
  actions.emplace_back(make_event(
      now, "service.queued", r.gpu, service,
      fmt::format("{} waits for {} on {} before it starts (lease #{})", service,
                  format_size(r.vram), r.gpu ? fmt::format("GPU {}", *r.gpu) : "any GPU", lease)));
}

void Supervision::end_start_lease(const std::string& service, Supervised& s, const std::string& why,
                                  Intents& intents) {
  if (!s.start_lease) return;
  uint64_t id = *s.start_lease;
  s.start_lease.reset();
  if (id) intents.push_back(EndLeaseIntent{id, fmt::format("{}: {}", service, why)});
}

void Supervision::launch_granted(const std::string& service, uint64_t lease, const World& world,
                                 const Now& now, std::vector<Action>& actions, Intents& intents) {
  Supervised* s = process(service);
  if (!s) return;
  if (s->start_lease == lease && s->state() == ManagedPhase::queued)
    launch(service, *s, world, now, actions, intents);
}

void Supervision::launch(const std::string& service, Supervised& s, const World& world,
                         const Now& now, std::vector<Action>& actions, Intents& intents) {
  const ServiceConfig* cfg = config_.find_service(service);
  // Exclusive group: the other members give the GPU up first.
  if (cfg && !cfg->group.empty()) {
    for (const auto& other : config_.services) {
      if (other.name == service || other.group != cfg->group) continue;
      const Supervised* o = process(other.name);
      const ServiceStatus& ost = world.services.at(other.name);
      if (o && o->pid && o->state() != ManagedPhase::stopping) {
        actions.emplace_back(make_event(
            now, "service.group_stop", std::nullopt, other.name,
            fmt::format("stopping {}: {} of group '{}' starts", other.name, service, cfg->group)));
        command(other.name, Command::stop, 0, false, world, now, actions, intents);
      } else if (!o && ost.state == ServiceState::up && ost.bytes >= kHeld &&
                 !ost.busy.value_or(false)) {
        intents.push_back(UnloadIntent{other.name, UnloadReason::group, 0});
      }
    }
  }
  enter(s, phase::Starting{}, now);
  actions.emplace_back(SpawnService{service});
}

void Supervision::start_for_lease(const StartForLeaseIntent& i, const World& world, const Now& now,
                                  std::vector<Action>& actions, Intents& intents) {
  const ServiceStatus* st = world.services.find(i.service);
  if (!st) return;
  const Supervised* s = process(i.service);
  bool down;
  if (s) {
    if (s->start_lease) return;  // its own start is under way
    down = s->state() == ManagedPhase::stopped || s->state() == ManagedPhase::failed ||
           s->state() == ManagedPhase::backoff;
  } else {
    down = st->control != Control::none && st->state == ServiceState::unreachable;
  }
  if (!down) return;
  actions.emplace_back(
      make_event(now, "service.start_for_lease", std::nullopt, i.service,
                 fmt::format("starting {} for lease #{} ({})", i.service, i.lease, i.lease_owner)));
  // The lease holds the room: no start admission of its own.
  command(i.service, Command::start, 0, /*force=*/true, world, now, actions, intents);
}

void Supervision::on_shutdown(const Now& now, std::vector<Action>& actions) const {
  for (const auto& [name, s] : supervised_) {
    const ServiceConfig* cfg = config_.find_service(name);
    if (!traits(s.via).vramd_kills || !cfg || cfg->on_shutdown != OnShutdown::stop || !s.pid)
      continue;
    actions.emplace_back(make_event(now, "service.stopping", std::nullopt, name,
                                    fmt::format("stopping {} (pid {}) with vramd (on_shutdown = "
                                                "\"stop\")",
                                                name, *s.pid)));
    actions.emplace_back(SignalService{name, *s.pid, SIGTERM});
  }
}

void Supervision::stop_child(const std::string& service, Supervised& s, const World& world,
                             const Now& now, std::vector<Action>& actions) {
  const bool up = s.state() == ManagedPhase::running || s.state() == ManagedPhase::starting;
  enter(s, phase::Stopping{}, now);
  s.stop_requested_at = now.mono;
  s.bytes_at_stop = world.services.at(service).bytes;
  if (traits(s.via).vramd_kills) {
    send_term(service, s, now, actions);
    return;
  }
  // Its die will come as the engine's word: expected, unless it did not run (known stopped).
  s.stop_counted = up || !s.known;
  if (s.stop_counted) ++s.expected_exits;
  actions.emplace_back(Lifecycle{service, Command::stop, s.via, s.target,
                                 config_.find_service(service)->stop_timeout});
}

void Supervision::on_child_started(const ChildStarted& e, const Now& now,
                                   std::vector<Action>& actions, Intents& intents) {
  Supervised* found = process(e.service);
  if (!found) return;
  Supervised& s = *found;
  // A stop came between the spawn and its pid (stop()): it is sent now.
  const bool stop_asked = s.state() == ManagedPhase::stopping && !s.pid && !e.adopted;
  if (!e.ok) {
    enter(s, phase::Failed{}, now);
    s.reason = e.error;
    actions.emplace_back(make_event(now, "service.start_failed", std::nullopt, e.service,
                                    fmt::format("cannot start {}: {}", e.service, e.error)));
    finish_waiters(s, Command::start, false, e.error, actions);
    if (stop_asked)
      finish_waiters(s, Command::stop, true,
                     fmt::format("{} is not running (it could not start: {})", e.service, e.error),
                     actions);
    end_start_lease(e.service, s, "could not start", intents);
    return;
  }
  if (stop_asked) {
    s.pid = e.pid;
    s.adopted = false;
    s.started_at = now.mono;
    actions.emplace_back(make_event(
        now, "service.started", std::nullopt, e.service,
        fmt::format("started {} (pid {}), and stopping it: a stop was asked", e.service, e.pid)));
    send_term(e.service, s, now, actions);
    return;
  }
  if (e.adopted) end_start_lease(e.service, s, "adopted", intents);
  // Adopted: it ran before this vramd, up and checked from now; else checked once it had
  // first_check to bind its port.
  Duration first = e.adopted ? Duration(0) : traits(s.via).first_check;
  Checks checks{now.mono + first, false, first};
  if (e.adopted)
    enter(s, phase::Running{checks}, now);
  else
    enter(s, phase::Starting{checks}, now);
  s.pid = e.pid;
  s.adopted = e.adopted;
  s.started_at = now.mono;
  s.healthy_since.reset();
  if (e.adopted) s.healthy_since = now.mono;
  actions.emplace_back(
      make_event(now, e.adopted ? "service.adopted" : "service.started", std::nullopt, e.service,
                 e.adopted ? fmt::format("{} (pid {}) still runs: adopted again", e.service, e.pid)
                           : fmt::format("started {} (pid {})", e.service, e.pid)));
}

void Supervision::on_child_exited(const ChildExited& e, const World& world, const Now& now,
                                  std::vector<Action>& actions, Intents& intents) {
  Supervised* found = process(e.service);
  if (!found) return;
  Supervised& s = *found;
  if (!s.pid || *s.pid != e.pid) return;
  const ServiceConfig* cfg = config_.find_service(e.service);
  s.pid.reset();
  end_start_lease(e.service, s, "exited before it was up", intents);
  s.last_exit_code = e.exit_code;
  s.last_signal = e.signal;
  std::string how = exit_text(e.exit_code, e.signal);

  phase::Stopping* stopping = s.in<phase::Stopping>();
  // Ended by vramd for failing (start timeout, health): a failure whatever its status.
  std::string failing = stopping ? std::move(stopping->crash) : std::string();
  if (stopping && failing.empty()) {                 // a stop or restart that was asked
    s.verify_until = now.mono + kStopVerifyTimeout;  // verify_stops() says when the memory is gone
    if (stopping->then_start) {
      ++s.restart_count;
      actions.emplace_back(make_event(now, "service.restarting", std::nullopt, e.service,
                                      fmt::format("{} {}; starting it again", e.service, how)));
      spawn(e.service, s, false, world, now, actions, intents);
    } else {
      enter(s, phase::Stopped{}, now);
    }
    return;
  }

  // It died on its own (or vramd ended it for failing): a crash.
  bool ended_by_vramd = !failing.empty();
  std::string why = ended_by_vramd ? failing : how;
  bool failure = ended_by_vramd || !e.exit_code || *e.exit_code != 0 || e.signal;
  RecordCrash crash{e.service,
                    e.pid,
                    e.exit_code,
                    e.signal,
                    now.wall,
                    ended_by_vramd ? why : "",
                    world.ledger.holders(kHeld)};
  if (failure) actions.emplace_back(crash);
  actions.emplace_back(make_event(now, failure ? "service.crashed" : "service.exited", std::nullopt,
                                  e.service, fmt::format("{} {}", e.service, why)));

  // A service gone from the config (it cannot be here without one) gets the defaults.
  static const ServiceConfig kDefaults;
  switch (apply_restart_policy(s, e.service, cfg ? *cfg : kDefaults, failure, why, now, actions)) {
    case AfterExit::ended:
      finish_waiters(s, std::nullopt, false, fmt::format("{} {}", e.service, why), actions);
      break;
    case AfterExit::failed:
      finish_waiters(s, std::nullopt, false,
                     fmt::format("{} failed: crashed {}", e.service, s.reason), actions);
      break;
    case AfterExit::backoff:
      break;
  }
}

void Supervision::on_health_checked(const HealthChecked& e, const World& world, const Now& now,
                                    std::vector<Action>& actions, Intents& intents) {
  auto it = supervised_.find(e.service);
  const ServiceConfig* cfg = config_.find_service(e.service);
  if (it == supervised_.end() || !cfg) return;
  Supervised& s = it->second;
  s.last_health = e.message;
  Checks* checks = s.checks();
  if (!checks) return;  // an answer that its run's end overtook
  checks->in_flight = false;
  if (s.state() == ManagedPhase::starting) {
    checks->next = now.mono + start_check_after(*checks, *cfg);
    if (!e.ok) return;
    enter(s, phase::Running{Checks{now.mono + cfg->health_interval}}, now);
    s.healthy_since = now.mono;
    s.health_failures = 0;
    s.reason.clear();
    end_start_lease(e.service, s, "is up", intents);  // its memory is its own from now on
    std::string took = s.started_at ? format_age(now.mono - *s.started_at) : "?";
    actions.emplace_back(make_event(now, "service.healthy", std::nullopt, e.service,
                                    fmt::format("{} is up after {}", label(e.service, s), took)));
    finish_waiters(s, Command::start, true, fmt::format("{} is up after {}", e.service, took),
                   actions);
    return;
  }
  if (s.state() != ManagedPhase::running) return;
  if (count_health_check(s, e, *cfg, now, actions))
    unhealthy(
        e.service, s,
        fmt::format("failed {} health checks in a row (last: {})", s.health_failures, e.message),
        world, now, actions);
}

void Supervision::on_tick(const World& world, const Now& now, std::vector<Action>& actions,
                          Intents& intents) {
  for (auto& [name, s] : supervised_) {
    const ServiceConfig* cfg = config_.find_service(name);
    if (!cfg) continue;  // gone from the config: nothing of it is timed
    if (std::optional<MonoTime> at = phase_deadline(*cfg, s); at && now.mono >= *at) {
      if (s.in<phase::Starting>()) {
        start_timed_out(name, s, world, now, actions);
      } else if (auto* stopping = s.in<phase::Stopping>()) {
        stopping->kill_sent = true;
        actions.emplace_back(make_event(now, "service.kill", std::nullopt, name,
                                        fmt::format("{} did not stop within {}: SIGKILL", name,
                                                    format_duration(cfg->stop_timeout))));
        actions.emplace_back(SignalService{name, *s.pid, SIGKILL});
      } else if (s.in<phase::Backoff>()) {
        restart_after_backoff(name, s, world, now, actions, intents);
      }
    }
    // Suspended (cuda-checkpoint): its server may block on the GPU until restored; its health
    // is checked again once it is.
    const ServiceStatus* st = world.services.find(name);
    bool suspended = st && st->asleep && st->asleep->depth == SleepDepth::suspend;
    Checks* checks = s.checks();
    if (checks && !checks->in_flight && checks->next && now.mono >= *checks->next && !suspended) {
      checks->in_flight = true;
      actions.emplace_back(CheckHealth{name});
    }
  }
}

void Supervision::start_timed_out(const std::string& service, Supervised& s, const World& world,
                                  const Now& now, std::vector<Action>& actions) {
  const ServiceConfig& cfg = *config_.find_service(service);
  std::string why = fmt::format(
      "did not answer its health check within start_timeout {} (last: {})",
      format_duration(cfg.start_timeout), s.last_health.empty() ? "no answer" : s.last_health);
  actions.emplace_back(make_event(now, "service.start_timeout", std::nullopt, service,
                                  fmt::format("{} {}", service, why)));
  switch (traits(s.via).on_start_timeout) {
    case BackendTraits::OnStartTimeout::end_as_crash:
      stop_child(service, s, world, now, actions);
      s.in<phase::Stopping>()->crash = why;  // its exit is a failure: the restart policy applies
      break;
    case BackendTraits::OnStartTimeout::answer_and_keep_checking:
      finish_waiters(s, Command::start, false, fmt::format("{} {}", service, why), actions);
      // Counted from here as a running service that fails its checks: health_failures restart
      // it (checked from now if the engine never confirmed the start).
      phase::Running running{std::get<phase::Starting>(s.phase).checks};
      if (!running.checks.next) running.checks.next = now.mono;
      enter(s, running, now);
      s.reason = why;
      break;
  }
}

void Supervision::unhealthy(const std::string& service, Supervised& s, const std::string& why,
                            const World& world, const Now& now, std::vector<Action>& actions) {
  const ServiceConfig& cfg = *config_.find_service(service);
  switch (traits(s.via).on_unhealthy) {
    case BackendTraits::OnUnhealthy::stop_then_policy:
      if (!s.pid) return;
      actions.emplace_back(make_event(now, "service.restart", std::nullopt, service,
                                      fmt::format("restarting {}: {}", service, why)));
      stop_child(service, s, world, now, actions);
      s.in<phase::Stopping>()->crash = why;  // its exit is a failure: policy and backoff apply
      return;
    case BackendTraits::OnUnhealthy::crash_and_restart_now:
      break;
  }
  // A failure whatever its exit: recorded now, the restart counted against max_restarts.
  const bool unit = s.via == Control::unit;
  actions.emplace_back(RecordCrash{service, 0, std::nullopt, std::nullopt, now.wall, why,
                                   world.ledger.holders(kHeld), unit ? "" : s.target,
                                   unit ? s.target : "", false});
  if (restart_over_limit(s, cfg, now)) {
    enter(s, phase::Failed{}, now);
    s.reason = fmt::format("{} times in {}; last: {}", s.restarts.size(),
                           format_duration(cfg.restart_window), why);
    actions.emplace_back(make_event(
        now, "service.failed", std::nullopt, service,
        fmt::format("{} failed: {}; stopping it; start it by hand once fixed", service, s.reason)));
    // Not left running while shown failed: it answers no check and holds its memory (a process
    // is stopped by its SIGTERM the same way). Its exit is the stop's, and it stays failed.
    s.stop_counted = true;
    ++s.expected_exits;
    s.stop_requested_at = now.mono;
    s.bytes_at_stop = world.services.at(service).bytes;
    actions.emplace_back(Lifecycle{service, Command::stop, s.via, s.target, cfg.stop_timeout});
    return;
  }
  actions.emplace_back(make_event(now, "service.restart", std::nullopt, service,
                                  fmt::format("restarting {}: {}", service, why)));
  ++s.expected_exits;
  enter(s, phase::Stopping{}, now);
  s.reason = why;
  actions.emplace_back(Lifecycle{service, Command::restart, s.via, s.target, cfg.stop_timeout});
}

void Supervision::restart_after_backoff(const std::string& service, Supervised& s,
                                        const World& world, const Now& now,
                                        std::vector<Action>& actions, Intents& intents) {
  ++s.restart_count;
  if (s.via == Control::managed) {
    spawn(service, s, false, world, now, actions, intents);  // "service.started" at its pid
    return;
  }
  enter(s, phase::Starting{}, now);  // checked once the engine says it started
  s.started_at = now.mono;
  actions.emplace_back(make_event(now, "service.restarting", std::nullopt, service,
                                  fmt::format("starting {} again", label(service, s))));
  actions.emplace_back(Lifecycle{service, Command::start, s.via, s.target,
                                 config_.find_service(service)->stop_timeout});
}

void Supervision::verify_stops(const World& world, const Now& now, std::vector<Action>& actions) {
  for (auto& [name, s] : supervised_) verify_stop(name, s, world, now, actions);
}

void Supervision::verify_stop(const std::string& name, Supervised& s, const World& world,
                              const Now& now, std::vector<Action>& actions) {
  {
    Bytes bytes = world.services.at(name).bytes;
    if (!s.verify_until) return;
    bool gone = bytes < kHeld;
    if (!gone && now.mono < *s.verify_until) return;
    s.verify_until.reset();
    std::string message;
    if (gone) {
      message = fmt::format("stopped {}: {} → {} in {:.1f} s", name, format_size(s.bytes_at_stop),
                            format_size(bytes),
                            static_cast<double>((now.mono - s.stop_requested_at).count()) / 1000.0);
    } else {
      std::string where;
      for (const auto& g : world.ledger.status().gpus)
        for (const auto& h : g.holdings)
          if (h.owner == Owner{OwnerKind::service, name}) {
            std::string pids;
            for (int p : h.pids) pids += (pids.empty() ? "" : ", ") + std::to_string(p);
            where += fmt::format("{}{} on GPU {} (pids {})", where.empty() ? "" : "; ",
                                 format_size(h.bytes), g.sample.index, pids.empty() ? "?" : pids);
          }
      message = fmt::format("stopped {}, but its processes still hold {}", name, where);
    }
    actions.emplace_back(make_event(now, gone ? "service.stopped" : "service.stop_incomplete",
                                    std::nullopt, name, message));
    finish_waiters(s, Command::stop, gone, message, actions);
  }
}

}  // namespace vramd
