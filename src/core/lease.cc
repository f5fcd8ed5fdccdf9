#include "core/lease.h"

#include <algorithm>
#include <numeric>

#include <fmt/format.h>

namespace vramd {

const char* to_string(LeaseState s) {
  switch (s) {
    case LeaseState::queued: return "queued";
    case LeaseState::granted: return "granted";
    case LeaseState::released: return "released";
    case LeaseState::expired: return "expired";
    case LeaseState::cancelled: return "cancelled";
    case LeaseState::timed_out: return "timed_out";
  }
  return "?";
}

std::optional<LeaseState> parse_lease_state(std::string_view s) {
  for (auto st : {LeaseState::queued, LeaseState::granted, LeaseState::released, LeaseState::expired,
                  LeaseState::cancelled, LeaseState::timed_out})
    if (s == to_string(st)) return st;
  return std::nullopt;
}

std::string Lease::owner_name() const {
  const std::string& base =
      !request.label.empty() ? request.label : !request.holder.empty() ? request.holder : "lease";
  return fmt::format("{}#{}", base, id);
}

Duration default_reload_cost(const std::string& kind) {
  using std::chrono::seconds;
  // A first guess at loading weights from disk again; replaced by what vramd measures.
  if (kind == "vllm" || kind == "sglang" || kind == "triton") return seconds(60);
  if (kind == "comfyui" || kind == "a1111" || kind == "forge") return seconds(20);
  if (kind == "ollama" || kind == "llamacpp" || kind == "localai" || kind == "textgen" ||
      kind == "tabbyapi")
    return seconds(10);
  if (kind == "speaches") return seconds(5);
  return seconds(30);  // process, generic_http: a restart
}

namespace {

// Better plan: lower cost; then older activity of the most recently used member (LRU first);
// then fewer bytes taken.
struct Plan {
  int64_t cost = 0;
  TimePoint newest{};
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
