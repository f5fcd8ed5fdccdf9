#include "core/ledger.h"

#include <algorithm>

#include <fmt/format.h>

#include "core/attribution.h"
#include "core/gpu_select.h"

namespace vramd {

Ledger::Ledger(const Config& config) : config_(config), resolver_(config.services) {}

HostScanRequest Ledger::scan_request() const {
  HostScanRequest r;
  r.ports = resolver_.ports_wanted();
  r.pid_files = resolver_.pid_files_wanted();
  return r;
}

HistoryView Ledger::history(unsigned gpu, MonoTime now, Duration window, size_t max_points) const {
  auto it = history_.find(gpu);
  if (it == history_.end()) return {};
  return it->second.view(now, window, max_points);
}

std::vector<std::pair<std::string, Bytes>> Ledger::holders(Bytes at_least) const {
  std::vector<std::pair<std::string, Bytes>> out;
  for (const auto& g : status_.gpus)
    for (const auto& h : g.holdings)
      if (h.owner.kind != OwnerKind::baseline && h.bytes >= at_least)
        out.emplace_back(h.owner.name, h.bytes);
  std::sort(out.begin(), out.end(),
            [](const auto& a, const auto& b) { return a.second > b.second; });
  return out;
}

void Ledger::on_sample(const SampleTaken& s, const OwnerHints& hints,
                       const std::map<Owner, Bytes>& self_reports, const Now& now,
                       std::vector<Action>& actions) {
  auto emit = [&](std::string type, std::optional<unsigned> gpu, std::string subject,
                  std::string message) {
    actions.emplace_back(
        make_event(now, std::move(type), gpu, std::move(subject), std::move(message)));
  };

  if (!s.gpus.error.empty() && status_.error != s.gpus.error)
    emit("gpu.error", std::nullopt, "", s.gpus.error);
  if (s.gpus.error.empty() && !status_.error.empty())
    emit("gpu.recovered", std::nullopt, "", "GPU backend reads again");

  mem_available_ = s.host.mem_available;
  mem_total_ = s.host.mem_total;
  auto owners = resolver_.resolve(s.host, hints);
  keep_owners_of_exiting(s, owners);
  std::unordered_map<int, const ProcessInfo*> by_pid;
  by_pid.reserve(s.host.processes.size());
  for (const auto& p : s.host.processes) by_pid[p.pid] = &p;

  StatusSnapshot next;
  next.sampled = true;
  next.sampled_at = now.mono;
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
        emit("gpu.recovered", g.index, "", fmt::format("GPU {} reads again", gpu_label(g)));
      else
        emit(g.health == GpuHealth::lost ? "gpu.lost" : "gpu.error", g.index, "",
             fmt::format("GPU {}: {}", gpu_label(g), g.error));
    } else if (prev_health == health_.end() && g.health != GpuHealth::ok) {
      emit(g.health == GpuHealth::lost ? "gpu.lost" : "gpu.error", g.index, "",
           fmt::format("GPU {}: {}", gpu_label(g), g.error));
    }
    health_[g.index] = g.health;

    if (g.health != GpuHealth::ok) {
      // Nothing to attribute; keep the owners' `since` so a brief loss does not reset them.
      next.gpus.push_back(std::move(gs));
      continue;
    }
    // A card with MIG on: its memory is its instances', attributed on each of them.
    if (!attributes_memory(g)) {
      next.gpus.push_back(std::move(gs));
      continue;
    }

    // Learn the baseline: the card's use when no process holds memory.
    if (g.processes_readable && g.processes.empty()) learned_baseline_[g.index] = g.used;

    AttributionInput in;
    in.gpu = &g;
    in.owners = &owners;
    in.processes = &by_pid;
    in.tolerance = config_.gpu.residual_tolerance;
    in.self_reports = self_reports;
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
    std::map<Owner, MonoTime> next_since;
    for (auto& h : gs.holdings) {
      auto it = since.find(h.owner);
      h.since = it != since.end() ? it->second : now.mono;
      next_since[h.owner] = h.since;
      bool noteworthy =
          h.owner.kind != OwnerKind::baseline && h.bytes >= config_.gpu.residual_tolerance;
      if (it == since.end() && noteworthy && status_.sampled)
        emit("owner.appeared", g.index, h.owner.name,
             fmt::format("{} {} holds {} on GPU {} ({})", to_string(h.owner.kind), h.owner.name,
                         format_size(h.bytes), gpu_label(g), to_string(h.source)));
    }
    for (const auto& [owner, t] : since) {
      if (next_since.count(owner) || owner.kind == OwnerKind::baseline) continue;
      // Name owners that held a noteworthy amount last time.
      for (const auto& prev : status_.gpus) {
        if (prev.sample.index != g.index) continue;
        for (const auto& h : prev.holdings) {
          if (h.owner != owner || h.bytes < config_.gpu.residual_tolerance) continue;
          // Its processes held on under another name (a service discovered or configured took
          // them over): the bytes were named anew, not released.
          const Holding* heir = nullptr;
          for (const auto& now_h : gs.holdings)
            for (int pid : h.pids)
              if (!heir && std::find(now_h.pids.begin(), now_h.pids.end(), pid) != now_h.pids.end())
                heir = &now_h;
          if (heir) {
            emit("owner.renamed", g.index, owner.name,
                 fmt::format("{} {} is now {} {} on GPU {} ({} held, nothing released)",
                             to_string(owner.kind), owner.name, to_string(heir->owner.kind),
                             heir->owner.name, gpu_label(g), format_size(heir->bytes)));
            continue;
          }
          emit(
              "owner.gone", g.index, owner.name,
              fmt::format("{} {} released {} on GPU {} after {}", to_string(owner.kind), owner.name,
                          format_size(h.bytes), gpu_label(g), format_age(now.mono - t)));
        }
      }
    }
    since = std::move(next_since);

    history_[g.index].add(now.mono, g.total, gs.holdings);
    next.gpus.push_back(std::move(gs));
  }
  status_ = std::move(next);

  // Host RAM of each service's processes.
  service_rss_.clear();
  service_pids_.clear();
  for (const auto& p : s.host.processes) {
    auto it = owners.find(p.pid);
    if (it != owners.end() && it->second.owner.kind == OwnerKind::service) {
      service_rss_[it->second.owner.name] += p.rss;
      service_pids_[it->second.owner.name].push_back(p.pid);
    }
  }
  for (auto& [name, pids] : service_pids_) std::sort(pids.begin(), pids.end());
}

void Ledger::keep_owners_of_exiting(const SampleTaken& s,
                                    std::unordered_map<int, ResolvedOwner>& owners) {
  std::unordered_map<int, ResolvedOwner> listed;
  for (const auto& g : s.gpus.gpus)
    for (const auto& pm : g.processes) {
      auto it = owners.find(pm.pid);
      if (it == owners.end()) {
        // Never known (another PID namespace) stays unknown: only a kept owner is carried.
        auto was = gpu_owners_.find(pm.pid);
        if (was == gpu_owners_.end()) continue;
        it = owners.emplace(pm.pid, was->second).first;
      }
      listed.emplace(pm.pid, it->second);
    }
  gpu_owners_ = std::move(listed);
}

}  // namespace vramd
