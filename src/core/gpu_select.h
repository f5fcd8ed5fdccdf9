// GPUs and MIG instances as one flat list of devices: the index encoding, labels, which devices
// hold memory and admit leases, and the `--gpu` selector ("1", "0/2", "any").
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "core/model.h"
#include "core/result.h"

namespace vramd {

// The one place the flat index of a MIG GPU instance is defined: (parent + 1) * 65536 + gi.
// Physical indices stay below kMigIndexBase (NVML counts at most a few dozen GPUs).
constexpr unsigned kMigIndexBase = 1u << 16;
constexpr unsigned kMaxGpuIndex = kMigIndexBase - 1;
constexpr unsigned mig_flat_index(unsigned parent, unsigned gpu_instance_id) {
  return (parent + 1) * kMigIndexBase + (gpu_instance_id & 0xFFFFu);
}
constexpr bool is_mig_index(unsigned index) { return index >= kMigIndexBase; }

// "0" for GPU 0, "0/2" for GPU instance 2 of GPU 0: the sample's label, else one made from index.
std::string gpu_label(const GpuSample& g);
std::string gpu_label(unsigned index);

// False for a MIG-enabled parent: its memory is its instances', counted there.
bool attributes_memory(const GpuSample& g);
// A lease may be granted on this device: it reads fine and is not a MIG-enabled parent.
bool admits_leases(const GpuSample& g);

// What CUDA_VISIBLE_DEVICES names this device by: a MIG instance's UUID, else the index.
std::string cuda_visible_devices(const GpuSample& g);

// A `--gpu` / API "gpu" value: "any" (or empty) -> nullopt; "1" -> 1; "0/2" -> mig_flat_index(0,
// 2). Error for anything else ("gpu: expected an index like 1, an instance like 0/2, or any").
Result<std::optional<unsigned>> parse_gpu_selector(std::string_view text);

}  // namespace vramd
