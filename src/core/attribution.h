// Attribution: one GPU sample → holdings that add up to the card's used bytes (DESIGN.md).
#pragma once

#include <map>
#include <optional>
#include <unordered_map>
#include <vector>

#include "core/model.h"
#include "core/owners.h"

namespace vramd {

struct AttributionInput {
  const GpuSample* gpu = nullptr;
  const std::unordered_map<int, ResolvedOwner>* owners = nullptr;  // pid → owner
  const std::unordered_map<int, const ProcessInfo*>* processes = nullptr;  // pid → info, for names
  // Driver and display memory not held by any process. nullopt: not known (not configured, not
  // learned): then with every process measured, whatever is left is taken as baseline.
  std::optional<Bytes> baseline;
  // Residual up to this much is noise and goes to the baseline.
  Bytes tolerance = 256 * MiB;
  // Services' own reports of their memory on this GPU: evidence, used only to split a residual.
  std::map<Owner, Bytes> self_reports;
};

// Holdings for one GPU, largest first, then baseline and unknown. `since` is left unset: the
// Arbiter knows how long each owner has held memory. Invariant: Σ bytes == gpu->used.
std::vector<Holding> attribute(const AttributionInput& in);

}  // namespace vramd
