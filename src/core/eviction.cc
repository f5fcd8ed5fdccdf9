#include "core/eviction.h"

#include <algorithm>
#include <numeric>

#include <fmt/format.h>

namespace vramd {

bool evictable(const ServiceStatus& st, const ServiceConfig& cfg, MonoTime now, bool can_free) {
  if (!can_free || cfg.pinned || st.state != ServiceState::up) return false;
  auto idle = idle_since(st);
  // A prewarmed service nobody asked for yet gives its room back at once (docs/proxy.md).
  if (!idle || (now - *idle < cfg.min_idle && !st.prewarmed)) return false;
  if (st.backoff_until && now < *st.backoff_until) return false;
  if (st.asleep) return false;  // asleep already: what it holds is its context (core/sleep.h)
  // Unloaded since its last activity and holding no more than that unload left (a server's
  // CUDA context stays): another unload would free nothing. Without this a "freed" verdict at
  // ~300 MiB made it the cheapest eviction again every unload_timeout (found by tests/soak).
  if (st.last_unload && st.last_unload_at &&
      (!st.last_activity || *st.last_activity <= *st.last_unload_at) &&
      st.bytes <= st.last_unload->after_bytes + kStableWithin)
    return false;
  return true;
}

std::string blocker_state(const ServiceStatus& st, const ServiceConfig* cfg, bool evicting,
                          MonoTime now, bool can_free) {
  auto idle = idle_since(st);
  if (evicting)
    return idle ? fmt::format("idle {}: unloading", format_age(now - *idle)) : "unloading";
  if (st.state == ServiceState::unloading) return "unloading";
  if (cfg && cfg->discovered && cfg->pinned) return "discovered, left alone";
  if (cfg && cfg->pinned) return "pinned";
  if (!can_free)
    return "vramd cannot free it (no unload call; vramd neither starts it nor knows its container "
           "or unit)";
  if (st.requests_in_flight > 0)
    return fmt::format("busy ({} request{} in flight)", st.requests_in_flight,
                       st.requests_in_flight == 1 ? "" : "s");
  if (st.busy.value_or(false)) return "busy";
  if (st.backoff_until && now < *st.backoff_until)
    return fmt::format("unload {}; next try in {}",
                       st.last_unload ? to_string(st.last_unload->outcome) : "failed",
                       format_age(*st.backoff_until - now));
  if (st.state != ServiceState::up)
    return st.state == ServiceState::unreachable ? "unreachable: cannot tell if idle"
                                                 : "not probed yet";
  if (!idle) return "activity unknown";
  if (cfg && now - *idle < cfg->min_idle)
    return fmt::format("idle {} (< min_idle {})", format_age(now - *idle),
                       format_duration(cfg->min_idle));
  return fmt::format("idle {}", format_age(now - *idle));
}

namespace {

// Better plan: lower cost; then older activity of the most recently used member (LRU first);
// then fewer bytes taken.
struct Plan {
  int64_t cost = 0;
  MonoTime newest{};
  Bytes bytes = 0;
  bool better_than(const Plan& o) const {
    if (cost != o.cost) return cost < o.cost;
    if (newest != o.newest) return newest < o.newest;
    return bytes < o.bytes;
  }
};

}  // namespace

std::optional<std::vector<size_t>> choose_eviction(const std::vector<EvictionCandidate>& c,
                                                   Bytes shortfall) {
  Bytes total = 0;
  for (const auto& x : c) total += x.bytes;
  if (total < shortfall) return std::nullopt;
  if (shortfall == 0) return std::vector<size_t>{};
  std::vector<size_t> chosen;
  if (c.size() <= 12) {
    std::optional<Plan> best;
    uint32_t best_mask = 0;
    for (uint32_t mask = 1; mask < (1u << c.size()); ++mask) {
      Plan p;
      for (size_t i = 0; i < c.size(); ++i) {
        if (!(mask & (1u << i))) continue;
        p.bytes += c[i].bytes;
        p.cost += c[i].reload_cost.count();
        p.newest = std::max(p.newest, c[i].last_activity);
      }
      if (p.bytes < shortfall) continue;
      if (!best || p.better_than(*best)) best = p, best_mask = mask;
    }
    for (size_t i = 0; i < c.size(); ++i)
      if (best_mask & (1u << i)) chosen.push_back(i);
  } else {
    // Greedy: cheapest reload per byte first, least recently used on ties; then drop members
    // the rest can do without, most expensive first.
    std::vector<size_t> order(c.size());
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      double ca = double(c[a].reload_cost.count() + 1) / double(std::max<Bytes>(c[a].bytes, 1));
      double cb = double(c[b].reload_cost.count() + 1) / double(std::max<Bytes>(c[b].bytes, 1));
      if (ca != cb) return ca < cb;
      return c[a].last_activity < c[b].last_activity;
    });
    Bytes got = 0;
    for (size_t i : order) {
      if (got >= shortfall) break;
      chosen.push_back(i);
      got += c[i].bytes;
    }
    std::sort(chosen.begin(), chosen.end(),
              [&](size_t a, size_t b) { return c[a].reload_cost > c[b].reload_cost; });
    for (size_t k = 0; k < chosen.size();) {
      if (got - c[chosen[k]].bytes >= shortfall) {
        got -= c[chosen[k]].bytes;
        chosen.erase(chosen.begin() + static_cast<long>(k));
      } else {
        ++k;
      }
    }
  }
  // Unload the least recently used first.
  std::sort(chosen.begin(), chosen.end(),
            [&](size_t a, size_t b) { return c[a].last_activity < c[b].last_activity; });
  return chosen;
}

}  // namespace vramd
