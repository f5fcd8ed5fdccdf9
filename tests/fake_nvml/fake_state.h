// The test GPU's state: the JSON file named by $FAKE_NVML_STATE, re-read on every call by the fake
// libnvidia-ml and the fake nvidia-smi (shape in shared/DESIGN.md, "Contracts: Test GPU").
//
//   {"driver_version": "550.54.14",
//    "gpus": [{"name": "...", "uuid": "GPU-...", "total": N, "used": N,   // used = total - free
//              "utilization": 0, "temperature": 40, "power_mw": 120000,   // optional
//              "reserved": N,                                             // optional (v2 memory)
//              "processes": [{"pid": 1, "used": N, "name": "python3"},   // used null = N/A
//                            {"pid": 2, "used": null}],
//              "graphics_processes": [...],                               // optional
//              "lost": false,                                             // optional
//              "errors": {"nvmlDeviceGetMemoryInfo": "GPU_IS_LOST"},      // optional, this gpu
//              "extra_processes_after_first_call": 0}],                   // optional
//    "omit_symbols": ["nvmlDeviceGetComputeRunningProcesses_v3"],         // optional
//    "errors": {"nvmlInit_v2": "DRIVER_NOT_LOADED"}}                      // optional, every gpu
//
// Writers replace the file atomically (src/testgpu/fake_gpu_state.h), so readers need no lock.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace fake_nvml {

// The parsed state; null when $FAKE_NVML_STATE is unset, missing, unreadable or not JSON.
// Shared and unchanged until the file changes (a sample makes several calls).
std::shared_ptr<const nlohmann::json> load_state();

// The gpu object at `index`, or nullptr when there is none.
const nlohmann::json* gpu_at(const nlohmann::json& state, unsigned index);
std::size_t gpu_count(const nlohmann::json& state);

// A number field, or `fallback` when absent or not a number.
unsigned long long get_u64(const nlohmann::json& obj, const char* key, unsigned long long fallback);
// A number field, or nullopt when absent, null or not a number.
std::optional<double> get_number(const nlohmann::json& obj, const char* key);
std::string get_string(const nlohmann::json& obj, const char* key, const std::string& fallback);

struct FakeProcess {
  unsigned pid = 0;
  std::optional<unsigned long long> used;  // nullopt: "used": null (NVML_VALUE_NOT_AVAILABLE)
  std::string name;                        // "name", or "" when absent
};
// The processes listed under `key` ("processes" or "graphics_processes") of a gpu.
std::vector<FakeProcess> processes(const nlohmann::json& gpu, const char* key);

}  // namespace fake_nvml
