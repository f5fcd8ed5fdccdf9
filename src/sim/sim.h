// The replay loop: one policy over one trace on a virtual clock (docs/sim.md). No threads, no
// sockets, no real clock: the next moment is always the earliest of the next arrival, the next
// completion in the world and the policy's next wake-up.
#pragma once

#include <map>
#include <vector>

#include "sim/metrics.h"
#include "sim/policy.h"
#include "sim/trace.h"
#include "sim/world.h"

namespace vramd::sim {

struct RunResult {
  Metrics metrics;
  std::vector<Decision> decisions;  // loads, unloads, restarts, grants, in order
  std::map<unsigned, std::vector<World::TimelinePoint>> timeline;
};

RunResult run_policy(const Trace& trace, Policy& policy);

}  // namespace vramd::sim
