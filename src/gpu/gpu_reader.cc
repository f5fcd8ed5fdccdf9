#include "gpu/gpu_reader.h"

#include "gpu/nvidia_smi.h"
#include "gpu/nvml_reader.h"

namespace vramd {

Result<std::unique_ptr<GpuReader>> open_gpu_reader(const std::string& backend) {
  if (backend != "auto" && backend != "nvml" && backend != "nvidia-smi") {
    return make_error("unknown GPU backend \"" + backend +
                      "\" (expected auto, nvml or nvidia-smi)");
  }
  std::string nvml_error, smi_error;
  if (backend == "auto" || backend == "nvml") {
    auto nvml = NvmlReader::open();
    if (nvml.ok()) return std::unique_ptr<GpuReader>(std::move(nvml.value()));
    nvml_error = nvml.error();
    if (backend == "nvml") return make_error(nvml_error);
  }
  auto smi = NvidiaSmiReader::open();
  if (smi.ok()) return std::unique_ptr<GpuReader>(std::move(smi.value()));
  smi_error = smi.error();
  if (backend == "nvidia-smi") return make_error(smi_error);
  return make_error("no GPU backend: neither NVML nor nvidia-smi was found. " + nvml_error + ". " +
                    smi_error + ".");
}

}  // namespace vramd
