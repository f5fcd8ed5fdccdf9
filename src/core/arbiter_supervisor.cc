// The Arbiter's supervision of services it runs (`start`): start, stop with SIGKILL after
// stop_timeout and a check that the GPU memory went, health checks, restarts with exponential
// backoff, crash loops, exclusive groups. Part of class Arbiter (arbiter.h); no I/O: the shell
// spawns, signals and checks health when asked, and reports back.
#include <csignal>

#include <fmt/format.h>

#include "core/arbiter.h"

namespace vramd {

namespace {

constexpr Duration kStartingHealthInterval = std::chrono::seconds(1);
constexpr Duration kFirstBackoff = std::chrono::seconds(1);
constexpr Duration kMaxBackoff = std::chrono::minutes(5);
constexpr Duration kStopVerifyTimeout = std::chrono::seconds(10);
constexpr Duration kHealthyResetsBackoff = std::chrono::minutes(1);
constexpr Bytes kHeld = 64 * MiB;  // less than this left on the GPU counts as gone

std::string exit_text(std::optional<int> code, std::optional<int> sig) {
  if (sig) {
    const char* name = sigabbrev_np(*sig);
    return fmt::format("killed by SIG{}", name ? name : std::to_string(*sig).c_str());
  }
  if (code) return fmt::format("exited with status {}", *code);
  return "exited (status unknown: vramd adopted it after a restart)";
}

}  // namespace

void Arbiter::finish_waiters(ManagedState& m, const std::string& kind, bool ok,
                             const std::string& message, std::vector<Action>& actions) {
  for (auto it = m.waiting.begin(); it != m.waiting.end();) {
    if (kind.empty() || it->second == kind) {
      actions.push_back(CommandFinished{it->first, ok, message});
      it = m.waiting.erase(it);
    } else {
      ++it;
    }
  }
}

std::vector<Action> Arbiter::on_service_command(const ServiceCommand& e, TimePoint now) {
  std::vector<Action> actions;
  auto it = services_.find(e.service);
  if (it == services_.end()) {
    actions.push_back(CommandFinished{e.request_id, false, fmt::format("no service named '{}'", e.service)});
    return actions;
  }
  command(e.service, e.action, e.request_id, now, actions, e.force);
  return actions;
}

void Arbiter::command(const std::string& service, const std::string& action, uint64_t request_id,
                      TimePoint now, std::vector<Action>& actions, bool force) {
  ServiceStatus& st = services_.at(service);
  const ServiceConfig* cfg = config_.find_service(service);
  if (!st.managed) {
    // Containers and units: their own manager does it.
    if (st.can_restart.empty() || !cfg) {
      actions.push_back(CommandFinished{
          request_id, false,
          fmt::format("vramd cannot {} {}: it has no start command, container or unit", action,
                      service)});
      return;
    }
    actions.push_back(Lifecycle{service, action, st.can_restart,
                                st.can_restart == "container" ? cfg->match.container : cfg->match.unit});
    actions.push_back(CommandFinished{request_id, true,
                                      fmt::format("{} {}: asked its {}", action, service, st.can_restart)});
    return;
  }
  ManagedState& m = *st.managed;
  if (action == "stop") {
    m.restart_at.reset();
    m.restart_after_stop = false;
    m.crash_on_exit.clear();
    if (m.pid && m.state != "stopping") {
      if (request_id) m.waiting.emplace_back(request_id, "stop");
      stop_child(st, now, actions);
    } else if (m.pid) {
      if (request_id) m.waiting.emplace_back(request_id, "stop");
    } else {
      if (m.state == "queued") {
        end_start_lease(st, "start cancelled by a stop", now, actions);
        finish_waiters(m, "start", false, fmt::format("the start of {} was cancelled by a stop", service),
                       actions);
        actions.push_back(EmitEvent{{now, "service.start_cancelled", std::nullopt, service,
                                     fmt::format("{} will not start: stop asked while it waited for GPU room",
                                                 service)}});
      }
      m.state = "stopped";
      actions.push_back(CommandFinished{request_id, true, fmt::format("{} is not running", service)});
    }
    return;
  }
  if (action == "restart" && m.pid) {
    if (request_id) m.waiting.emplace_back(request_id, "start");
    m.restart_after_stop = true;
    if (m.state != "stopping") stop_child(st, now, actions);
    return;
  }
  if (action != "start" && action != "restart") {
    actions.push_back(CommandFinished{request_id, false, fmt::format("unknown action '{}'", action)});
    return;
  }
  if (m.state == "running" || m.state == "starting") {
    actions.push_back(CommandFinished{request_id, true, fmt::format("{} is already {}", service, m.state)});
    return;
  }
  if (m.state == "queued" && !force) {  // already waiting for room: wait with it
    if (request_id) m.waiting.emplace_back(request_id, "start");
    return;
  }
  // A start by hand clears a crash loop's verdict.
  m.restarts.clear();
  m.backoff = Duration(0);
  if (request_id) m.waiting.emplace_back(request_id, "start");
  spawn(st, now, actions, force);
}

void Arbiter::spawn(ServiceStatus& st, TimePoint now, std::vector<Action>& actions, bool force) {
  ManagedState& m = *st.managed;
  const ServiceConfig* cfg = config_.find_service(st.name);
  if (force) {
    if (m.start_lease)
      actions.push_back(EmitEvent{{now, "service.start_forced", std::nullopt, st.name,
                                   fmt::format("{} starts now (--force): no longer waits for GPU room", st.name)}});
    end_start_lease(st, "started with --force", now, actions);
  } else if (cfg && cfg->vram_estimate && *cfg->vram_estimate > 0) {
    // Start admission: the start waits for room like a lease (evicting idle services, stopping
    // its exclusive group's other members), and launches once the lease is granted.
    m.state = "queued";
    m.restart_at.reset();
    if (m.start_lease) return;
    LeaseRequest r;
    r.vram = *cfg->vram_estimate;
    // Its GPU: the only one, else where it was last seen; else any.
    if (status_.gpus.size() == 1) r.gpu = status_.gpus[0].sample.index;
    else if (st.last_gpu) r.gpu = st.last_gpu;
    r.holder = "vramd";
    r.label = "start " + st.name;
    r.service = st.name;
    r.start = true;
    if (!cfg->start.empty()) r.command = cfg->start[0];
    uint64_t id = next_lease_id_++;
    m.start_lease = id;
    m.reason = fmt::format("waiting for {} of GPU memory (lease #{})", format_size(r.vram), id);
    actions.push_back(EmitEvent{{now, "service.queued", r.gpu, st.name,
                                 fmt::format("{} waits for {} on {} before it starts (lease #{})", st.name,
                                             format_size(r.vram),
                                             r.gpu ? fmt::format("GPU {}", *r.gpu) : "any GPU", id)}});
    queue_lease(id, std::move(r), now, actions);  // handle() admits after every event
    return;
  }
  launch(st, now, actions);
}

void Arbiter::end_start_lease(ServiceStatus& st, const std::string& why, TimePoint now,
                              std::vector<Action>& actions) {
  if (!st.managed || !st.managed->start_lease) return;
  uint64_t id = *st.managed->start_lease;
  st.managed->start_lease.reset();
  auto it = leases_.find(id);
  if (it == leases_.end()) return;
  bool granted = it->second.state == LeaseState::granted;
  end_lease(id, granted ? LeaseState::released : LeaseState::cancelled,
            fmt::format("{}: {}", st.name, why), now, actions);
}

void Arbiter::launch(ServiceStatus& st, TimePoint now, std::vector<Action>& actions) {
  ManagedState& m = *st.managed;
  const ServiceConfig* cfg = config_.find_service(st.name);
  // Exclusive group: the other members give the GPU up first.
  if (cfg && !cfg->group.empty()) {
    for (const auto& other : config_.services) {
      if (other.name == st.name || other.group != cfg->group) continue;
      ServiceStatus& o = services_.at(other.name);
      if (o.managed && o.managed->pid && o.managed->state != "stopping") {
        actions.push_back(EmitEvent{{now, "service.group_stop", std::nullopt, other.name,
                                     fmt::format("stopping {}: {} of group '{}' starts", other.name,
                                                 st.name, cfg->group)}});
        command(other.name, "stop", 0, now, actions);
      } else if (!o.managed && o.state == "up" && o.bytes >= kHeld && !o.busy.value_or(false)) {
        start_unload(other.name, "group", 0, now, actions);
      }
    }
  }
  m.state = "starting";
  m.restart_at.reset();
  m.health_failures = 0;
  m.crash_on_exit.clear();
  actions.push_back(SpawnService{st.name});
}

void Arbiter::stop_child(ServiceStatus& st, TimePoint now, std::vector<Action>& actions) {
  ManagedState& m = *st.managed;
  m.state = "stopping";
  m.stop_sent_at = now;
  m.kill_sent = false;
  m.stop_requested_at = now;
  m.bytes_at_stop = st.bytes;
  actions.push_back(SignalService{st.name, *m.pid, SIGTERM});
}

std::vector<Action> Arbiter::on_child_started(const ChildStarted& e, TimePoint now) {
  std::vector<Action> actions;
  auto it = services_.find(e.service);
  if (it == services_.end() || !it->second.managed) return actions;
  ManagedState& m = *it->second.managed;
  if (!e.ok) {
    m.state = "failed";
    m.reason = e.error;
    actions.push_back(EmitEvent{{now, "service.start_failed", std::nullopt, e.service,
                                 fmt::format("cannot start {}: {}", e.service, e.error)}});
    finish_waiters(m, "start", false, e.error, actions);
    end_start_lease(it->second, "could not start", now, actions);
    return actions;
  }
  if (e.adopted) end_start_lease(it->second, "adopted", now, actions);
  m.pid = e.pid;
  m.start_ticks = e.start_ticks;
  m.adopted = e.adopted;
  m.started_at = now;
  m.healthy_since.reset();
  m.health_in_flight = false;
  m.next_health = now + (e.adopted ? Duration(0) : kStartingHealthInterval);
  m.state = e.adopted ? "running" : "starting";
  if (e.adopted) m.healthy_since = now;
  actions.push_back(EmitEvent{{now, e.adopted ? "service.adopted" : "service.started", std::nullopt,
                               e.service,
                               e.adopted ? fmt::format("{} (pid {}) still runs: adopted again", e.service, e.pid)
                                         : fmt::format("started {} (pid {})", e.service, e.pid)}});
  return actions;
}

std::vector<Action> Arbiter::on_child_exited(const ChildExited& e, TimePoint now) {
  std::vector<Action> actions;
  auto it = services_.find(e.service);
  if (it == services_.end() || !it->second.managed) return actions;
  ServiceStatus& st = it->second;
  ManagedState& m = *st.managed;
  if (!m.pid || *m.pid != e.pid) return actions;
  const ServiceConfig* cfg = config_.find_service(e.service);
  m.pid.reset();
  end_start_lease(st, "exited before it was up", now, actions);
  m.last_exit_code = e.exit_code;
  m.last_signal = e.signal;
  m.last_exit_at = now;
  m.health_in_flight = false;
  std::string how = exit_text(e.exit_code, e.signal);

  bool asked = m.state == "stopping" && m.crash_on_exit.empty();
  if (asked) {
    m.verify_until = now + kStopVerifyTimeout;  // verify_stops() says when the memory is gone
    if (m.restart_after_stop) {
      m.restart_after_stop = false;
      ++m.restart_count;
      actions.push_back(EmitEvent{{now, "service.restarting", std::nullopt, e.service,
                                   fmt::format("{} {}; starting it again", e.service, how)}});
      spawn(st, now, actions);
    } else {
      m.state = "stopped";
    }
    return actions;
  }

  // It died on its own (or vramd ended it for failing): a crash.
  bool ended_by_vramd = !m.crash_on_exit.empty();  // for failing: a failure whatever the status
  std::string why = ended_by_vramd ? m.crash_on_exit : how;
  m.crash_on_exit.clear();
  bool failure = ended_by_vramd || !e.exit_code || *e.exit_code != 0 || e.signal;
  RecordCrash crash{e.service, e.pid, e.exit_code, e.signal, now, ended_by_vramd ? why : "", {}};
  for (const auto& g : status_.gpus)
    for (const auto& h : g.holdings)
      if (h.owner.kind != OwnerKind::baseline && h.bytes >= kHeld)
        crash.gpu_holders.emplace_back(h.owner.name, h.bytes);
  std::sort(crash.gpu_holders.begin(), crash.gpu_holders.end(),
            [](const auto& a, const auto& b) { return a.second > b.second; });
  if (failure) actions.push_back(crash);
  actions.push_back(EmitEvent{{now, failure ? "service.crashed" : "service.exited", std::nullopt,
                               e.service, fmt::format("{} {}", e.service, why)}});

  std::string policy = cfg ? cfg->restart : "on-failure";
  bool again = policy == "always" || (policy == "on-failure" && failure);
  if (!again) {
    m.state = failure ? "failed" : "stopped";
    m.reason = why;
    finish_waiters(m, "", false, fmt::format("{} {}", e.service, why), actions);
    return actions;
  }
  while (!m.restarts.empty() && now - m.restarts.front() > cfg->restart_window) m.restarts.pop_front();
  m.restarts.push_back(now);
  if (static_cast<int>(m.restarts.size()) > cfg->max_restarts) {
    m.state = "failed";
    m.reason = fmt::format("{} times in {}; last: {}", m.restarts.size(),
                           format_duration(cfg->restart_window), why);
    actions.push_back(EmitEvent{{now, "service.failed", std::nullopt, e.service,
                                 fmt::format("{} failed: crashed {}; start it by hand once fixed "
                                             "(vramd doctor {})",
                                             e.service, m.reason, e.service)}});
    finish_waiters(m, "", false, fmt::format("{} failed: crashed {}", e.service, m.reason), actions);
    return actions;
  }
  m.backoff = m.backoff == Duration(0) ? kFirstBackoff : std::min(m.backoff * 2, kMaxBackoff);
  m.restart_at = now + m.backoff;
  m.state = "backoff";
  m.reason = why;
  actions.push_back(EmitEvent{{now, "service.backoff", std::nullopt, e.service,
                               fmt::format("{} {}; restarting in {}", e.service, why,
                                           format_duration(m.backoff))}});
  return actions;
}

std::vector<Action> Arbiter::on_health_checked(const HealthChecked& e, TimePoint now) {
  std::vector<Action> actions;
  auto it = services_.find(e.service);
  if (it == services_.end() || !it->second.managed) return actions;
  ServiceStatus& st = it->second;
  ManagedState& m = *st.managed;
  const ServiceConfig* cfg = config_.find_service(e.service);
  m.health_in_flight = false;
  m.last_health = e.message;
  if (m.state == "starting") {
    m.next_health = now + kStartingHealthInterval;
    if (!e.ok) return actions;
    m.state = "running";
    m.healthy_since = now;
    m.health_failures = 0;
    m.reason.clear();
    m.next_health = now + cfg->health_interval;
    end_start_lease(st, "is up", now, actions);  // its memory is its own from now on
    std::string took = m.started_at ? format_age(now - *m.started_at) : "?";
    actions.push_back(EmitEvent{{now, "service.healthy", std::nullopt, e.service,
                                 fmt::format("{} is up (pid {}) after {}", e.service, m.pid.value_or(0), took)}});
    finish_waiters(m, "start", true, fmt::format("{} is up after {}", e.service, took), actions);
    return actions;
  }
  if (m.state != "running") return actions;
  m.next_health = now + cfg->health_interval;
  if (e.ok) {
    if (m.health_failures > 0)
      actions.push_back(EmitEvent{{now, "service.healthy", std::nullopt, e.service,
                                   fmt::format("{} answers its health check again", e.service)}});
    m.health_failures = 0;
    return actions;
  }
  if (++m.health_failures == 1)
    actions.push_back(EmitEvent{{now, "service.unhealthy", std::nullopt, e.service,
                                 fmt::format("{} failed a health check: {}", e.service, e.message)}});
  if (m.health_failures >= cfg->health_failures && m.pid) {
    std::string why = fmt::format("failed {} health checks in a row (last: {})", m.health_failures, e.message);
    actions.push_back(EmitEvent{{now, "service.restart", std::nullopt, e.service,
                                 fmt::format("restarting {}: {}", e.service, why)}});
    stop_child(st, now, actions);
    m.crash_on_exit = why;  // its exit counts as a failure: the restart policy and backoff apply
  }
  return actions;
}

void Arbiter::supervise_tick(TimePoint now, std::vector<Action>& actions) {
  for (auto& [name, st] : services_) {
    if (!st.managed) continue;
    ManagedState& m = *st.managed;
    const ServiceConfig* cfg = config_.find_service(name);
    if (m.state == "starting" && m.started_at && now - *m.started_at > cfg->start_timeout && m.pid) {
      std::string why = fmt::format("did not answer its health check within start_timeout {} (last: {})",
                                    format_duration(cfg->start_timeout),
                                    m.last_health.empty() ? "no answer" : m.last_health);
      actions.push_back(EmitEvent{{now, "service.start_timeout", std::nullopt, name,
                                   fmt::format("{} {}", name, why)}});
      stop_child(st, now, actions);
      m.crash_on_exit = why;
    }
    if (m.state == "stopping" && m.pid && !m.kill_sent && m.stop_sent_at &&
        now - *m.stop_sent_at >= cfg->stop_timeout) {
      m.kill_sent = true;
      actions.push_back(EmitEvent{{now, "service.kill", std::nullopt, name,
                                   fmt::format("{} did not stop within {}: SIGKILL", name,
                                               format_duration(cfg->stop_timeout))}});
      actions.push_back(SignalService{name, *m.pid, SIGKILL});
    }
    if (m.state == "backoff" && m.restart_at && now >= *m.restart_at) {
      ++m.restart_count;
      spawn(st, now, actions);
    }
    if ((m.state == "starting" || m.state == "running") && m.pid && !m.health_in_flight &&
        m.next_health && now >= *m.next_health) {
      m.health_in_flight = true;
      actions.push_back(CheckHealth{name});
    }
    if (m.state == "running" && m.healthy_since && now - *m.healthy_since > kHealthyResetsBackoff)
      m.backoff = Duration(0);
  }
}

void Arbiter::verify_stops(TimePoint now, std::vector<Action>& actions) {
  for (auto& [name, st] : services_) {
    if (!st.managed || !st.managed->verify_until) continue;
    ManagedState& m = *st.managed;
    bool gone = st.bytes < kHeld;
    if (!gone && now < *m.verify_until) continue;
    m.verify_until.reset();
    std::string message;
    if (gone) {
      message = fmt::format("stopped {}: {} → {} in {:.1f} s", name, format_size(m.bytes_at_stop),
                            format_size(st.bytes), (now - m.stop_requested_at).count() / 1000.0);
    } else {
      std::string where;
      for (const auto& g : status_.gpus)
        for (const auto& h : g.holdings)
          if (h.owner == Owner{OwnerKind::service, name}) {
            std::string pids;
            for (int p : h.pids) pids += (pids.empty() ? "" : ", ") + std::to_string(p);
            where += fmt::format("{}{} on GPU {} (pids {})", where.empty() ? "" : "; ",
                                 format_size(h.bytes), g.sample.index, pids.empty() ? "?" : pids);
          }
      message = fmt::format("stopped {}, but its processes still hold {}", name, where);
    }
    actions.push_back(EmitEvent{{now, gone ? "service.stopped" : "service.stop_incomplete",
                                 std::nullopt, name, message}});
    finish_waiters(m, "stop", gone, message, actions);
  }
}

}  // namespace vramd
