// Helpers shared by the NVML reader's files (nvml_reader.cc, nvml_mig.cc); not an API.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "core/model.h"
#include "gpu/nvml_api.h"
#include "gpu/nvml_reader.h"

namespace vramd {

// What dlsym found in the library (nullptr: absent).
struct NvmlReader::Symbols {
  nvmlInit_fn init_v2 = nullptr;
  nvmlInit_fn init_v1 = nullptr;
  nvmlShutdown_fn shutdown = nullptr;
  nvmlErrorString_fn error_string = nullptr;
  nvmlSystemGetDriverVersion_fn driver_version = nullptr;
  nvmlDeviceGetCount_fn count_v2 = nullptr;
  nvmlDeviceGetCount_fn count_v1 = nullptr;
  nvmlDeviceGetHandleByIndex_fn handle_v2 = nullptr;
  nvmlDeviceGetHandleByIndex_fn handle_v1 = nullptr;
  nvmlDeviceGetName_fn name = nullptr;
  nvmlDeviceGetUUID_fn uuid = nullptr;
  nvmlDeviceGetMemoryInfo_v2_fn memory_v2 = nullptr;
  nvmlDeviceGetMemoryInfo_fn memory_v1 = nullptr;
  nvmlDeviceGetUtilizationRates_fn utilization = nullptr;
  nvmlDeviceGetTemperature_fn temperature = nullptr;
  nvmlDeviceGetPowerUsage_fn power = nullptr;
  nvmlDeviceGetProcesses_v2_fn compute_v3 = nullptr;
  nvmlDeviceGetProcesses_v2_fn compute_v2 = nullptr;
  nvmlDeviceGetProcesses_v1_fn compute_v1 = nullptr;
  nvmlDeviceGetProcesses_v2_fn graphics_v3 = nullptr;
  nvmlDeviceGetProcesses_v2_fn graphics_v2 = nullptr;
  nvmlDeviceGetProcesses_v1_fn graphics_v1 = nullptr;
  nvmlDeviceGetProcesses_v2_fn mps_v3 = nullptr;
  nvmlDeviceGetProcesses_v2_fn mps_v2 = nullptr;
  nvmlDeviceGetProcesses_v1_fn mps_v1 = nullptr;
  nvmlDeviceGetMigMode_fn mig_mode = nullptr;
  nvmlDeviceGetMaxMigDeviceCount_fn max_mig_count = nullptr;
  nvmlDeviceGetMigDeviceHandleByIndex_fn mig_handle = nullptr;
  nvmlDeviceGetInstanceId_fn gpu_instance_id = nullptr;
  nvmlDeviceGetInstanceId_fn compute_instance_id = nullptr;
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
