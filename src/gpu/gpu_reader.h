// GpuReader: the narrow interface through which the shell reads GPUs. Backends: NVML (dlopen),
// nvidia-smi (CSV). Tests hand in the fake libnvidia-ml or a fake nvidia-smi.
#pragma once

#include <memory>
#include <string>

#include "core/model.h"
#include "core/process_scan.h"
#include "core/result.h"

namespace vramd {

class GpuReader {
 public:
  virtual ~GpuReader() = default;
  virtual std::string backend() const = 0;  // "nvml" | "nvidia-smi"
  // Reads every GPU, its process lists included. Never throws; failures are in
  // GpuReading::error or per GPU health. A reader whose driver failed retries initialisation on
  // the next read.
  GpuReading read() { return read_gpus(nullptr); }
  // The same, but each GPU's process lists only when `lists` says they are due
  // (core/process_scan.h); otherwise the lists it keeps stand in, and the sample says so
  // (GpuSample::processes_listed). A backend that cannot read memory without the lists reads
  // them every time.
  GpuReading read(ProcessListSchedule& lists) { return read_gpus(&lists); }

 protected:
  virtual GpuReading read_gpus(ProcessListSchedule* lists) = 0;
};

// backend: "auto" (NVML, then nvidia-smi), "nvml" or "nvidia-smi". NVML is loaded from
// $VRAMD_NVML_LIBRARY when set, else libnvidia-ml.so.1, then libnvidia-ml.so; nvidia-smi is
// $VRAMD_NVIDIA_SMI when set, else found on PATH. Fails only when no backend can be loaded at all.
Result<std::unique_ptr<GpuReader>> open_gpu_reader(const std::string& backend);

}  // namespace vramd
