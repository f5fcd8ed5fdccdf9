// NvmlReader: reads GPUs through libnvidia-ml loaded with dlopen at run time, falling back across
// symbol versions by what dlsym finds and what each call answers.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/model.h"
#include "core/result.h"
#include "gpu/gpu_reader.h"
#include "gpu/nvml_api.h"

namespace vramd {

// Which NVML entry points the last read() actually used: "v1", "v2", "v3", or "" when not called
// (or when every version failed). Tests assert on it; `vramd doctor` can print it.
struct NvmlApiVersions {
  std::string init;      // "v2" (nvmlInit_v2) | "v1" (nvmlInit)
  std::string memory;    // "v2" (nvmlDeviceGetMemoryInfo_v2) | "v1"
  std::string compute;   // nvmlDeviceGetComputeRunningProcesses_v3 | _v2 | v1
  std::string graphics;  // nvmlDeviceGetGraphicsRunningProcesses_v3 | _v2 | v1
  std::string mps;       // nvmlDeviceGetMPSComputeRunningProcesses_v3 | _v2 | v1
  // Bytes per entry the _v3 lists are read with: 24, or 32 on early R535 (535.43-535.86), told
  // by the library's exports as nvitop does, or by the driver version.
  std::size_t v3_entry_bytes = 24;
  // "init=v2 mem=v2 compute=v3 graphics=v3 mps=v3 v3_entry=24"
  std::string to_string() const;
};

// "Driver Not Loaded" etc.: the library's nvmlErrorString when it has one, else our own text.
const char* nvml_return_name(nvmlReturn_t code);

class NvmlReader : public GpuReader {
 public:
  // The libraries open() tries, in order: $VRAMD_NVML_LIBRARY alone when set, else
  // libnvidia-ml.so.1 then libnvidia-ml.so.
  static std::vector<std::string> library_candidates();

  // Loads the first candidate that dlopen accepts. Error (naming every path tried and dlerror)
  // when none loads or it lacks nvmlInit, the device count, handle or memory-info symbols.
  // Does not initialise NVML: a driver that is not loaded shows up in read() and is retried.
  static Result<std::unique_ptr<NvmlReader>> open();
  static Result<std::unique_ptr<NvmlReader>> open(const std::vector<std::string>& candidates);

  ~NvmlReader() override;
  NvmlReader(const NvmlReader&) = delete;
  NvmlReader& operator=(const NvmlReader&) = delete;

  std::string backend() const override { return "nvml"; }

  const std::string& library_path() const { return library_path_; }
  const NvmlApiVersions& api_versions() const { return versions_; }

 protected:
  GpuReading read_gpus(ProcessListSchedule* lists) override;

 private:
  struct Symbols;
  NvmlReader(void* handle, std::string path, std::unique_ptr<Symbols> symbols);

  // One read of every GPU; `lost` is set when one fell off the bus.
  GpuReading read_all(ProcessListSchedule* lists, bool& lost);
  // nvmlInit_v2, falling back to nvmlInit when absent or answering FUNCTION_NOT_FOUND.
  nvmlReturn_t init();
  void shutdown();
  // Every entry point called so far, by name (GpuReading::nvml_calls).
  void add_calls(GpuReading& reading) const;
  std::string error_string(nvmlReturn_t code) const;
  // Appends GPU `index` to `out`, then its MIG instances when MIG is on. Its process lists are
  // read when `lists` is null or says they are due (always with MIG on: the parent's list says
  // which instance each process is in).
  void read_device(unsigned index, std::vector<GpuSample>& out, bool& lost,
                   ProcessListSchedule* lists);
  // One device per GPU instance of a MIG parent (compute instances of one GI merged); what cannot
  // be read goes to parent_sample.note or to that instance's error.
  void read_mig_instances(unsigned parent_index, nvmlDevice_t parent, GpuSample& parent_sample,
                          const std::vector<ProcessMemory>* parent_processes,
                          std::vector<GpuSample>& out, bool& lost);
  nvmlReturn_t read_memory(nvmlDevice_t device, GpuSample& sample);
  enum class ProcessList { compute, graphics, mps };
  // Reads one family with version fallback; `version` gets what answered.
  nvmlReturn_t read_processes(ProcessList list, nvmlDevice_t device,
                              std::vector<ProcessMemory>& out, std::string& version);
  // Compute, graphics and MPS lists merged; `failed` names the call when the GPU is lost.
  nvmlReturn_t read_all_processes(nvmlDevice_t device, std::vector<ProcessMemory>& out,
                                  bool& readable, const char*& failed);

  void* handle_ = nullptr;
  std::string library_path_;
  std::unique_ptr<Symbols> sym_;
  bool initialized_ = false;
  NvmlApiVersions versions_;

  // What does not change while the driver stays loaded: its version, the device count, each
  // device's handle, UUID, name and MIG mode (MIG mode changes only with a GPU reset). Read at
  // initialisation, again every kIdentityReads reads, and on the read after any failure, so that
  // a sample costs only the calls whose answers move: memory, utilization, temperature, power
  // (and the process lists when due). Each NVML call is an ioctl into the driver.
  struct DeviceIdentity {
    bool known = false;
    nvmlDevice_t handle = nullptr;
    std::string uuid, name;
    bool mig = false;
  };
  static constexpr int kIdentityReads = 60;
  std::vector<DeviceIdentity> devices_;
  std::string driver_version_;
  int identity_age_ = 0;  // reads since the driver version and the count were read
  bool identity_known_ = false;
};

}  // namespace vramd
