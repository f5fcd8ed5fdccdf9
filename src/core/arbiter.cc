#include "core/arbiter.h"
#include "core/gpu_select.h"  // [issue 16: MIG]

#include <unordered_map>

#include <fmt/format.h>

#include "core/attribution.h"

namespace vramd {

Arbiter::Arbiter(Config config) : config_(std::move(config)), resolver_(config_.services) {
  for (const auto& svc : config_.services) {
    ServiceStatus st;
    st.name = svc.name;
    st.kind = svc.kind;
    st.url = svc.url;
    st.unload_after_idle = svc.unload_after_idle;
    st.reload_cost = default_reload_cost(svc.kind);
    if (!svc.start.empty()) st.managed = ManagedState{};
    if (!svc.start.empty()) st.can_restart = "managed";
    else if (!svc.match.container.empty()) st.can_restart = "container";
    else if (!svc.match.unit.empty()) st.can_restart = "unit";
    services_[svc.name] = std::move(st);
  }
}

HostScanRequest Arbiter::scan_request() const {
  HostScanRequest r;
  r.ports = resolver_.ports_wanted();
  r.pid_files = resolver_.pid_files_wanted();
  return r;
}

namespace {
template <class... Ts>
struct overloaded : Ts... {
  using Ts::operator()...;
};
template <class... Ts>
overloaded(Ts...) -> overloaded<Ts...>;
}  // namespace

std::vector<Action> Arbiter::handle(const Event& event, TimePoint now) {
  std::vector<Action> actions = std::visit(
      overloaded{[&](const SampleTaken& e) { return on_sample(e, now); },
                 [&](const ProbeDone& e) { return on_probe(e, now); },
                 [&](const UnloadRequested& e) { return on_unload_requested(e, now); },
                 [&](const UnloadCallDone& e) { return on_unload_call_done(e, now); },
                 [&](const LifecycleDone& e) { return on_lifecycle_done(e, now); },
                 [&](const Tick& e) { return on_tick(e, now); },
                 [&](const LeaseRequested& e) { return on_lease_requested(e, now); },
                 [&](const LeaseReleased& e) { return on_lease_released(e, now); },
                 [&](const LeaseHeartbeat& e) { return on_lease_heartbeat(e, now); },
                 [&](const HolderExited& e) { return on_holder_exited(e, now); },
                 [&](const ServiceCommand& e) { return on_service_command(e, now); },
                 [&](const ChildStarted& e) { return on_child_started(e, now); },
                 [&](const ChildExited& e) { return on_child_exited(e, now); },
                 [&](const HealthChecked& e) { return on_health_checked(e, now); }},
      event);
  if (std::holds_alternative<Tick>(event)) {
    check_lease_deadlines(now, actions);
    supervise_tick(now, actions);
  }
  // Admission after anything that may change what fits (a heartbeat changes nothing).
  if (!std::holds_alternative<LeaseHeartbeat>(event) && (!queue_.empty() || !evicting_for_.empty()))
    admit(now, actions);
  // Fast sampling while any unload is being verified.
  bool want_fast = !unloads_.empty();
  if (want_fast != fast_sampling_on_) {
    fast_sampling_on_ = want_fast;
    actions.push_back(SetFastSampling{want_fast});
  }
  return actions;
}

HistoryView Arbiter::history(unsigned gpu, TimePoint now, Duration window,
                             size_t max_points) const {
  auto it = history_.find(gpu);
  if (it == history_.end()) return {};
  return it->second.view(now, window, max_points);
}

std::vector<Action> Arbiter::on_sample(const SampleTaken& s, TimePoint now) {
  std::vector<Action> actions;
  auto emit = [&](std::string type, std::optional<unsigned> gpu, std::string subject,
                  std::string message) {
    actions.push_back(EmitEvent{EventRecord{now, std::move(type), gpu, std::move(subject),
                                            std::move(message)}});
  };

  if (!s.gpus.error.empty() && status_.error != s.gpus.error)
    emit("gpu.error", std::nullopt, "", s.gpus.error);
  if (s.gpus.error.empty() && !status_.error.empty())
    emit("gpu.recovered", std::nullopt, "", "GPU backend reads again");

  OwnerHints hints;
  for (const auto& [name, st] : services_)
    if (st.managed && st.managed->pid) hints.managed.emplace_back(name, *st.managed->pid);
  for (uint64_t id : granted_)  // a queued holder's memory is its own until granted
    if (const Lease& l = leases_.at(id); l.request.pid) hints.lease_pids.emplace_back(l.owner_name(), *l.request.pid);
  mem_available_ = s.host.mem_available;
  auto owners = resolver_.resolve(s.host, hints);
  auto reports = self_reports();
  std::unordered_map<int, const ProcessInfo*> by_pid;
  by_pid.reserve(s.host.processes.size());
  for (const auto& p : s.host.processes) by_pid[p.pid] = &p;

  StatusSnapshot next;
  next.sampled = true;
  next.sampled_at = now;
  next.backend = s.gpus.backend;
  next.driver_version = s.gpus.driver_version;
  next.error = s.gpus.error;

  for (const GpuSample& g : s.gpus.gpus) {
    GpuStatus gs;
    gs.sample = g;
    gs.per_process_available = g.processes_readable;
    for (const auto& p : g.processes)
      if (!p.used) gs.per_process_available = false;

    auto prev_health = health_.find(g.index);
    if (prev_health != health_.end() && prev_health->second != g.health) {
      if (g.health == GpuHealth::ok)
        emit("gpu.recovered", g.index, "", fmt::format("GPU {} reads again", g.index));
      else
        emit(g.health == GpuHealth::lost ? "gpu.lost" : "gpu.error", g.index, "",
             fmt::format("GPU {}: {}", g.index, g.error));
    } else if (prev_health == health_.end() && g.health != GpuHealth::ok) {
      emit(g.health == GpuHealth::lost ? "gpu.lost" : "gpu.error", g.index, "",
           fmt::format("GPU {}: {}", g.index, g.error));
    }
    health_[g.index] = g.health;

    if (g.health != GpuHealth::ok) {
      // Nothing to attribute; keep the owners' `since` so a brief loss does not reset them.
      next.gpus.push_back(std::move(gs));
      continue;
    }
    // [issue 16: MIG] a MIG-enabled card's memory is attributed on its instances, not twice.
    if (!attributes_memory(g)) {
      next.gpus.push_back(std::move(gs));
      continue;
    }
    // [/issue 16]

    // Learn the baseline: the card's use when no process holds memory.
    if (g.processes_readable && g.processes.empty()) learned_baseline_[g.index] = g.used;

    AttributionInput in;
    in.gpu = &g;
    in.owners = &owners;
    in.processes = &by_pid;
    in.tolerance = config_.gpu.residual_tolerance;
    in.self_reports = reports;
    if (config_.gpu.baseline) {
      in.baseline = config_.gpu.baseline;
      gs.baseline_source = "configured";
    } else if (auto it = learned_baseline_.find(g.index); it != learned_baseline_.end()) {
      in.baseline = it->second;
      gs.baseline_source = "learned";
    } else if (g.reserved && !gs.per_process_available) {
      gs.baseline_source = "reserved";
    } else if (gs.per_process_available) {
      gs.baseline_source = "residual";
    }
    gs.holdings = attribute(in);
    for (const auto& h : gs.holdings)
      if (h.owner.kind == OwnerKind::baseline) gs.baseline = h.bytes;

    // Since when: an owner keeps its time while it holds memory in consecutive samples.
    auto& since = since_[g.index];
    std::map<Owner, TimePoint> next_since;
    for (auto& h : gs.holdings) {
      auto it = since.find(h.owner);
      h.since = it != since.end() ? it->second : now;
      next_since[h.owner] = h.since;
      bool noteworthy = h.owner.kind != OwnerKind::baseline && h.bytes >= config_.gpu.residual_tolerance;
      if (it == since.end() && noteworthy && status_.sampled)
        emit("owner.appeared", g.index, h.owner.name,
             fmt::format("{} {} holds {} on GPU {} ({})", to_string(h.owner.kind), h.owner.name,
                         format_size(h.bytes), g.index, to_string(h.source)));
    }
    for (const auto& [owner, t] : since) {
      if (next_since.count(owner) || owner.kind == OwnerKind::baseline) continue;
      // Name owners that held a noteworthy amount last time.
      for (const auto& prev : status_.gpus) {
        if (prev.sample.index != g.index) continue;
        for (const auto& h : prev.holdings)
          if (h.owner == owner && h.bytes >= config_.gpu.residual_tolerance)
            emit("owner.gone", g.index, owner.name,
                 fmt::format("{} {} released {} on GPU {} after {}", to_string(owner.kind),
                             owner.name, format_size(h.bytes), g.index, format_age(now - t)));
      }
    }
    since = std::move(next_since);

    history_[g.index].add(now, g.total, gs.holdings);
    next.gpus.push_back(std::move(gs));
  }
  status_ = std::move(next);

  // Host RAM of each service's processes.
  std::map<std::string, Bytes> rss;
  for (const auto& p : s.host.processes) {
    auto it = owners.find(p.pid);
    if (it != owners.end() && it->second.owner.kind == OwnerKind::service)
      rss[it->second.owner.name] += p.rss;
  }
  for (auto& [name, svc] : services_) {
    auto it = rss.find(name);
    svc.rss = it != rss.end() ? std::optional<Bytes>(it->second) : std::nullopt;
  }
  last_owners_ = std::move(owners);
  update_service_holdings(now, actions);
  learn_reload_costs(now);
  verify_stops(now, actions);
  update_lease_holdings(now, actions);
  advance_unloads(now, actions);
  check_idle_ttl(now, actions);
  return actions;
}

}  // namespace vramd
