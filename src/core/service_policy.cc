#include "core/service_policy.h"

#include <algorithm>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/eviction.h"
#include "core/service_kinds.h"
#include "core/wake.h"

namespace vramd {

namespace {

// GPU utilisation above this while only one service holds a GPU counts as that service working.
constexpr double kActiveUtilizationPct = 5.0;
constexpr Bytes kStableStep = 64 * MiB;  // a load has finished when it grows less than this
constexpr Bytes kOnGpu = 64 * MiB;       // holding at least this: the service is on that GPU
constexpr Duration kDeepenSettle = std::chrono::seconds(10);  // between two deepenings
// Asked again within this of its last activity: the same busy spell (a chat's next message).
constexpr Duration kSpellGap = std::chrono::seconds(60);

Duration unload_timeout(const ServiceConfig& svc) {
  if (svc.unload_timeout) return *svc.unload_timeout;
  const ServiceKind* kind = find_service_kind(svc.kind);
  return kind ? kind->unload_timeout : std::chrono::seconds(20);
}

}  // namespace

std::optional<MonoTime> idle_since(const ServiceStatus& st) {
  bool up = st.state == ServiceState::up || st.state == ServiceState::unloading;
  if (!up || st.busy.value_or(false) || st.requests_in_flight > 0) return std::nullopt;
  return st.last_activity;
}

ServicePolicy::ServicePolicy(const Config& config) : config_(config) {
  for (const auto& svc : config_.services) add(svc);
}

void ServicePolicy::add(const ServiceConfig& svc) {
  ServiceStatus st;
  st.name = svc.name;
  st.kind = svc.kind;
  st.url = svc.url;
  st.unload_after_idle = svc.unload_after_idle;
  const ServiceKind* kind = find_service_kind(svc.kind);
  st.reload_cost = kind ? kind->reload_cost : Duration(std::chrono::seconds(30));
  // What its adapter answers not_supported to (docs/adapters.md).
  st.can_unload = kind && kind->has_unload;
  if (kind && kind->unload_needs == UnloadNeeds::unload_url) st.can_unload = !svc.unload_url.empty();
  if (kind && kind->unload_needs == UnloadNeeds::models) st.can_unload = !svc.models.empty();
  if (kind && kind->unload_needs == UnloadNeeds::router) st.can_unload = svc.router.value_or(true);
  if (!svc.start.empty())
    st.control = Control::managed;
  else if (!svc.match.container.empty())
    st.control = Control::container;
  else if (!svc.match.unit.empty())
    st.control = Control::unit;
  st.discovered = svc.discovered;
  st.discovered_by = svc.discovered_by;
  // A discovered service is left alone unless discover_unload: no unload, no lifecycle.
  if (svc.discovered && !config_.daemon.discover_unload) {
    st.can_unload = false;
    st.control = Control::none;
  }
  services_[svc.name] = std::move(st);
}

const ServiceStatus* ServicePolicy::find(const std::string& name) const {
  auto it = services_.find(name);
  return it == services_.end() ? nullptr : &it->second;
}

bool ServicePolicy::unloading(const std::string& name) const {
  for (const auto& [id, run] : unloads_)
    if (run.service == name) return true;
  return false;
}

std::map<Owner, Bytes> ServicePolicy::self_reports() const {
  std::map<Owner, Bytes> out;
  for (const auto& [name, st] : services_) {
    const ServiceKind* kind = find_service_kind(st.kind);
    if (st.self_reported_vram && kind && kind->self_report_covers_process)
      out[{OwnerKind::service, name}] = *st.self_reported_vram;
  }
  return out;
}

Bytes ServicePolicy::bytes_on(const std::string& service, unsigned gpu) const {
  auto it = services_.find(service);
  if (it == services_.end()) return 0;
  for (const auto& [g, b] : it->second.per_gpu)
    if (g == gpu) return b;
  return 0;
}

std::optional<MonoTime> ServicePolicy::next_deadline() const {
  std::optional<MonoTime> out;
  for (const auto& [id, run] : unloads_)
    if (run.verification) {
      MonoTime t = run.verification->start() + run.timeout;
      if (!out || t < *out) out = t;
    }
  return out;
}

PaceContext ServicePolicy::pace_context(const ServiceStatus& st, bool decisions_pending) const {
  PaceContext ctx;
  ctx.base = config_.daemon.probe_interval;
  ctx.quiet = std::max(config_.daemon.quiet_probe_interval, ctx.base);
  ctx.decisions_pending = decisions_pending;
  if (const ServiceConfig* cfg = config_.find_service(st.name))
    ctx.unload_after_idle = cfg->unload_after_idle;
  return ctx;
}

void ServicePolicy::on_probe(const ProbeDone& e, const Now& now, bool decisions_pending,
                             std::vector<Action>& actions) {
  auto it = services_.find(e.service);
  if (it == services_.end()) return;
  ServiceStatus& st = it->second;
  const ServiceProbe& p = e.probe;
  st.pace.same_answers = same_answer(p, st) ? st.pace.same_answers + 1 : 0;
  st.pace.probed_bytes = st.bytes;
  apply_probe(st, p, now, actions);
  Duration wait = probe_wait(st, pace_context(st, decisions_pending));
  st.pace.due = now.mono + wait;
  actions.emplace_back(ScheduleProbe{st.name, wait});
}

void ServicePolicy::bring_probes_forward(bool decisions_pending, const Now& now,
                                         std::vector<Action>& actions) {
  for (auto& [name, st] : services_) {
    // What the GPU shows moving starts the backing off again from probe_interval.
    if (st.pace.gpu_working || gpu_moved(st)) st.pace.same_answers = 0;
    bring_forward(st, decisions_pending, now, actions);
  }
}

void ServicePolicy::bring_forward(ServiceStatus& st, bool decisions_pending, const Now& now,
                                  std::vector<Action>& actions) {
  if (!st.pace.due || !st.last_probe) return;
  MonoTime wanted = *st.last_probe + probe_wait(st, pace_context(st, decisions_pending));
  if (wanted >= *st.pace.due) return;
  st.pace.due = std::max(wanted, now.mono);
  actions.emplace_back(ScheduleProbe{st.name, *st.pace.due - now.mono});
}

void ServicePolicy::reset_pace(const std::string& service, bool decisions_pending, const Now& now,
                               std::vector<Action>& actions) {
  auto it = services_.find(service);
  if (it == services_.end()) return;
  it->second.pace.same_answers = 0;
  bring_forward(it->second, decisions_pending, now, actions);
}

void ServicePolicy::on_health_seen(const HealthChecked& e, const Now& now,
                                   std::vector<Action>& actions) {
  auto it = services_.find(e.service);
  if (it == services_.end() || !it->second.pace.due) return;
  if (e.ok == (it->second.state == ServiceState::up)) return;  // it agrees
  it->second.pace.same_answers = 0;
  it->second.pace.due = now.mono;
  actions.emplace_back(ScheduleProbe{e.service, Duration(0)});
}

void ServicePolicy::apply_probe(ServiceStatus& st, const ServiceProbe& p, const Now& now,
                                std::vector<Action>& actions) {
  bool was_reachable = st.state != ServiceState::unreachable && st.state != ServiceState::unknown;
  bool unloading = st.state == ServiceState::unloading;
  st.last_probe = now.mono;
  std::string previous_error = std::exchange(st.probe_error, p.error);
  if (!p.reachable) {
    if (st.state != ServiceState::unreachable && !unloading)
      actions.emplace_back(make_event(now, "service.unreachable", std::nullopt, st.name,
                                      fmt::format("{} is unreachable: {}", st.name, p.error)));
    if (!unloading) st.state = ServiceState::unreachable;
    st.busy.reset();
    return;
  }
  if (!was_reachable && st.state == ServiceState::unreachable)
    actions.emplace_back(make_event(now, "service.reachable", std::nullopt, st.name,
                                    fmt::format("{} answers again", st.name)));
  // It answers, but not in its API's shape (HTTP 500, garbage): once per change of the error.
  if (!p.error.empty() && p.error != previous_error)
    actions.emplace_back(
        make_event(now, "service.error", std::nullopt, st.name,
                   fmt::format("{} answers but its API is broken: {}", st.name, p.error)));
  if (!unloading) st.state = ServiceState::up;
  bool models_changed = st.last_activity.has_value() && p.models != st.models &&
                        !(p.models.empty() && st.asleep);
  if (!st.last_activity) st.last_activity = now.mono;  // first sight: count from now
  bool was_busy = st.busy.value_or(false);
  if (p.busy.value_or(false) && !was_busy && st.requests_in_flight == 0) on_asked(st, now, actions);
  st.busy = p.busy;
  st.can_wake = p.can_wake;
  st.queue_depth = p.queue_depth;
  // The server's own word on its sleep (vLLM's /is_sleeping) where vramd's differs: put to sleep
  // by someone else, or before a restart of vramd (its depth unknown: woken as from the deeper
  // sleep, whose wake also reloads the weights); woken by someone else.
  st.reports_sleep = p.asleep.has_value();
  if (p.asleep && *p.asleep && !st.asleep && !unloading) {
    Asleep a;
    a.depth = SleepDepth::sleep2;
    a.since = now.mono;
    a.gpu_kept = st.bytes;
    a.models = p.models;
    st.asleep = a;
    actions.emplace_back(make_event(
        now, "service.asleep", std::nullopt, st.name,
        fmt::format("{} says it is asleep, and vramd did not put it to sleep (or restarted "
                    "since): its next request wakes it, reloading its weights",
                    st.name)));
  } else if (p.asleep && !*p.asleep && st.asleep && st.asleep->depth != SleepDepth::stop &&
             !unloading) {
    st.asleep.reset();
  }
  // A sleeper's models are still its own (the front door routes to them and wakes it), where
  // its API no longer lists them asleep (Ollama's /api/ps, llama.cpp's loaded models).
  st.models = p.models.empty() && st.asleep ? st.asleep->models : p.models;
  if (!p.installed.empty()) st.installed = p.installed;
  st.self_reported_vram = p.self_reported_vram;
  note_variant(st, p, now, actions);
  note_finished(st, p, actions);
  // Activity: working now, the end of work seen, or a change in what is loaded.
  if (p.busy.value_or(false) || was_busy || models_changed) st.last_activity = now.mono;
}

void ServicePolicy::on_requests(const RequestsInFlight& e, const Now& now,
                                std::vector<Action>& actions) {
  auto it = services_.find(e.service);
  if (it == services_.end()) return;
  if (e.in_flight > 0 && it->second.requests_in_flight == 0) on_asked(it->second, now, actions);
  // Requests starting or ending are activity: idle counts from the end of the last one.
  it->second.requests_in_flight = std::max(0, e.in_flight);
  it->second.last_activity = now.mono;
}

void ServicePolicy::on_sample(const Ledger& ledger, const std::set<std::string>& in_use,
                              bool decisions_pending, const Now& now, std::vector<Action>& actions,
                              Intents& intents) {
  last_sample_at_ = ledger.status().sampled_at;
  for (auto& [name, st] : services_) {
    auto it = ledger.service_rss().find(name);
    st.rss = it != ledger.service_rss().end() ? std::optional<Bytes>(it->second) : std::nullopt;
    auto pids = ledger.service_pids().find(name);
    st.host_pids = pids != ledger.service_pids().end() ? pids->second : std::vector<int>{};
  }
  update_holdings(ledger, now);
  check_suspended_at_start(actions);
  for (auto& [name, st] : services_) {
    // A load seen (a request that loaded it itself, a wake by hand): awake. A server that says
    // whether it sleeps is believed instead (its bytes before the first sample are unknown).
    if (st.asleep && st.state != ServiceState::unloading && !st.reports_sleep &&
        st.bytes >= st.asleep->gpu_kept + kWorthUnloading)
      st.asleep.reset();
  }
  // MemAvailable under the reserve: a shallow sleeper gives its host RAM back first.
  if (ledger.mem_available() && ledger.mem_total()) {
    Bytes reserve = config_.host.reserve_of(*ledger.mem_total());
    if (*ledger.mem_available() < reserve)
      deepen(DeepenIntent{reserve - *ledger.mem_available(),
                          fmt::format("host RAM available ({}) fell under the reserve ({})",
                                      format_size(*ledger.mem_available()), format_size(reserve))},
             now, actions, intents);
  }
  learn_reload_costs(now);
  learn_load_peaks(actions);
  advance_unloads(now, actions, intents);
  check_idle_ttl(in_use, now, actions);
  bring_probes_forward(decisions_pending, now, actions);
}

void ServicePolicy::on_tick(const Now& now, std::vector<Action>& actions, Intents& intents) {
  advance_unloads(now, actions, intents);
}

void ServicePolicy::update_holdings(const Ledger& ledger, const Now& now) {
  for (auto& [name, st] : services_) {
    st.bytes = 0;
    st.per_gpu.clear();
    st.gpu_pids.clear();
    st.pace.gpu_working = false;
  }
  for (const auto& g : ledger.status().gpus) {
    ServiceStatus* alone = nullptr;
    int holders = 0;
    for (const auto& h : g.holdings) {
      if (h.owner.kind == OwnerKind::baseline) continue;
      ++holders;
      if (h.owner.kind != OwnerKind::service) continue;
      auto it = services_.find(h.owner.name);
      if (it == services_.end()) continue;
      it->second.bytes += h.bytes;
      it->second.per_gpu.emplace_back(g.sample.index, h.bytes);
      for (int pid : h.pids)
        if (std::find(it->second.gpu_pids.begin(), it->second.gpu_pids.end(), pid) ==
            it->second.gpu_pids.end())
          it->second.gpu_pids.push_back(pid);
      if (h.bytes >= kOnGpu) it->second.last_gpu = g.sample.index;
      if (h.bytes >= kOnGpu && g.sample.utilization_pct.value_or(0) > kActiveUtilizationPct)
        it->second.pace.gpu_working = true;
      alone = &it->second;
    }
    // The GPU works while only this service holds it: the service is working, whatever its API
    // says (servers without a busy call).
    if (holders == 1 && alone && g.sample.utilization_pct.value_or(0) > kActiveUtilizationPct)
      alone->last_activity = now.mono;
  }
}

void ServicePolicy::learn_reload_costs(const Now& now) {
  // A load: the service's memory grows from (almost) nothing; it has finished when a sample
  // grows less than kStableStep. What it took is that service's reload cost from then on.
  for (auto& [name, st] : services_) {
    auto prev = last_bytes_.find(name);
    if (prev != last_bytes_.end()) {
      Bytes before = prev->second;
      if (before < kWorthUnloading && st.bytes >= kWorthUnloading &&
          st.state != ServiceState::unloading) {
        st.load_started = now.mono;
      } else if (st.load_started && st.bytes >= kWorthUnloading &&
                 (st.bytes > before ? st.bytes - before : before - st.bytes) < kStableStep) {
        Duration took = now.mono - *st.load_started;
        st.reload_cost = st.reload_measured ? (st.reload_cost + took) / 2 : took;
        st.reload_measured = true;
        st.load_started.reset();
        st.last_load_bytes = st.bytes;
      } else if (st.bytes < kWorthUnloading) {
        st.load_started.reset();
      }
    }
    last_bytes_[name] = st.bytes;
  }
}

void ServicePolicy::learn_load_peaks(std::vector<Action>& actions) {
  // Once a load has settled: the most the service holds with its one model (several loaded at
  // once: whose bytes are whose is unknown, so nothing is learned). The store hears of a peak
  // when it has grown by a step since it last heard, not at every sample of a slow growth.
  for (auto& [name, st] : services_) {
    // Asleep, what it holds is a context, not a load (a sleeping vLLM keeps ~500 MiB and still
    // lists its model): a wake sized by that would be admitted for too little.
    if (st.state != ServiceState::up || st.load_started || st.bytes < kWorthUnloading ||
        st.models.size() > 1 || st.asleep)
      continue;
    std::string model = st.models.empty() ? std::string() : st.models[0];
    Bytes& peak = st.load_peaks[model];
    peak = std::max(peak, st.bytes);
    Bytes& saved = saved_peaks_[{name, model}];
    if (saved == 0 || peak >= saved + kStableStep) {
      saved = peak;
      actions.emplace_back(RememberLoadPeak{{name, model, peak}});
    }
  }
}

void ServicePolicy::restore_load_peaks(const std::vector<LoadPeak>& peaks) {
  for (const auto& p : peaks) {
    auto it = services_.find(p.service);
    if (it == services_.end() || p.bytes == 0) continue;  // a service no longer configured
    Bytes& peak = it->second.load_peaks[p.model];
    peak = std::max(peak, p.bytes);
    Bytes& saved = saved_peaks_[{p.service, p.model}];
    saved = std::max(saved, p.bytes);
  }
}

void ServicePolicy::start_unload(const std::string& service, UnloadReason reason,
                                 uint64_t request_id, const Now& now,
                                 std::vector<Action>& actions) {
  ServiceStatus& st = services_.at(service);
  const ServiceConfig* cfg = config_.find_service(service);
  UnloadRun run;
  run.id = next_unload_id_++;
  run.request_id = request_id;
  run.service = service;
  run.reason = reason;
  run.requested_at = now.mono;
  run.timeout = cfg ? unload_timeout(*cfg) : Duration(std::chrono::seconds(20));
  for (const auto& [gpu, bytes] : st.per_gpu) run.before[gpu] = bytes;
  run.rss_before = st.rss;
  if (st.prewarmed) {
    // Put back to sleep unasked: not prewarmed again this hour.
    auto hour = std::chrono::floor<std::chrono::hours>(now.wall.time_since_epoch());
    st.no_prewarm_until = now.mono_of(TimePoint(hour + std::chrono::hours(1)));
    actions.emplace_back(make_event(
        now, "service.prewarm_unused", std::nullopt, service,
        fmt::format("{} goes back to sleep ({}) {} after its prewarm, unused: not prewarmed "
                    "again this hour",
                    service, to_string(reason), format_age(now.mono - *st.prewarmed))));
    st.prewarmed.reset();
  }
  // As shallow as the host RAM allows (core/wake.h), unless sleep_level fixes it; suspended
  // where it has no unload call of its own (or it was refused) and host RAM takes its bytes. A
  // kind whose only sleep is a stop is called all the same: its adapter answers not_supported,
  // and the escalation stops it.
  run.depth = cfg ? choose_depth(st, *cfg, ram_room_, may_suspend(st)) : SleepDepth::sleep2;
  if (run.depth == SleepDepth::stop) run.depth = SleepDepth::sleep2;
  st.state = ServiceState::unloading;
  std::string keeps = run.depth == SleepDepth::sleep1 || run.depth == SleepDepth::suspend
                          ? fmt::format(", keeping ~{} in host RAM",
                                        format_size(host_ram_estimate(st, run.depth)))
                          : "";
  actions.emplace_back(make_event(
      now, "unload.started", std::nullopt, service,
      fmt::format("unloading {} ({}): holds {}; sleeps at {}{}", service, to_string(reason),
                  format_size(st.bytes), describe_depth(run.depth, st.kind), keeps)));
  call_unload(run, st, actions);
  unloads_.emplace(run.id, std::move(run));
}

void ServicePolicy::call_unload(UnloadRun& run, const ServiceStatus& st,
                                std::vector<Action>& actions) {
  if (run.depth == SleepDepth::suspend) run.pids = st.gpu_pids;
  actions.emplace_back(CallUnload{run.service, run.id, run.depth, run.pids});
}

bool ServicePolicy::may_suspend(const ServiceStatus& st) const {
  if (!suspend_offered_ || st.gpu_pids.empty() || !st.suspend_refused.empty()) return false;
  const ServiceConfig* cfg = config_.find_service(st.name);
  if (!cfg || (st.discovered && !config_.daemon.discover_unload)) return false;
  return !st.can_unload || st.unload_refused;
}

void ServicePolicy::check_suspended_at_start(std::vector<Action>& actions) {
  if (!suspend_offered_) return;
  for (auto& [name, st] : services_) {
    if (st.host_pids.empty() || st.bytes >= kWorthUnloading || st.asleep ||
        !suspension_checked_.insert(name).second)
      continue;
    actions.emplace_back(CheckSuspension{0, name, st.host_pids});
  }
}

void ServicePolicy::on_suspension_checked(const SuspensionChecked& e, const Now& now,
                                          std::vector<Action>& actions) {
  auto it = services_.find(e.service);
  if (it == services_.end()) return;
  ServiceStatus& st = it->second;
  // Locked ones too: a suspend cut short. The restore of the wake unlocks them.
  std::vector<int> pids = e.checkpointed;
  pids.insert(pids.end(), e.locked.begin(), e.locked.end());
  std::sort(pids.begin(), pids.end());
  if (pids.empty() || st.asleep || st.bytes >= kWorthUnloading) return;
  Asleep a;
  a.depth = SleepDepth::suspend;
  a.since = now.mono;
  a.pids = pids;
  a.models = st.models;
  // Its device memory is in its own host memory now: its RSS holds it.
  a.host_ram = st.rss.value_or(0);
  st.asleep = a;
  actions.emplace_back(make_event(
      now, "service.found_suspended", std::nullopt, st.name,
      fmt::format("{}: pids {} are suspended by cuda-checkpoint from before vramd started (its "
                  "GPU memory in host RAM): asleep at suspend, restored by its next wake",
                  st.name, fmt::join(pids, ", "))));
}

void ServicePolicy::on_unload_requested(const UnloadRequested& e, const Now& now,
                                        std::vector<Action>& actions) {
  auto refuse = [&](std::string message) {
    UnloadFinished f;
    f.request_id = e.request_id;
    f.refused = true;
    f.verdict.service = e.service;
    f.verdict.reason = e.reason;
    f.verdict.outcome = UnloadOutcome::failed;
    f.verdict.message = std::move(message);
    f.verdict.at = now.wall;
    actions.emplace_back(std::move(f));
  };
  auto it = services_.find(e.service);
  if (it == services_.end()) return refuse(fmt::format("no service named '{}'", e.service));
  ServiceStatus& st = it->second;
  if (st.discovered && !config_.daemon.discover_unload)
    return refuse(fmt::format(
        "{} was discovered, not configured: vramd leaves it alone (add it to the config, or set "
        "[daemon] discover_unload = true)",
        e.service));
  if (unloading(e.service)) return refuse(fmt::format("{} is already being unloaded", e.service));
  if (!can_free(st))
    return refuse(fmt::format(
        "vramd cannot free {}: it has no unload call, and vramd neither starts it (start) nor "
        "knows its container or unit (match.container, match.unit)",
        e.service));
  if (!e.force && (st.busy.value_or(false) || st.requests_in_flight > 0))
    return refuse(fmt::format("{} is busy{}: not unloading (use force to override)", e.service,
                              st.queue_depth ? fmt::format(" (queue {})", *st.queue_depth) : ""));
  if (!e.force && st.backoff_until && now.mono < *st.backoff_until)
    return refuse(fmt::format(
        "the last unload of {} was {}; next try in {} (unload_backoff; use force to override)",
        e.service, st.last_unload ? to_string(st.last_unload->outcome) : "unsuccessful",
        format_age(*st.backoff_until - now.mono)));
  start_unload(e.service, e.reason, e.request_id, now, actions);
}

void ServicePolicy::on_unload_call_done(const UnloadCallDone& e, const Now& now,
                                        std::vector<Action>& actions, Intents& intents) {
  auto it = unloads_.find(e.unload_id);
  if (it == unloads_.end()) return;
  UnloadRun& run = it->second;
  run.call_duration = e.took;
  ServiceStatus& st = services_.at(run.service);
  if (run.depth == SleepDepth::suspend && e.call.result != UnloadCall::Result::requested) {
    // The utility failed: the processes run on. Not tried again; what the server's call would
    // have come to (a stop where it has none) happens instead.
    st.suspend_refused = e.call.message;
    std::optional<IneffectiveUnload> fallback = run.fallback;
    if (!fallback && !st.can_unload) fallback = IneffectiveUnload::stop;
    std::string why = "the suspend failed: " + e.call.message;
    if (fallback == IneffectiveUnload::stop && unload_by_stop(run, st, why, now, actions, intents))
      return;
    finish_unload(run, UnloadOutcome::failed, why, fallback, now, actions, intents);
    unloads_.erase(it);
    return;
  }
  // Learned: its adapter has no unload call (a plain llama-server, router mode assumed until
  // then). Only a stop or a suspend frees it from now on.
  if (e.call.result == UnloadCall::Result::not_supported) st.can_unload = false;
  if (e.call.result != UnloadCall::Result::requested) {
    // Refused, or no unload API after all: its processes are suspended instead where host RAM
    // allows, from now on (its server is not asked again while vramd runs).
    bool refused = e.call.result == UnloadCall::Result::failed;
    st.unload_refused = true;
    const ServiceConfig* cfg = config_.find_service(run.service);
    if (cfg && choose_depth(st, *cfg, ram_room_, may_suspend(st)) == SleepDepth::suspend) {
      run.fallback = refused ? std::nullopt : std::optional(IneffectiveUnload::stop);
      run.depth = SleepDepth::suspend;
      actions.emplace_back(make_event(
          now, "unload.suspending", std::nullopt, run.service,
          fmt::format("{}: {}; suspending its processes instead (pids {}), keeping ~{} in host "
                      "RAM",
                      run.service,
                      refused ? "its unload call failed: " + e.call.message : e.call.message,
                      fmt::join(st.gpu_pids, ", "), format_size(st.bytes))));
      call_unload(run, st, actions);
      return;
    }
  }
  if (e.call.result == UnloadCall::Result::failed) {
    finish_unload(run, UnloadOutcome::failed, "the unload call failed: " + e.call.message,
                  std::nullopt, now, actions, intents);
    unloads_.erase(it);
    return;
  }
  if (e.call.result == UnloadCall::Result::not_supported) {
    // No unload API: only ending the process frees its memory. Its stop is its unload where
    // vramd can stop it; else it is reported.
    if (unload_by_stop(run, st, e.call.message, now, actions, intents)) return;
    finish_unload(run, UnloadOutcome::failed, e.call.message, IneffectiveUnload::stop, now, actions,
                  intents);
    unloads_.erase(it);
    return;
  }
  Bytes before = 0;
  for (const auto& [gpu, b] : run.before) before += b;
  run.verification.emplace(before, now.mono, run.timeout);
  advance_unloads(now, actions, intents);
}

bool ServicePolicy::unload_by_stop(UnloadRun& run, ServiceStatus& st, const std::string& why,
                                   const Now& now, std::vector<Action>& actions, Intents& intents) {
  const ServiceConfig* cfg = config_.find_service(run.service);
  if (!cfg || st.control == Control::none) return false;
  run.stopped = true;
  run.why = why;
  run.depth = SleepDepth::stop;
  run.fallback.reset();
  // Its process ends within stop_timeout (SIGKILL then), and its memory goes after it.
  run.timeout = unload_timeout(*cfg) + cfg->stop_timeout;
  Bytes before = 0;
  for (const auto& [gpu, b] : run.before) before += b;
  run.verification.emplace(before, now.mono, run.timeout);
  actions.emplace_back(
      make_event(now, "unload.stopping", std::nullopt, run.service,
                 fmt::format("{}: {}; stopping it: its stop is its unload", run.service, why)));
  ask_lifecycle(st, *cfg, Command::stop, actions, intents);
  return true;
}

void ServicePolicy::ask_lifecycle(const ServiceStatus& st, const ServiceConfig& cfg, Command action,
                                  std::vector<Action>& actions, Intents& intents) const {
  if (st.control == Control::managed || st.control == Control::container) {
    intents.push_back(CommandIntent{st.name, action});  // a container's exit is then one asked for
    return;
  }
  actions.emplace_back(Lifecycle{st.name, action, st.control, cfg.match.unit});
}

void ServicePolicy::advance_unloads(const Now& now, std::vector<Action>& actions,
                                    Intents& intents) {
  std::vector<uint64_t> finished;
  for (auto& [id, run] : unloads_) {
    if (!run.verification) continue;
    auto& v = *run.verification;
    // Only samples taken after the call returned count (add_sample drops older ones).
    if (last_sample_at_) v.add_sample(*last_sample_at_, services_.at(run.service).bytes);
    if (!v.done(now.mono)) continue;
    UnloadOutcome outcome = classify_unload(v.before(), v.current());
    std::string message;
    if (v.before() < kIneffectiveBelow)
      message = fmt::format("{} held nothing on the GPU", run.service);
    else if (!v.settled() && outcome == UnloadOutcome::ineffective)
      message = fmt::format("nothing came back within {} of the call",
                            format_duration(now.mono - v.start()));
    finish_unload(run, outcome, message, std::nullopt, now, actions, intents);
    finished.push_back(id);
  }
  for (auto id : finished) unloads_.erase(id);
}

void ServicePolicy::finish_unload(UnloadRun& run, UnloadOutcome outcome, const std::string& message,
                                  std::optional<IneffectiveUnload> escalate, const Now& now,
                                  std::vector<Action>& actions, Intents& intents) {
  ServiceStatus& st = services_.at(run.service);
  const ServiceConfig* cfg = config_.find_service(run.service);
  UnloadVerdict v;
  v.id = run.id;
  v.service = run.service;
  v.reason = run.reason;
  v.outcome = outcome;
  for (const auto& [gpu, b] : run.before) v.before_bytes += b;
  v.after_bytes = run.verification ? run.verification->current() : v.before_bytes;
  for (const auto& [gpu, b] : run.before) {
    Bytes after = 0;
    for (const auto& [g2, b2] : st.per_gpu)
      if (g2 == gpu) after = b2;
    v.per_gpu.push_back({gpu, {b, run.verification ? after : b}});
  }
  v.rss_before = run.rss_before;
  v.rss_after = st.rss;
  v.call_duration = run.call_duration;
  v.duration = now.mono - run.requested_at;
  if (run.verification) {
    if (auto at = run.verification->settled_at(); at && run.verification->settled())
      v.duration = *at - run.requested_at;
  }
  v.at = now.wall;
  std::string what =
      fmt::format("{}: {} → {} in {:.1f} s", to_string(outcome), format_size(v.before_bytes),
                  format_size(v.after_bytes), static_cast<double>(v.duration.count()) / 1000.0);
  if (run.stopped) what += fmt::format("; {}; stopped instead (its stop is its unload)", run.why);
  v.message = message.empty() ? what : what + "; " + message;

  // Escalation: an unload that frees nothing, or a server without one, needs the process ended;
  // a call that failed (refused, timed out, garbage) is reported and tried again after backoff.
  // A stop that was the unload is not escalated: there is nothing further to end. A service
  // vramd has no way to free gets no backoff: it is never tried again (can_free).
  if (outcome != UnloadOutcome::freed && run.stopped) {
    v.escalation = Escalation::report;
    st.backoff_until = now.mono + (cfg ? cfg->unload_backoff : Duration(std::chrono::minutes(10)));
  } else if (outcome != UnloadOutcome::freed) {
    std::optional<IneffectiveUnload> want = escalate;
    if (!want && outcome != UnloadOutcome::failed && cfg) want = cfg->on_ineffective_unload;
    if (want == IneffectiveUnload::restart || want == IneffectiveUnload::stop) {
      bool stop = want == IneffectiveUnload::stop;
      Command action = stop ? Command::stop : Command::restart;
      Escalation escalation = stop ? Escalation::stop : Escalation::restart;
      if (st.control != Control::none && cfg) {
        v.escalation = escalation;
        ask_lifecycle(st, *cfg, action, actions, intents);
      } else {
        v.escalation = Escalation::report;
        v.message += fmt::format(
            "; vramd would {} {} but cannot: vramd neither starts it (start) nor knows its "
            "container or unit (match.container, match.unit)",
            to_string(*want), run.service);
      }
    } else {
      v.escalation = Escalation::report;
    }
    if (can_free(st))
      st.backoff_until =
          now.mono + (cfg ? cfg->unload_backoff : Duration(std::chrono::minutes(10)));
  } else {
    st.backoff_until.reset();
  }
  // A suspend the utility called done whose bytes stayed (UVM, IPC memory): its processes are
  // restored, and it is not suspended again.
  if (run.depth == SleepDepth::suspend && outcome == UnloadOutcome::ineffective) {
    st.suspend_refused =
        fmt::format("suspended, but {} stayed on the GPU", format_size(v.after_bytes));
    if (v.escalation != Escalation::restart && v.escalation != Escalation::stop) {
      v.message += "; its processes are restored";
      actions.emplace_back(CallWake{run.service, 0, SleepDepth::suspend, run.pids});
    }
  }
  // Asleep from the verdict until a wake or a load is seen (core/sleep.h), whatever it still
  // holds: a sleeping vLLM keeps its CUDA context.
  v.depth = run.depth == SleepDepth::stop && !run.stopped ? SleepDepth::sleep2 : run.depth;
  if (v.escalation == Escalation::stop) v.depth = SleepDepth::stop;
  bool slept = outcome == UnloadOutcome::freed || outcome == UnloadOutcome::partial ||
               v.escalation == Escalation::restart || v.escalation == Escalation::stop ||
               run.stopped;
  if (v.escalation == Escalation::restart) v.depth = SleepDepth::sleep2;  // back up, empty
  if (slept) {
    Asleep a;
    a.depth = v.depth;
    a.since = now.mono;
    a.gpu_kept =
        v.escalation == Escalation::none || v.escalation == Escalation::report ? v.after_bytes : 0;
    a.models = st.models;
    a.reason = run.reason;
    if (a.depth == SleepDepth::suspend) {
      // The utility copied what left the GPU into the processes' host memory.
      a.host_ram = v.before_bytes - std::min(v.before_bytes, v.after_bytes);
      a.pids = run.pids;
      v.host_ram_kept = a.host_ram;
      v.message += fmt::format("; asleep at suspend (pids {}), keeping {} in host RAM",
                               fmt::join(a.pids, ", "), format_size(a.host_ram));
    } else if (a.depth == SleepDepth::sleep1) {
      if (v.rss_before && v.rss_after && *v.rss_after > *v.rss_before) {
        a.host_ram = *v.rss_after - *v.rss_before;
        a.host_ram_measured = true;
        st.sleep1_host_ram = a.host_ram;
      } else {
        a.host_ram = st.sleep1_host_ram.value_or(v.before_bytes - std::min(v.before_bytes, v.after_bytes));
      }
      v.host_ram_kept = a.host_ram;
      v.message += fmt::format("; asleep at {}, keeping {} in host RAM{}",
                               describe_depth(a.depth, st.kind), format_size(a.host_ram),
                               a.host_ram_measured ? "" : " (estimated)");
    } else {
      v.message += fmt::format("; asleep at {}", describe_depth(a.depth, st.kind));
    }
    st.asleep = a;
  }
  st.state = ServiceState::up;
  st.last_unload = v;
  st.last_unload_at = now.mono;
  EmitEvent e = make_event(now, "unload." + std::string(to_string(outcome)), std::nullopt,
                           run.service, fmt::format("unload {} {}", run.service, v.message));
  e.event.verdict = v;
  actions.emplace_back(std::move(e));
  actions.emplace_back(UnloadFinished{run.request_id, false, std::move(v)});
}

void ServicePolicy::check_idle_ttl(const std::set<std::string>& in_use, const Now& now,
                                   std::vector<Action>& actions) {
  for (const auto& cfg : config_.services) {
    if (!cfg.unload_after_idle) continue;
    ServiceStatus& st = services_.at(cfg.name);
    auto idle = idle_since(st);
    if (st.state != ServiceState::up || !idle) continue;
    if (now.mono - *idle < *cfg.unload_after_idle) continue;
    if (st.bytes < kWorthUnloading || st.asleep || !can_free(st)) continue;
    if (st.backoff_until && now.mono < *st.backoff_until) continue;
    if (in_use.count(cfg.name)) continue;  // a granted lease works through it
    // One TTL unload per idle period: activity starts a new one.
    if (st.last_unload_at && *st.last_unload_at >= *idle) continue;
    start_unload(cfg.name, UnloadReason::idle, 0, now, actions);
  }
}

void ServicePolicy::on_woken(const WokenIntent& w, const Now& now, std::vector<Action>& actions) {
  auto it = services_.find(w.service);
  if (it == services_.end()) return;
  ServiceStatus& st = it->second;
  st.asleep.reset();
  if (w.prewarm) st.prewarmed = now.mono;
  if (!w.measured) return;
  Duration& learned = st.wake_times[{w.model, w.depth}];
  // The mean of the last and this one: one slow wake (a cold page cache) moves it half way.
  learned = learned.count() > 0 ? (learned + w.took) / 2 : w.took;
  actions.emplace_back(RememberWakeTime{{w.service, w.model, w.depth, learned}});
}

void ServicePolicy::on_asked(ServiceStatus& st, const Now& now, std::vector<Action>& actions) {
  if (st.prewarmed) {
    actions.emplace_back(make_event(
        now, "service.prewarm_used", std::nullopt, st.name,
        fmt::format("{} was asked {} after its prewarm: the request found it awake", st.name,
                    format_age(now.mono - *st.prewarmed))));
    st.prewarmed.reset();
  }
  // A new busy spell: it had been idle a while (a chat's next message is the same spell).
  bool new_spell = !st.last_activity || now.mono - *st.last_activity >= kSpellGap ||
                   !demand_.count(st.name);
  if (!new_spell) return;
  Demand& d = demand_[st.name];
  d.set_service(st.name);
  d.record(now);
  actions.emplace_back(RememberDemand{d.history()});
}

void ServicePolicy::restore_demand(const std::vector<DemandHistory>& demand) {
  for (const auto& h : demand)
    if (services_.count(h.service)) demand_[h.service] = Demand(h);
}

const Demand* ServicePolicy::demand(const std::string& name) const {
  auto it = demand_.find(name);
  return it == demand_.end() ? nullptr : &it->second;
}

void ServicePolicy::restore_wake_times(const std::vector<WakeTime>& times) {
  for (const auto& t : times) {
    auto it = services_.find(t.service);
    if (it == services_.end() || t.took.count() <= 0) continue;
    it->second.wake_times[{t.model, t.depth}] = t.took;
  }
}

bool ServicePolicy::deepen(const DeepenIntent& d, const Now& now, std::vector<Action>& actions,
                           Intents& intents) {
  // The sleeper keeping the most host RAM that vramd can stop. One at a time: its stop takes a
  // few samples to show in MemAvailable, and the shortage may be gone then.
  if (last_deepen_ && now.mono - *last_deepen_ < kDeepenSettle) return false;
  ServiceStatus* pick = nullptr;
  for (auto& [name, st] : services_) {
    if (!st.asleep || st.asleep->host_ram == 0 ||
        (st.asleep->depth != SleepDepth::sleep1 && st.asleep->depth != SleepDepth::suspend))
      continue;
    if (st.control == Control::none) {
      if (cannot_deepen_told_.insert(name).second)
        actions.emplace_back(make_event(
            now, "service.deepen_impossible", std::nullopt, name,
            fmt::format("{} keeps {} of host RAM asleep and vramd cannot stop it (no start, "
                        "match.container or match.unit): {}",
                        name, format_size(st.asleep->host_ram), d.why)));
      continue;
    }
    if (!pick || st.asleep->host_ram > pick->asleep->host_ram) pick = &st;
  }
  if (!pick) return false;
  const ServiceConfig* cfg = config_.find_service(pick->name);
  last_deepen_ = now.mono;
  actions.emplace_back(make_event(
      now, "service.deepened", std::nullopt, pick->name,
      fmt::format("stopping {} ({} asleep, {} of host RAM): {}", pick->name,
                  describe_depth(pick->asleep->depth, pick->kind),
                  format_size(pick->asleep->host_ram), d.why)));
  if (cfg) ask_lifecycle(*pick, *cfg, Command::stop, actions, intents);
  pick->asleep->depth = SleepDepth::stop;
  pick->asleep->host_ram = 0;
  pick->asleep->gpu_kept = 0;
  return true;
}

}  // namespace vramd
