// The subset of the NVML C API that vramd uses, declared here because no NVML header package
// exists in Debian main. Layouts are those of x86-64 (see shared/reference/gpu-and-host.md).
// Shared by the NVML reader (which resolves these with dlsym) and the fake libnvidia-ml.
#pragma once

#include <cstddef>

extern "C" {
// Declared as NVML's own nvml.h declares them (C typedefs, `(void)`), so that they read against
// NVIDIA's documentation line by line: modernize-use-using does not apply here.
// NOLINTBEGIN(modernize-use-using, modernize-redundant-void-arg)

typedef enum nvmlReturn_enum {
  NVML_SUCCESS = 0,
  NVML_ERROR_UNINITIALIZED = 1,
  NVML_ERROR_INVALID_ARGUMENT = 2,
  NVML_ERROR_NOT_SUPPORTED = 3,
  NVML_ERROR_NO_PERMISSION = 4,
  NVML_ERROR_NOT_FOUND = 6,
  NVML_ERROR_INSUFFICIENT_SIZE = 7,
  NVML_ERROR_DRIVER_NOT_LOADED = 9,
  NVML_ERROR_LIBRARY_NOT_FOUND = 12,
  NVML_ERROR_FUNCTION_NOT_FOUND = 13,
  NVML_ERROR_GPU_IS_LOST = 15,
  NVML_ERROR_RESET_REQUIRED = 16,
  NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18,
  NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
  NVML_ERROR_UNKNOWN = 999,
} nvmlReturn_t;

typedef struct nvmlDevice_st* nvmlDevice_t;

typedef struct nvmlMemory_st {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
} nvmlMemory_t;

typedef struct nvmlMemory_v2_st {
  unsigned int version;
  unsigned long long total;
  unsigned long long reserved;
  unsigned long long free;
  unsigned long long used;
} nvmlMemory_v2_t;

typedef struct nvmlUtilization_st {
  unsigned int gpu;
  unsigned int memory;
} nvmlUtilization_t;

typedef struct nvmlProcessInfo_v1_st {
  unsigned int pid;
  unsigned long long usedGpuMemory;
} nvmlProcessInfo_v1_t;

// Used by both the _v2 and the _v3 process-list calls.
typedef struct nvmlProcessInfo_v2_st {
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
} nvmlProcessInfo_v2_t;

// What early R535 drivers (535.43-535.86) write from the _v3 process lists: 32-byte entries.
typedef struct nvmlProcessInfo_r535_st {
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
  unsigned long long usedGpuCcProtectedMemory;
} nvmlProcessInfo_r535_t;

typedef nvmlReturn_t (*nvmlInit_fn)(void);
typedef nvmlReturn_t (*nvmlShutdown_fn)(void);
typedef const char* (*nvmlErrorString_fn)(nvmlReturn_t);
typedef nvmlReturn_t (*nvmlSystemGetDriverVersion_fn)(char*, unsigned int);
typedef nvmlReturn_t (*nvmlDeviceGetCount_fn)(unsigned int*);
typedef nvmlReturn_t (*nvmlDeviceGetHandleByIndex_fn)(unsigned int, nvmlDevice_t*);
typedef nvmlReturn_t (*nvmlDeviceGetName_fn)(nvmlDevice_t, char*, unsigned int);
typedef nvmlReturn_t (*nvmlDeviceGetUUID_fn)(nvmlDevice_t, char*, unsigned int);
typedef nvmlReturn_t (*nvmlDeviceGetMemoryInfo_fn)(nvmlDevice_t, nvmlMemory_t*);
typedef nvmlReturn_t (*nvmlDeviceGetMemoryInfo_v2_fn)(nvmlDevice_t, nvmlMemory_v2_t*);
typedef nvmlReturn_t (*nvmlDeviceGetUtilizationRates_fn)(nvmlDevice_t, nvmlUtilization_t*);
typedef nvmlReturn_t (*nvmlDeviceGetTemperature_fn)(nvmlDevice_t, int, unsigned int*);
typedef nvmlReturn_t (*nvmlDeviceGetPowerUsage_fn)(nvmlDevice_t, unsigned int*);
typedef nvmlReturn_t (*nvmlDeviceGetProcesses_v1_fn)(nvmlDevice_t, unsigned int*,
                                                     nvmlProcessInfo_v1_t*);
typedef nvmlReturn_t (*nvmlDeviceGetProcesses_v2_fn)(nvmlDevice_t, unsigned int*,
                                                     nvmlProcessInfo_v2_t*);
// MIG (nvml.h 11.0+).
typedef nvmlReturn_t (*nvmlDeviceGetMigMode_fn)(nvmlDevice_t, unsigned int*, unsigned int*);
typedef nvmlReturn_t (*nvmlDeviceGetMaxMigDeviceCount_fn)(nvmlDevice_t, unsigned int*);
typedef nvmlReturn_t (*nvmlDeviceGetMigDeviceHandleByIndex_fn)(nvmlDevice_t, unsigned int,
                                                               nvmlDevice_t*);
typedef nvmlReturn_t (*nvmlDeviceGetInstanceId_fn)(nvmlDevice_t, unsigned int*);

// NOLINTEND(modernize-use-using, modernize-redundant-void-arg)
}  // extern "C"

namespace vramd::nvml {

constexpr unsigned long long kValueNotAvailable = 0xFFFFFFFFFFFFFFFFULL;
constexpr unsigned int kMemoryV2Version = sizeof(nvmlMemory_v2_t) | (2u << 24);  // 0x02000028
constexpr int kTemperatureGpu = 0;
constexpr unsigned int kDriverVersionBufferSize = 80;
constexpr unsigned int kDeviceNameBufferSize = 96;
constexpr unsigned int kDeviceUuidBufferSize = 96;
constexpr unsigned int kDeviceMigEnable = 1;       // NVML_DEVICE_MIG_ENABLE
constexpr unsigned int kNoInstance = 0xFFFFFFFFu;  // gpuInstanceId/computeInstanceId, MIG off

static_assert(sizeof(nvmlMemory_t) == 24);
static_assert(sizeof(nvmlMemory_v2_t) == 40);
static_assert(sizeof(nvmlUtilization_t) == 8);
static_assert(sizeof(nvmlProcessInfo_v1_t) == 16);
static_assert(sizeof(nvmlProcessInfo_v2_t) == 24);
static_assert(sizeof(nvmlProcessInfo_r535_t) == 32);
static_assert(kMemoryV2Version == 0x02000028);
static_assert(sizeof(nvmlReturn_t) == 4);

}  // namespace vramd::nvml
