// Helpers shared by the NVML reader's files (nvml_reader.cc, nvml_mig.cc); not an API.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/model.h"
#include "gpu/nvml_api.h"
#include "gpu/nvml_reader.h"

namespace vramd {

// One entry point of the library: what dlsym found (null: absent), called through operator(),
// which counts the call (GpuReading::nvml_calls, the metric vramd_nvml_calls_total).
template <typename Fn>
struct NvmlEntry;
template <typename R, typename... A>
struct NvmlEntry<R (*)(A...)> {
  R (*fn)(A...) = nullptr;
  uint64_t* calls = nullptr;  // this entry's count in Symbols::calls
  R operator()(A... a) const {
    ++*calls;
    return fn(a...);
  }
  explicit operator bool() const { return fn != nullptr; }
  bool operator==(std::nullptr_t) const { return fn == nullptr; }
};

// What dlsym found in the library, and how often each entry point was called.
struct NvmlReader::Symbols {
  // Calls by symbol name, of each entry point found (std::map: each count's address is stable).
  std::map<std::string, uint64_t> calls;
  NvmlEntry<nvmlInit_fn> init_v2;
  NvmlEntry<nvmlInit_fn> init_v1;
  NvmlEntry<nvmlShutdown_fn> shutdown;
  NvmlEntry<nvmlErrorString_fn> error_string;
  NvmlEntry<nvmlSystemGetDriverVersion_fn> driver_version;
  NvmlEntry<nvmlDeviceGetCount_fn> count_v2;
  NvmlEntry<nvmlDeviceGetCount_fn> count_v1;
  NvmlEntry<nvmlDeviceGetHandleByIndex_fn> handle_v2;
  NvmlEntry<nvmlDeviceGetHandleByIndex_fn> handle_v1;
  NvmlEntry<nvmlDeviceGetName_fn> name;
  NvmlEntry<nvmlDeviceGetUUID_fn> uuid;
  NvmlEntry<nvmlDeviceGetMemoryInfo_v2_fn> memory_v2;
  NvmlEntry<nvmlDeviceGetMemoryInfo_fn> memory_v1;
  NvmlEntry<nvmlDeviceGetUtilizationRates_fn> utilization;
  NvmlEntry<nvmlDeviceGetTemperature_fn> temperature;
  NvmlEntry<nvmlDeviceGetPowerUsage_fn> power;
  NvmlEntry<nvmlDeviceGetProcesses_v2_fn> compute_v3;
  NvmlEntry<nvmlDeviceGetProcesses_v2_fn> compute_v2;
  NvmlEntry<nvmlDeviceGetProcesses_v1_fn> compute_v1;
  NvmlEntry<nvmlDeviceGetProcesses_v2_fn> graphics_v3;
  NvmlEntry<nvmlDeviceGetProcesses_v2_fn> graphics_v2;
  NvmlEntry<nvmlDeviceGetProcesses_v1_fn> graphics_v1;
  NvmlEntry<nvmlDeviceGetProcesses_v2_fn> mps_v3;
  NvmlEntry<nvmlDeviceGetProcesses_v2_fn> mps_v2;
  NvmlEntry<nvmlDeviceGetProcesses_v1_fn> mps_v1;
  NvmlEntry<nvmlDeviceGetMigMode_fn> mig_mode;
  NvmlEntry<nvmlDeviceGetMaxMigDeviceCount_fn> max_mig_count;
  NvmlEntry<nvmlDeviceGetMigDeviceHandleByIndex_fn> mig_handle;
  NvmlEntry<nvmlDeviceGetInstanceId_fn> gpu_instance_id;
  NvmlEntry<nvmlDeviceGetInstanceId_fn> compute_instance_id;
  // nvitop's test for the early R535 libraries (535.43-535.86), whose _v3 process lists write
  // 32-byte entries: nvmlDeviceGetConfComputeMemSizeInfo exported, ...RunningProcessDetailList not.
  bool r535_exports = false;
};

}  // namespace vramd

namespace vramd::nvml_detail {

// Answers that mean "this entry point is not there or not for this version: try an older one".
bool is_absent(nvmlReturn_t r);
bool is_lost(nvmlReturn_t r);
// The text of a fixed buffer the library filled, up to its NUL or its size.
std::string c_string(const char* buffer, std::size_t size);
// 535.43 to 535.86 ("535.54.03"): the drivers whose _v3 lists write 32-byte entries.
bool is_early_r535(const std::string& driver_version);
// "1g.18gb" from "NVIDIA H200 MIG 1g.18gb"; empty when the name does not carry a profile.
std::string mig_profile_of(const std::string& name);
// A pid in both lists counts once, with the larger known value.
void merge_processes(std::vector<ProcessMemory>& into, const std::vector<ProcessMemory>& more);

}  // namespace vramd::nvml_detail
