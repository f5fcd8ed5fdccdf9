#include "core/cluster.h"

#include <algorithm>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace vramd {

namespace {

// "comfyui (16.0 GiB, idle 5 min)" for each of `names`, from the GPU's evictable list.
std::string unload_text(const ClaimGpu& g, const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) {
    out += out.empty() ? "" : ", ";
    out += n;
    for (const auto& c : g.evictable)
      if (c.service == n) out += fmt::format(" ({}, idle)", format_size(c.bytes));
  }
  return out;
}

}  // namespace

ClaimDecision choose_claims(const ClaimContext& ctx, const std::vector<Lease>& candidates,
                            const std::map<uint64_t, ClaimPeers>& peers) {
  ClaimDecision out;
  std::map<unsigned, Bytes> free;
  std::map<unsigned, const ClaimGpu*> gpus;
  for (const auto& g : ctx.gpus) {
    free[g.index] = g.free;
    gpus[g.index] = &g;
  }
  std::optional<Bytes> ram = ctx.ram;
  std::map<unsigned, uint64_t> head;  // GPU -> the candidate that holds the line there
  std::set<std::string> promised;     // services this round unloads for an earlier candidate
  auto gpu_text = [&](unsigned idx) {
    const ClaimGpu& g = *gpus.at(idx);
    std::string t = fmt::format("GPU {}: {} free of {}", idx, format_size(free.at(idx)),
                                format_size(g.total));
    if (!g.holders.empty()) t += "; " + g.holders;
    return t;
  };
  static const ClaimPeers kNoPeers;
  for (const Lease& l : candidates) {
    const LeaseRequest& r = l.request;
    std::string needs = fmt::format("{}: needs {}", ctx.host, format_size(r.vram));
    if (!ctx.sampled) {
      out.reasons[l.id] = needs + "; not yet sampled";
      continue;
    }
    if (!ctx.cut_off.empty()) {
      out.reasons[l.id] = needs + "; " + ctx.cut_off;
      continue;
    }
    if (r.gpu && !gpus.count(*r.gpu) ) {
      out.reasons[l.id] = fmt::format("{} on GPU {}; no such GPU here", needs, *r.gpu);
      continue;
    }
    std::vector<unsigned> choices;
    for (const auto& [idx, g] : gpus)
      if ((!r.gpu || *r.gpu == idx) && !head.count(idx)) choices.push_back(idx);
    if (choices.empty()) {
      unsigned g = r.gpu.value_or(head.empty() ? 0 : head.begin()->first);
      out.reasons[l.id] = head.count(g) ? fmt::format("{}; queued behind lease #{}", needs, head.at(g))
                                        : needs + "; no GPU admits leases";
      continue;
    }
    bool ram_short = r.ram && ram && *ram < *r.ram;
    std::optional<unsigned> fit;
    if (!ram_short)
      for (unsigned idx : choices)
        if (free[idx] >= r.vram && (!fit || free[idx] < free[*fit])) fit = idx;
    if (fit) {
      out.grant.emplace_back(l.id, *fit);
      free[*fit] -= r.vram;
      if (r.ram && ram) *ram -= std::min(*ram, *r.ram);
      continue;
    }
    const ClaimPeers& p = peers.count(l.id) ? peers.at(l.id) : kNoPeers;
    auto evicting = ctx.evicting.find(l.id);
    bool mine = evicting != ctx.evicting.end();

    // Where it means to go: where this host is making room for it; else the GPU where unloading
    // idle services makes room at the least reload cost (core/eviction.h); else the most free.
    struct Plan {
      unsigned gpu = 0;
      std::optional<std::vector<std::string>> evict;  // the cheapest set that makes room
      int64_t cost = 0;
    };
    std::optional<Plan> best;
    bool keep_gpu =
        mine && std::find(choices.begin(), choices.end(), evicting->second.gpu) != choices.end();
    for (unsigned idx : choices) {
      if (keep_gpu && idx != evicting->second.gpu) continue;
      Plan plan;
      plan.gpu = idx;
      std::vector<EvictionCandidate> cands;
      for (const auto& c : gpus.at(idx)->evictable)
        if (!promised.count(c.service)) cands.push_back(c);
      if (!ram_short && !mine)
        if (auto pick = choose_eviction(cands, r.vram - free[idx])) {
          plan.evict.emplace();
          for (size_t i : *pick) {
            plan.evict->push_back(cands[i].service);
            plan.cost += cands[i].reload_cost.count();
          }
        }
      bool better = !best || (plan.evict && !best->evict) ||
                    (plan.evict && best->evict && plan.cost < best->cost) ||
                    (!plan.evict && !best->evict && free[idx] > free[best->gpu]);
      if (better) best = std::move(plan);
    }
    unsigned target = best->gpu;
    head[target] = l.id;
    std::string text = fmt::format("{}; {}", needs, gpu_text(target));
    if (ram_short)
      text += fmt::format("; needs {} host RAM, {} available", format_size(*r.ram),
                          format_size(*ram));
    if (mine) {
      text += fmt::format("; unloading {} for it", fmt::join(evicting->second.services, ", "));
    } else if (p.making_room == ctx.host) {
      // Its unloads have their verdicts and it still does not fit: the others' turn.
      out.unmark.push_back(l.id);
      text += "; unloading for it freed too little: back to the queue for every host";
    } else if (best->evict) {
      const ClaimGpu& g = *gpus.at(target);
      const std::vector<std::string>& names = *best->evict;
      out.evict_costs[l.id] = best->cost;
      bool cheapest = true;
      std::string cheaper;
      for (const auto& [host, cost] : p.evict_costs)
        if (host != ctx.host && (cost < best->cost || (cost == best->cost && host < ctx.host))) {
          cheapest = false;
          cheaper = host;
          break;
        }
      bool passed_over =
          r.host == ctx.host || p.unconsidered == 0 || ctx.at - l.requested_at >= ctx.patience;
      std::string could = "; could take it after unloading " + unload_text(g, names);
      if (!p.making_room.empty()) {
        text += could + fmt::format("; {} is making room for it", p.making_room);
      } else if (!passed_over) {
        text += could + "; first, the other hosts' word that none has room for it as it is";
      } else if (!cheapest) {
        text += could + fmt::format("; {} can make room for it more cheaply", cheaper);
      } else {
        text += fmt::format("; unloading {} for it", fmt::join(names, ", "));
        promised.insert(names.begin(), names.end());
        out.evict.push_back({l.id, target, names});
      }
    } else if (!p.making_room.empty()) {
      text += fmt::format("; {} is making room for it", p.making_room);
    }
    out.reasons[l.id] = std::move(text);
  }
  // A lease this host was making room for and no longer is, that it did not grant nor give back
  // above (it waits behind another here now, or this host has no GPU for it): given back too, or
  // the other hosts would leave it to this one for ever.
  std::set<uint64_t> settled(out.unmark.begin(), out.unmark.end());
  for (const auto& [id, gpu] : out.grant) settled.insert(id);
  for (const Lease& l : candidates)
    if (auto p = peers.find(l.id); p != peers.end() && p->second.making_room == ctx.host &&
                                   !ctx.evicting.count(l.id) && !settled.count(l.id))
      out.unmark.push_back(l.id);
  return out;
}

Lease after_host_lost(Lease l, const std::string& lost_host, const Now& now) {
  if (l.request.on_host_lost == OnHostLost::end || !l.request.cluster) {
    l.state = LeaseState::released;
    l.ended_at = now.mono;
    l.end_reason = fmt::format("host {} lost (no heartbeat)", lost_host);
    return l;
  }
  l.state = LeaseState::queued;
  l.gpu.reset();
  l.granted_at.reset();
  l.request.pid.reset();  // the holder ran on the lost host
  l.request.pid_start_ticks = 0;
  l.held = 0;
  l.reason = LeaseReason{};
  l.reason.needs = l.request.vram;
  l.reason.text = fmt::format("needs {}; re-queued: host {} was lost",
                              format_size(l.request.vram), lost_host);
  l.last_heartbeat = now.mono;
  return l;
}

}  // namespace vramd
