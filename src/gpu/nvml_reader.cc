#include "gpu/nvml_reader.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>

#include "gpu/nvml_detail.h"

namespace vramd {

using namespace nvml_detail;

namespace {

constexpr int kMaxListAttempts = 5;
constexpr unsigned kListSlack = 8;

template <typename Fn>
void resolve(void* handle, std::map<std::string, uint64_t>& calls, const char* name,
             NvmlEntry<Fn>& out) {
  out.fn = reinterpret_cast<Fn>(::dlsym(handle, name));
  out.calls = &calls[name];
}

// Room per entry in the buffers handed to the library: the largest entry any driver writes, so
// that a misjudged layout can garble entries but never write past the buffer.
constexpr std::size_t kMaxEntryBytes = sizeof(nvmlProcessInfo_r535_t);

// The count/INSUFFICIENT_SIZE protocol for one entry point. `stride` is the size of the entries
// the library writes (16 for v1, 24 for v2/v3, 32 for early-R535 v3); `ids` whether they carry
// gpuInstanceId/computeInstanceId (at offsets 16 and 20).
template <typename Info, typename Fn>
nvmlReturn_t fetch_processes(const Fn& fn, nvmlDevice_t device, std::size_t stride, bool ids,
                             std::vector<ProcessMemory>& out) {
  static_assert(offsetof(nvmlProcessInfo_v2_t, gpuInstanceId) == 16);
  static_assert(offsetof(nvmlProcessInfo_v2_t, computeInstanceId) == 20);
  static_assert(offsetof(nvmlProcessInfo_r535_t, usedGpuCcProtectedMemory) == 24);
  out.clear();
  unsigned count = 0;
  nvmlReturn_t r = fn(device, &count, nullptr);
  if (r == NVML_SUCCESS) return r;  // none running
  if (r != NVML_ERROR_INSUFFICIENT_SIZE) return r;
  std::size_t capacity = 0;
  for (int attempt = 0; attempt < kMaxListAttempts; ++attempt) {
    // Processes come and go between calls: leave room, and always grow.
    capacity = std::max<std::size_t>(capacity * 2, count + count / 4 + kListSlack);
    // 8-byte aligned, kMaxEntryBytes per entry whatever the stride.
    std::vector<unsigned long long> buffer(capacity * kMaxEntryBytes / sizeof(unsigned long long));
    const unsigned char* bytes = reinterpret_cast<const unsigned char*>(buffer.data());
    unsigned n = static_cast<unsigned>(capacity);
    r = fn(device, &n, reinterpret_cast<Info*>(buffer.data()));
    if (r == NVML_SUCCESS) {
      // Whatever count the library returns, read no entry beyond what was allocated.
      // (capacity entries of any stride up to kMaxEntryBytes fit in the buffer.)
      n = std::min<unsigned>(n, static_cast<unsigned>(capacity));
      for (unsigned i = 0; i < n; ++i) {
        const unsigned char* e = bytes + std::size_t{i} * stride;
        unsigned pid = 0;
        unsigned long long used = 0;
        std::memcpy(&pid, e, sizeof pid);
        std::memcpy(&used, e + 8, sizeof used);
        if (pid == 0) continue;  // no process: a slot the library counted but did not fill
        ProcessMemory p;
        p.pid = static_cast<int>(pid);
        if (used != nvml::kValueNotAvailable) p.used = used;
        if (ids) {
          unsigned gi = 0, ci = 0;
          std::memcpy(&gi, e + 16, sizeof gi);
          std::memcpy(&ci, e + 20, sizeof ci);
          if (gi != nvml::kNoInstance) p.gpu_instance_id = gi;
          if (ci != nvml::kNoInstance) p.compute_instance_id = ci;
        }
        out.push_back(std::move(p));
      }
      return r;
    }
    if (r != NVML_ERROR_INSUFFICIENT_SIZE) return r;
    count = n;
  }
  return NVML_ERROR_INSUFFICIENT_SIZE;
}

std::string describe_init_failure(nvmlReturn_t r, const std::string& text) {
  std::string nvml = " (NVML: " + text + ")";
  switch (r) {
    case NVML_ERROR_DRIVER_NOT_LOADED:
      return "NVIDIA driver not loaded" + nvml;
    case NVML_ERROR_LIB_RM_VERSION_MISMATCH:
      return "NVIDIA driver and NVML library versions differ; reload the driver or reboot" + nvml;
    case NVML_ERROR_NO_PERMISSION:
      return "no permission to talk to the NVIDIA driver" + nvml;
    case NVML_ERROR_LIBRARY_NOT_FOUND:
      return "NVML could not find the NVIDIA driver's library" + nvml;
    default:
      return "NVML initialisation failed" + nvml;
  }
}

}  // namespace

std::string NvmlApiVersions::to_string() const {
  return "init=" + init + " mem=" + memory + " compute=" + compute + " graphics=" + graphics +
         " mps=" + mps + " v3_entry=" + std::to_string(v3_entry_bytes);
}

const char* nvml_return_name(nvmlReturn_t code) {
  switch (code) {
    case NVML_SUCCESS:
      return "Success";
    case NVML_ERROR_UNINITIALIZED:
      return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT:
      return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED:
      return "Not Supported";
    case NVML_ERROR_NO_PERMISSION:
      return "Insufficient Permissions";
    case NVML_ERROR_NOT_FOUND:
      return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE:
      return "Insufficient Size";
    case NVML_ERROR_DRIVER_NOT_LOADED:
      return "Driver Not Loaded";
    case NVML_ERROR_LIBRARY_NOT_FOUND:
      return "NVML Shared Library Not Found";
    case NVML_ERROR_FUNCTION_NOT_FOUND:
      return "Function Not Found";
    case NVML_ERROR_GPU_IS_LOST:
      return "GPU is lost";
    case NVML_ERROR_RESET_REQUIRED:
      return "GPU requires reset";
    case NVML_ERROR_LIB_RM_VERSION_MISMATCH:
      return "NVML/RM version mismatch";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH:
      return "Argument version mismatch";
    default:
      return "Unknown Error";
  }
}

std::vector<std::string> NvmlReader::library_candidates() {
  const char* env = std::getenv("VRAMD_NVML_LIBRARY");
  if (env != nullptr && *env != '\0') return {env};
  // .so.1 first: on WSL a stub can shadow the real one, and WSL has no unversioned .so.
  return {"libnvidia-ml.so.1", "libnvidia-ml.so"};
}

Result<std::unique_ptr<NvmlReader>> NvmlReader::open() { return open(library_candidates()); }

Result<std::unique_ptr<NvmlReader>> NvmlReader::open(const std::vector<std::string>& candidates) {
  std::string tried;
  for (const std::string& path : candidates) {
    void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      const char* err = ::dlerror();
      tried += (tried.empty() ? "" : "; ") + path + ": " + (err ? err : "dlopen failed");
      continue;
    }
    auto s = std::make_unique<Symbols>();
    resolve(handle, s->calls, "nvmlInit_v2", s->init_v2);
    resolve(handle, s->calls, "nvmlInit", s->init_v1);
    resolve(handle, s->calls, "nvmlShutdown", s->shutdown);
    resolve(handle, s->calls, "nvmlErrorString", s->error_string);
    resolve(handle, s->calls, "nvmlSystemGetDriverVersion", s->driver_version);
    resolve(handle, s->calls, "nvmlDeviceGetCount_v2", s->count_v2);
    resolve(handle, s->calls, "nvmlDeviceGetCount", s->count_v1);
    resolve(handle, s->calls, "nvmlDeviceGetHandleByIndex_v2", s->handle_v2);
    resolve(handle, s->calls, "nvmlDeviceGetHandleByIndex", s->handle_v1);
    resolve(handle, s->calls, "nvmlDeviceGetName", s->name);
    resolve(handle, s->calls, "nvmlDeviceGetUUID", s->uuid);
    resolve(handle, s->calls, "nvmlDeviceGetMemoryInfo_v2", s->memory_v2);
    resolve(handle, s->calls, "nvmlDeviceGetMemoryInfo", s->memory_v1);
    resolve(handle, s->calls, "nvmlDeviceGetUtilizationRates", s->utilization);
    resolve(handle, s->calls, "nvmlDeviceGetTemperature", s->temperature);
    resolve(handle, s->calls, "nvmlDeviceGetPowerUsage", s->power);
    resolve(handle, s->calls, "nvmlDeviceGetComputeRunningProcesses_v3", s->compute_v3);
    resolve(handle, s->calls, "nvmlDeviceGetComputeRunningProcesses_v2", s->compute_v2);
    resolve(handle, s->calls, "nvmlDeviceGetComputeRunningProcesses", s->compute_v1);
    resolve(handle, s->calls, "nvmlDeviceGetGraphicsRunningProcesses_v3", s->graphics_v3);
    resolve(handle, s->calls, "nvmlDeviceGetGraphicsRunningProcesses_v2", s->graphics_v2);
    resolve(handle, s->calls, "nvmlDeviceGetGraphicsRunningProcesses", s->graphics_v1);
    resolve(handle, s->calls, "nvmlDeviceGetMPSComputeRunningProcesses_v3", s->mps_v3);
    resolve(handle, s->calls, "nvmlDeviceGetMPSComputeRunningProcesses_v2", s->mps_v2);
    resolve(handle, s->calls, "nvmlDeviceGetMPSComputeRunningProcesses", s->mps_v1);
    resolve(handle, s->calls, "nvmlDeviceGetMigMode", s->mig_mode);
    resolve(handle, s->calls, "nvmlDeviceGetMaxMigDeviceCount", s->max_mig_count);
    resolve(handle, s->calls, "nvmlDeviceGetMigDeviceHandleByIndex", s->mig_handle);
    resolve(handle, s->calls, "nvmlDeviceGetGpuInstanceId", s->gpu_instance_id);
    resolve(handle, s->calls, "nvmlDeviceGetComputeInstanceId", s->compute_instance_id);
    s->r535_exports = ::dlsym(handle, "nvmlDeviceGetConfComputeMemSizeInfo") != nullptr &&
                      ::dlsym(handle, "nvmlDeviceGetRunningProcessDetailList") == nullptr;
    std::string missing;
    if (!s->init_v2 && !s->init_v1) missing += " nvmlInit";
    if (!s->count_v2 && !s->count_v1) missing += " nvmlDeviceGetCount";
    if (!s->handle_v2 && !s->handle_v1) missing += " nvmlDeviceGetHandleByIndex";
    if (!s->memory_v2 && !s->memory_v1) missing += " nvmlDeviceGetMemoryInfo";
    if (!missing.empty()) {
      ::dlclose(handle);
      tried += tried.empty() ? "" : "; ";
      tried += path;
      tried += ": loaded but lacks";
      tried += missing;
      continue;
    }
    return std::unique_ptr<NvmlReader>(new NvmlReader(handle, path, std::move(s)));
  }
  return make_error("NVML not found (tried " + tried + ")");
}

NvmlReader::NvmlReader(void* handle, std::string path, std::unique_ptr<Symbols> symbols)
    : handle_(handle), library_path_(std::move(path)), sym_(std::move(symbols)) {}

NvmlReader::~NvmlReader() {
  shutdown();
  if (handle_ != nullptr) ::dlclose(handle_);
}

std::string NvmlReader::error_string(nvmlReturn_t code) const {
  if (sym_->error_string != nullptr) {
    if (const char* s = sym_->error_string(code)) return s;
  }
  return nvml_return_name(code);
}

nvmlReturn_t NvmlReader::init() {
  nvmlReturn_t r = NVML_ERROR_FUNCTION_NOT_FOUND;
  if (sym_->init_v2 != nullptr) {
    r = sym_->init_v2();
    versions_.init = "v2";
  }
  if (r == NVML_ERROR_FUNCTION_NOT_FOUND && sym_->init_v1 != nullptr) {
    r = sym_->init_v1();
    versions_.init = "v1";
  }
  initialized_ = r == NVML_SUCCESS;
  return r;
}

void NvmlReader::add_calls(GpuReading& reading) const {
  for (const auto& [name, n] : sym_->calls)
    if (n > 0) reading.nvml_calls.emplace_back(name, n);
}

void NvmlReader::shutdown() {
  if (initialized_ && sym_->shutdown != nullptr) sym_->shutdown();
  initialized_ = false;
  identity_known_ = false;
}

nvmlReturn_t NvmlReader::read_processes(ProcessList list, nvmlDevice_t device,
                                        std::vector<ProcessMemory>& out, std::string& version) {
  const NvmlEntry<nvmlDeviceGetProcesses_v2_fn>* v3e = nullptr;
  const NvmlEntry<nvmlDeviceGetProcesses_v2_fn>* v2e = nullptr;
  const NvmlEntry<nvmlDeviceGetProcesses_v1_fn>* v1e = nullptr;
  switch (list) {
    case ProcessList::compute:
      v3e = &sym_->compute_v3, v2e = &sym_->compute_v2, v1e = &sym_->compute_v1;
      break;
    case ProcessList::graphics:
      v3e = &sym_->graphics_v3, v2e = &sym_->graphics_v2, v1e = &sym_->graphics_v1;
      break;
    case ProcessList::mps:
      v3e = &sym_->mps_v3, v2e = &sym_->mps_v2, v1e = &sym_->mps_v1;
      break;
  }
  const auto &v3 = *v3e, &v2 = *v2e;
  const auto& v1 = *v1e;
  nvmlReturn_t r = NVML_ERROR_FUNCTION_NOT_FOUND;
  version.clear();
  if (v3 != nullptr) {
    r = fetch_processes<nvmlProcessInfo_v2_t>(v3, device, versions_.v3_entry_bytes, true, out);
    if (!is_absent(r)) version = "v3";
  }
  if (is_absent(r) && v2 != nullptr) {
    r = fetch_processes<nvmlProcessInfo_v2_t>(v2, device, sizeof(nvmlProcessInfo_v2_t), true, out);
    if (!is_absent(r)) version = "v2";
  }
  if (is_absent(r) && v1 != nullptr) {
    r = fetch_processes<nvmlProcessInfo_v1_t>(v1, device, sizeof(nvmlProcessInfo_v1_t), false, out);
    if (!is_absent(r)) version = "v1";
  }
  if (r != NVML_SUCCESS) out.clear();
  return r;
}

nvmlReturn_t NvmlReader::read_memory(nvmlDevice_t device, GpuSample& sample) {
  nvmlReturn_t r = NVML_ERROR_FUNCTION_NOT_FOUND;
  if (sym_->memory_v2 != nullptr) {
    nvmlMemory_v2_t mem{};
    mem.version = nvml::kMemoryV2Version;
    r = sym_->memory_v2(device, &mem);
    if (r == NVML_SUCCESS) {
      versions_.memory = "v2";
      sample.total = mem.total;
      sample.used = mem.total >= mem.free ? mem.total - mem.free : 0;
      sample.reserved = mem.reserved;
    }
  }
  if (is_absent(r) && sym_->memory_v1 != nullptr) {
    nvmlMemory_t mem{};
    r = sym_->memory_v1(device, &mem);
    if (r == NVML_SUCCESS) {
      versions_.memory = "v1";
      sample.total = mem.total;
      sample.used = mem.total >= mem.free ? mem.total - mem.free : 0;
    }
  }
  return r;
}

nvmlReturn_t NvmlReader::read_all_processes(nvmlDevice_t device, std::vector<ProcessMemory>& out,
                                            bool& readable, const char*& failed) {
  std::vector<ProcessMemory> compute, graphics, mps;
  nvmlReturn_t rc = read_processes(ProcessList::compute, device, compute, versions_.compute);
  if (is_lost(rc)) return (failed = "nvmlDeviceGetComputeRunningProcesses", rc);
  nvmlReturn_t rg = read_processes(ProcessList::graphics, device, graphics, versions_.graphics);
  if (is_lost(rg)) return (failed = "nvmlDeviceGetGraphicsRunningProcesses", rg);
  // MPS clients: absent before R460 and without MPS support; then there are none to add.
  nvmlReturn_t rm = read_processes(ProcessList::mps, device, mps, versions_.mps);
  if (is_lost(rm)) return (failed = "nvmlDeviceGetMPSComputeRunningProcesses", rm);
  // Unreadable only when neither list could be read: one of them still names processes.
  readable = rc == NVML_SUCCESS || rg == NVML_SUCCESS;
  out = std::move(compute);
  merge_processes(out, graphics);
  merge_processes(out, mps);
  return readable ? NVML_SUCCESS : (rc != NVML_SUCCESS ? rc : rg);
}

void NvmlReader::read_device(unsigned index, std::vector<GpuSample>& out, bool& lost,
                             ProcessListSchedule* lists) {
  out.emplace_back();
  std::size_t at = out.size() - 1;
  auto sample = [&]() -> GpuSample& { return out[at]; };
  sample().index = index;
  sample().label = std::to_string(index);
  DeviceIdentity& id = devices_[index];
  auto fail = [&](nvmlReturn_t r, const char* what) {
    GpuSample& s = sample();
    if (is_lost(r)) {
      s.health = GpuHealth::lost;
      lost = true;
    } else if (s.health != GpuHealth::lost) {
      s.health = GpuHealth::error;
    }
    s.error = "GPU " + std::to_string(index) + (s.uuid.empty() ? "" : " (" + s.uuid + ")") + ": " +
              error_string(r) + " (NVML " + what + ")";
    identity_known_ = false;  // whatever failed, the next read asks everything again
  };

  nvmlReturn_t r = NVML_ERROR_FUNCTION_NOT_FOUND;
  if (!id.known) {
    id = DeviceIdentity{};
    if (sym_->handle_v2 != nullptr) r = sym_->handle_v2(index, &id.handle);
    if (r == NVML_ERROR_FUNCTION_NOT_FOUND && sym_->handle_v1 != nullptr) {
      r = sym_->handle_v1(index, &id.handle);
    }
    if (r != NVML_SUCCESS) return fail(r, "nvmlDeviceGetHandleByIndex");
    if (sym_->uuid != nullptr) {
      char buf[nvml::kDeviceUuidBufferSize] = {};
      r = sym_->uuid(id.handle, buf, sizeof buf);
      if (r == NVML_SUCCESS)
        id.uuid = c_string(buf, sizeof buf);
      else if (is_lost(r))
        return fail(r, "nvmlDeviceGetUUID");
    }
    sample().uuid = id.uuid;
    if (sym_->name != nullptr) {
      char buf[nvml::kDeviceNameBufferSize] = {};
      r = sym_->name(id.handle, buf, sizeof buf);
      if (r == NVML_SUCCESS)
        id.name = c_string(buf, sizeof buf);
      else if (is_lost(r))
        return fail(r, "nvmlDeviceGetName");
    }
    if (sym_->mig_mode != nullptr) {
      unsigned current = 0, pending = 0;
      r = sym_->mig_mode(id.handle, &current, &pending);
      if (r == NVML_SUCCESS)
        id.mig = current == nvml::kDeviceMigEnable;
      else if (is_lost(r))
        return fail(r, "nvmlDeviceGetMigMode");
      // NOT_SUPPORTED: a card without MIG.
    }
    id.known = true;
  }
  nvmlDevice_t device = id.handle;
  sample().uuid = id.uuid;
  sample().name = id.name;
  sample().mig_enabled = id.mig;
  const bool mig = sample().mig_enabled;
  auto add_note = [&](const std::string& text) {
    std::string& note = sample().note;
    note += (note.empty() ? "" : "; ") + text;
  };

  r = read_memory(device, sample());
  if (r != NVML_SUCCESS) {
    // A MIG parent's card-wide figures need privileges; its instances are still read.
    if (!(mig && !is_lost(r))) return fail(r, "nvmlDeviceGetMemoryInfo");
    add_note("card-wide memory: " + error_string(r) +
             " (needs root with MIG on); read per MIG instance");
  }

  // Optional figures: a failure leaves them unknown, unless it says the GPU is gone.
  if (sym_->utilization != nullptr) {
    nvmlUtilization_t u{};
    r = sym_->utilization(device, &u);
    if (r == NVML_SUCCESS)
      sample().utilization_pct = u.gpu;
    else if (is_lost(r))
      return fail(r, "nvmlDeviceGetUtilizationRates");
  }
  if (sym_->temperature != nullptr) {
    unsigned t = 0;
    r = sym_->temperature(device, nvml::kTemperatureGpu, &t);
    if (r == NVML_SUCCESS)
      sample().temperature_c = t;
    else if (is_lost(r))
      return fail(r, "nvmlDeviceGetTemperature");
  }
  if (sym_->power != nullptr) {
    unsigned mw = 0;
    r = sym_->power(device, &mw);
    if (r == NVML_SUCCESS)
      sample().power_w = mw / 1000.0;
    else if (is_lost(r))
      return fail(r, "nvmlDeviceGetPowerUsage");
  }

  // The process lists take the driver's global lock: read only when due (core/process_scan.h).
  const std::string key = ProcessListSchedule::key_of(sample());
  if (!mig && lists != nullptr && !lists->due(key, sample().used)) {
    sample().processes = lists->last(key);
    sample().processes_listed = false;
    return;
  }
  std::vector<ProcessMemory> processes;
  bool readable = false;
  const char* failed = "";
  r = read_all_processes(device, processes, readable, failed);
  if (is_lost(r)) return fail(r, failed);
  if (!mig && lists != nullptr) lists->listed(key, sample().used, readable, processes);
  if (!mig) {
    sample().processes_readable = readable;
    sample().processes = std::move(processes);
    return;
  }
  // MIG on: the parent's processes are its instances'; they are listed (and counted) there.
  sample().processes_readable = false;
  if (!readable) {
    add_note("card-wide process list: " + error_string(r) + "; read per MIG instance");
  }
  std::vector<GpuSample> instances;
  read_mig_instances(index, device, sample(), readable ? &processes : nullptr, instances, lost);
  for (auto& g : instances) out.push_back(std::move(g));
}

GpuReading NvmlReader::read_gpus(ProcessListSchedule* lists) {
  const bool kept = initialized_ && identity_known_ && identity_age_ < kIdentityReads;
  bool lost = false;
  GpuReading reading = read_all(lists, lost);
  // A failure on identities kept from an earlier read: read again asking everything, as a read
  // without them would have (the driver gone: "cannot count GPUs"). A lost GPU is read afresh
  // on the next read, as before.
  if (kept && !identity_known_ && !lost) {
    lost = false;
    reading = read_all(lists, lost);
  }
  return reading;
}

GpuReading NvmlReader::read_all(ProcessListSchedule* lists, bool& lost) {
  GpuReading reading;
  reading.backend = "nvml";
  if (!initialized_) {
    nvmlReturn_t r = init();
    if (r != NVML_SUCCESS) {
      reading.error = describe_init_failure(r, error_string(r));
      add_calls(reading);
      return reading;
    }
  }
  if (!identity_known_ || identity_age_ >= kIdentityReads) {
    driver_version_.clear();
    if (sym_->driver_version != nullptr) {
      char buf[nvml::kDriverVersionBufferSize] = {};
      if (sym_->driver_version(buf, sizeof buf) == NVML_SUCCESS)
        driver_version_ = c_string(buf, sizeof buf);
    }
    unsigned count = 0;
    nvmlReturn_t r = NVML_ERROR_FUNCTION_NOT_FOUND;
    if (sym_->count_v2 != nullptr) r = sym_->count_v2(&count);
    if (r == NVML_ERROR_FUNCTION_NOT_FOUND && sym_->count_v1 != nullptr)
      r = sym_->count_v1(&count);
    if (r != NVML_SUCCESS) {
      reading.driver_version = driver_version_;
      reading.error = "cannot count GPUs (NVML: " + error_string(r) + ")";
      shutdown();  // start afresh next time: the driver may have gone away
      add_calls(reading);
      return reading;
    }
    devices_.assign(count, DeviceIdentity{});
    identity_known_ = true;
    identity_age_ = 0;
  }
  ++identity_age_;
  reading.driver_version = driver_version_;
  versions_.v3_entry_bytes = sym_->r535_exports || is_early_r535(reading.driver_version)
                                 ? sizeof(nvmlProcessInfo_r535_t)
                                 : sizeof(nvmlProcessInfo_v2_t);
  for (unsigned i = 0; i < devices_.size(); ++i) read_device(i, reading.gpus, lost, lists);
  // A lost GPU may come back (reset, driver reload): re-initialise before the next read so that
  // NVML enumerates devices afresh.
  if (lost) shutdown();
  add_calls(reading);
  return reading;
}

}  // namespace vramd
