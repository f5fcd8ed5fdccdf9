// Eviction on demand (DESIGN.md): which idle services may be unloaded to make room, and which set
// of them frees the shortfall at the least reload cost. The one place for the eviction policy;
// admission (core/admission.cc) plans with it and names what is in the way with it.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/service_status.h"
#include "core/units.h"

namespace vramd {

// A service holding less than this has nothing worth unloading (by eviction or by idle TTL).
constexpr Bytes kWorthUnloading = 256 * MiB;

// A service that could be unloaded to make room.
struct EvictionCandidate {
  std::string service;
  Bytes bytes = 0;          // what it holds on the GPU in question
  Duration reload_cost{0};  // how long bringing it back takes (learned, or per-kind default)
  MonoTime last_activity{};
  uint64_t lease = 0;  // not a service: a preemptible lease to suspend (issue 28), `service` its owner
};

// May this service be unloaded to make room now? vramd has a way to free it (`can_free`:
// ServicePolicy::can_free, an unload call, a stop or a suspend), up (its API answers), idle for
// at least min_idle, not pinned, not in its unload backoff. Whether it is in use by a lease or
// already being unloaded is the caller's to know.
bool evictable(const ServiceStatus& st, const ServiceConfig& cfg, MonoTime now, bool can_free);

// How a service in the way of a waiting lease reads: "idle 12 min: unloading", "busy", "pinned",
// "idle 10 s (< min_idle 30 s)", "unload ineffective; next try in 8 min", "vramd cannot free it
// (...)", ... `can_free` as for evictable.
std::string blocker_state(const ServiceStatus& st, const ServiceConfig* cfg, bool evicting,
                          MonoTime now, bool can_free);

// The set of candidates that frees at least `shortfall` at the least total reload cost,
// least recently used first on ties. Indices into `candidates`, in the order to unload;
// nullopt when all of them together free too little. Exact up to 12 candidates (4,096 sets),
// greedy above.
std::optional<std::vector<size_t>> choose_eviction(const std::vector<EvictionCandidate>& candidates,
                                                   Bytes shortfall);

}  // namespace vramd
