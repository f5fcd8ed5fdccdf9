// An SVG timeline of each GPU's memory by owner, one panel per (policy, GPU), for `--plot`.
#pragma once

#include <string>
#include <vector>

#include "sim/sim.h"

namespace vramd::sim {

// `runs` in the order given; each panel stacks services (trace order) and jobs over time.
std::string plot_svg(const Trace& trace, const std::vector<RunResult>& runs);

}  // namespace vramd::sim
