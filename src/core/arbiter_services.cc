// The Arbiter's service policies: idle tracking, TTL unloads, verified unloads with escalation
// and backoff. Part of class Arbiter (arbiter.h); no I/O.
#include <algorithm>
#include <utility>

#include <fmt/format.h>

#include "core/arbiter.h"

namespace vramd {

namespace {

// GPU utilisation above this while only one service holds a GPU counts as that service working.
constexpr double kActiveUtilizationPct = 5.0;
// A service holding less than this has nothing worth unloading by TTL.
constexpr Bytes kWorthUnloading = 256 * MiB;

// Kinds whose own memory figure covers what their processes hold on the GPU. ComfyUI's
// torch_vram_total (0.1 GB under cudaMallocAsync while models hold 15 GB) and A1111's torch
// figures count PyTorch's cache only: evidence to show, never a share of the card.
bool self_report_covers_process(const std::string& kind) {
  return kind == "ollama" || kind == "localai";
}

Duration default_unload_timeout(const ServiceConfig& svc) {
  if (svc.unload_timeout) return *svc.unload_timeout;
  return svc.kind == "comfyui" ? std::chrono::seconds(30) : std::chrono::seconds(20);
}

}  // namespace

std::optional<TimePoint> idle_since(const ServiceStatus& st) {
  bool up = st.state == "up" || st.state == "unloading";
  if (!up || st.busy.value_or(false)) return std::nullopt;
  return st.last_activity;
}

std::vector<ServiceStatus> Arbiter::services(TimePoint) const {
  std::vector<ServiceStatus> out;
  for (const auto& svc : config_.services) {
    out.push_back(services_.at(svc.name));
    out.back().idle_since = idle_since(out.back());
  }
  return out;
}

const ServiceStatus* Arbiter::service(const std::string& name) const {
  auto it = services_.find(name);
  if (it == services_.end()) return nullptr;
  it->second.idle_since = idle_since(it->second);
  return &it->second;
}

std::map<Owner, Bytes> Arbiter::self_reports() const {
  std::map<Owner, Bytes> out;
  for (const auto& [name, st] : services_)
    if (st.self_reported_vram && self_report_covers_process(st.kind))
      out[{OwnerKind::service, name}] = *st.self_reported_vram;
  return out;
}

std::vector<Action> Arbiter::on_probe(const ProbeDone& e, TimePoint now) {
  std::vector<Action> actions;
  auto it = services_.find(e.service);
  if (it == services_.end()) return actions;
  ServiceStatus& st = it->second;
  const ServiceProbe& p = e.probe;
  bool was_reachable = st.state != "unreachable" && st.state != "unknown";
  st.last_probe = now;
  std::string previous_error = std::exchange(st.probe_error, p.error);
  if (!p.reachable) {
    if (st.state != "unreachable" && st.state != "unloading")
      actions.push_back(EmitEvent{{now, "service.unreachable", std::nullopt, st.name,
                                   fmt::format("{} is unreachable: {}", st.name, p.error)}});
    if (st.state != "unloading") st.state = "unreachable";
    st.busy.reset();
    return actions;
  }
  if (!was_reachable && st.state == "unreachable")
    actions.push_back(EmitEvent{{now, "service.reachable", std::nullopt, st.name,
                                 fmt::format("{} answers again", st.name)}});
  // It answers, but not in its API's shape (HTTP 500, garbage): once per change of the error.
  if (!p.error.empty() && p.error != previous_error)
    actions.push_back(EmitEvent{{now, "service.error", std::nullopt, st.name,
                                 fmt::format("{} answers but its API is broken: {}", st.name, p.error)}});
  if (st.state != "unloading") st.state = "up";
  bool models_changed = st.last_activity.has_value() && p.models != st.models;
  if (!st.last_activity) st.last_activity = now;  // first sight: count from now
  bool was_busy = st.busy.value_or(false);
  st.busy = p.busy;
  st.queue_depth = p.queue_depth;
  st.models = p.models;
  st.self_reported_vram = p.self_reported_vram;
  // Activity: working now, the end of work seen, or a change in what is loaded.
  if (p.busy.value_or(false) || was_busy || models_changed) st.last_activity = now;
  return actions;
}

void Arbiter::update_service_holdings(TimePoint now, std::vector<Action>& actions) {
  (void)actions;
  for (auto& [name, st] : services_) {
    st.bytes = 0;
    st.per_gpu.clear();
  }
  for (const auto& g : status_.gpus) {
    const ServiceStatus* alone = nullptr;
    int holders = 0;
    for (const auto& h : g.holdings) {
      if (h.owner.kind == OwnerKind::baseline) continue;
      ++holders;
      if (h.owner.kind != OwnerKind::service) continue;
      auto it = services_.find(h.owner.name);
      if (it == services_.end()) continue;
      it->second.bytes += h.bytes;
      it->second.per_gpu.emplace_back(g.sample.index, h.bytes);
      if (h.bytes >= 64 * MiB) it->second.last_gpu = g.sample.index;
      alone = &it->second;
    }
    // The GPU works while only this service holds it: the service is working, whatever its API
    // says (servers without a busy call).
    if (holders == 1 && alone && g.sample.utilization_pct.value_or(0) > kActiveUtilizationPct) {
      services_[alone->name].last_activity = now;
    }
  }
}

void Arbiter::start_unload(const std::string& service, const std::string& reason,
                           uint64_t request_id, TimePoint now, std::vector<Action>& actions) {
  ServiceStatus& st = services_[service];
  UnloadRun run;
  run.id = next_unload_id_++;
  run.request_id = request_id;
  run.service = service;
  run.reason = reason;
  run.requested_at = now;
  for (const auto& [gpu, bytes] : st.per_gpu) run.before[gpu] = bytes;
  run.rss_before = st.rss;
  st.state = "unloading";
  actions.push_back(EmitEvent{{now, "unload.started", std::nullopt, service,
                               fmt::format("unloading {} ({}): holds {}", service, reason,
                                           format_size(st.bytes))}});
  actions.push_back(CallUnload{service, run.id});
  unloads_.emplace(run.id, std::move(run));
}

std::vector<Action> Arbiter::on_unload_requested(const UnloadRequested& e, TimePoint now) {
  std::vector<Action> actions;
  auto refuse = [&](std::string message) {
    UnloadFinished f;
    f.request_id = e.request_id;
    f.refused = true;
    f.verdict.service = e.service;
    f.verdict.reason = e.reason;
    f.verdict.outcome = UnloadOutcome::failed;
    f.verdict.message = std::move(message);
    f.verdict.at = now;
    actions.push_back(std::move(f));
    return actions;
  };
  auto it = services_.find(e.service);
  if (it == services_.end()) return refuse(fmt::format("no service named '{}'", e.service));
  ServiceStatus& st = it->second;
  for (const auto& [id, run] : unloads_)
    if (run.service == e.service)
      return refuse(fmt::format("{} is already being unloaded", e.service));
  if (!e.force && st.busy.value_or(false))
    return refuse(fmt::format("{} is busy{}: not unloading (use force to override)", e.service,
                              st.queue_depth ? fmt::format(" (queue {})", *st.queue_depth) : ""));
  if (!e.force && st.backoff_until && now < *st.backoff_until)
    return refuse(fmt::format(
        "the last unload of {} was {}; next try in {} (unload_backoff; use force to override)",
        e.service, st.last_unload ? to_string(st.last_unload->outcome) : "unsuccessful",
        format_age(*st.backoff_until - now)));
  start_unload(e.service, e.reason, e.request_id, now, actions);
  return actions;
}

std::vector<Action> Arbiter::on_unload_call_done(const UnloadCallDone& e, TimePoint now) {
  std::vector<Action> actions;
  auto it = unloads_.find(e.unload_id);
  if (it == unloads_.end()) return actions;
  UnloadRun& run = it->second;
  run.call_duration = e.took;
  if (e.call.result == UnloadCall::Result::failed) {
    finish_unload(run, UnloadOutcome::failed, "the unload call failed: " + e.call.message, "",
                  now, actions);
    unloads_.erase(it);
    return actions;
  }
  if (e.call.result == UnloadCall::Result::not_supported) {
    // No unload API: only ending the process frees its memory.
    finish_unload(run, UnloadOutcome::failed, e.call.message, "stop", now, actions);
    unloads_.erase(it);
    return actions;
  }
  Bytes before = 0;
  for (const auto& [gpu, b] : run.before) before += b;
  const ServiceConfig* cfg = config_.find_service(run.service);
  run.verification.emplace(before, now, cfg ? default_unload_timeout(*cfg) : std::chrono::seconds(20));
  advance_unloads(now, actions);
  return actions;
}

void Arbiter::advance_unloads(TimePoint now, std::vector<Action>& actions) {
  std::vector<uint64_t> finished;
  for (auto& [id, run] : unloads_) {
    if (!run.verification) continue;
    auto& v = *run.verification;
    // Only samples taken after the call returned count; status_ is the newest sample.
    if (status_.sampled) v.add_sample(status_.sampled_at, services_[run.service].bytes);
    if (!v.done(now)) continue;
    UnloadOutcome outcome = classify_unload(v.before(), v.current());
    std::string message;
    if (v.before() < kIneffectiveBelow)
      message = fmt::format("{} held nothing on the GPU", run.service);
    else if (!v.settled() && outcome == UnloadOutcome::ineffective)
      message = fmt::format("nothing came back within {} of the call", format_duration(now - v.start()));
    finish_unload(run, outcome, message, "", now, actions);
    finished.push_back(id);
  }
  for (auto id : finished) unloads_.erase(id);
}

void Arbiter::finish_unload(UnloadRun& run, UnloadOutcome outcome, const std::string& message,
                            const std::string& escalate, TimePoint now,
                            std::vector<Action>& actions) {
  ServiceStatus& st = services_[run.service];
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
  v.duration = now - run.requested_at;
  if (run.verification) {
    if (auto at = run.verification->settled_at(); at && run.verification->settled())
      v.duration = *at - run.requested_at;
  }
  v.at = now;
  std::string what = fmt::format("{}: {} → {} in {:.1f} s", to_string(outcome),
                                 format_size(v.before_bytes), format_size(v.after_bytes),
                                 v.duration.count() / 1000.0);
  v.message = message.empty() ? what : what + "; " + message;

  // Escalation: an unload that frees nothing, or a server without one, needs the process ended;
  // a call that failed (refused, timed out, garbage) is reported and tried again after backoff.
  if (outcome != UnloadOutcome::freed) {
    std::string want = escalate;
    if (want.empty() && outcome != UnloadOutcome::failed && cfg) want = cfg->on_ineffective_unload;
    if (want == "restart" || want == "stop") {
      if (st.can_restart == "managed") {
        v.escalation = want;
        command(run.service, want, 0, now, actions);
      } else if (!st.can_restart.empty() && cfg) {
        v.escalation = want;
        actions.push_back(Lifecycle{run.service, want, st.can_restart,
                                    st.can_restart == "container" ? cfg->match.container
                                                                  : cfg->match.unit});
      } else {
        v.escalation = "report";
        v.message += fmt::format(
            "; vramd would {} {} but cannot: vramd neither starts it (start) nor knows its "
            "container or unit (match.container, match.unit)",
            want, run.service);
      }
    } else {
      v.escalation = "report";
    }
    st.backoff_until = now + (cfg ? cfg->unload_backoff : Duration(std::chrono::minutes(10)));
  } else {
    st.backoff_until.reset();
  }
  st.state = "up";
  st.last_unload = v;
  actions.push_back(EmitEvent{{now, "unload." + std::string(to_string(outcome)), std::nullopt,
                               run.service, fmt::format("unload {} {}", run.service, v.message), v}});
  actions.push_back(UnloadFinished{run.request_id, false, std::move(v)});
}

std::vector<Action> Arbiter::on_lifecycle_done(const LifecycleDone& e, TimePoint now) {
  std::vector<Action> actions;
  actions.push_back(EmitEvent{{now, e.ok ? "service." + e.action : "service." + e.action + "_failed",
                               std::nullopt, e.service,
                               fmt::format("{} {}: {}", e.action, e.service, e.message)}});
  return actions;
}

std::vector<Action> Arbiter::on_tick(const Tick&, TimePoint now) {
  std::vector<Action> actions;
  advance_unloads(now, actions);
  return actions;
}

void Arbiter::check_idle_ttl(TimePoint now, std::vector<Action>& actions) {
  for (const auto& cfg : config_.services) {
    if (!cfg.unload_after_idle) continue;
    ServiceStatus& st = services_[cfg.name];
    st.idle_since = idle_since(st);
    if (st.state != "up" || !st.idle_since) continue;
    if (now - *st.idle_since < *cfg.unload_after_idle) continue;
    if (st.bytes < kWorthUnloading) continue;
    if (st.backoff_until && now < *st.backoff_until) continue;
    if (used_by_lease(cfg.name)) continue;  // a granted lease works through it
    // One TTL unload per idle period: activity starts a new one.
    if (st.last_unload && st.last_unload->at >= *st.idle_since) continue;
    start_unload(cfg.name, "idle", 0, now, actions);
  }
}

}  // namespace vramd
