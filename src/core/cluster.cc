#include "core/cluster.h"

#include <set>

#include <fmt/format.h>

namespace vramd {

ClaimDecision choose_claims(const ClaimContext& ctx, const std::vector<Lease>& candidates) {
  ClaimDecision out;
  std::map<unsigned, Bytes> free;
  std::map<unsigned, const ClaimGpu*> gpus;
  for (const auto& g : ctx.gpus) {
    free[g.index] = g.free;
    gpus[g.index] = &g;
  }
  std::optional<Bytes> ram = ctx.ram;
  std::map<unsigned, uint64_t> head;  // GPU -> the candidate that holds the line there
  auto gpu_text = [&](unsigned idx) {
    const ClaimGpu& g = *gpus.at(idx);
    std::string t = fmt::format("GPU {}: {} free of {}", idx, format_size(free.at(idx)),
                                format_size(g.total));
    if (!g.holders.empty()) t += "; " + g.holders;
    return t;
  };
  for (const Lease& l : candidates) {
    const LeaseRequest& r = l.request;
    std::string needs = fmt::format("{}: needs {}", ctx.host, format_size(r.vram));
    if (!ctx.sampled) {
      out.reasons[l.id] = needs + "; not yet sampled";
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
    unsigned target = choices.front();
    for (unsigned idx : choices)
      if (free[idx] > free[target]) target = idx;
    head[target] = l.id;
    std::string text = fmt::format("{}; {}", needs, gpu_text(target));
    if (ram_short)
      text += fmt::format("; needs {} host RAM, {} available", format_size(*r.ram),
                          format_size(*ram));
    out.reasons[l.id] = std::move(text);
  }
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
