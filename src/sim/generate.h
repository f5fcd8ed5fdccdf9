// Seeded trace generators for bench/traces/ (docs/sim.md "Traces"): the same name and seed give
// the same trace on every machine (own RNG and distributions, not <random>'s, which differ).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/result.h"

namespace vramd::sim {

// "homelab" (24 GiB: ComfyUI bursts, Ollama chat, WhisperX jobs), "agent" (32 GiB: image and
// video work back to back, LoRA switches, 20% ineffective unloads), "lab" (2 × 48 GiB, six
// services, jobs at three priorities), "stress" (24 h, ~50,000 events: the speed benchmark).
Result<std::string> generate_trace(const std::string& name, uint64_t seed);
const std::vector<std::string>& trace_generators();

}  // namespace vramd::sim
