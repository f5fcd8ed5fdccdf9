// GpuReader: the narrow interface through which the shell reads GPUs. Backends: NVML (dlopen),
// nvidia-smi (CSV). Tests hand in the fake libnvidia-ml or a fake nvidia-smi.
#pragma once

#include <memory>
#include <string>

#include "core/model.h"
#include "core/result.h"

namespace vramd {

class GpuReader {
 public:
  virtual ~GpuReader() = default;
  virtual std::string backend() const = 0;  // "nvml" | "nvidia-smi"
  // Reads every GPU. Never throws; failures are in GpuReading::error or per GPU health.
  // A reader whose driver failed retries initialisation on the next read.
  virtual GpuReading read() = 0;
};

// backend: "auto" (NVML, then nvidia-smi), "nvml" or "nvidia-smi". NVML is loaded from
// $VRAMD_NVML_LIBRARY when set, else libnvidia-ml.so.1, then libnvidia-ml.so; nvidia-smi is
// $VRAMD_NVIDIA_SMI when set, else found on PATH. Fails only when no backend can be loaded at all.
Result<std::unique_ptr<GpuReader>> open_gpu_reader(const std::string& backend);

}  // namespace vramd
