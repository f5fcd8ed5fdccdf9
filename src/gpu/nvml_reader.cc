#include "gpu/nvml_reader.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>

namespace vramd {

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
};

namespace {

constexpr int kMaxListAttempts = 5;
constexpr unsigned kListSlack = 8;

template <typename Fn>
void resolve(void* handle, const char* name, Fn& out) {
  out = reinterpret_cast<Fn>(::dlsym(handle, name));
}

// Answers that mean "this entry point is not there or not for this version: try an older one".
bool is_absent(nvmlReturn_t r) {
  return r == NVML_ERROR_FUNCTION_NOT_FOUND || r == NVML_ERROR_NOT_SUPPORTED ||
         r == NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
}

bool is_lost(nvmlReturn_t r) {
  return r == NVML_ERROR_GPU_IS_LOST || r == NVML_ERROR_RESET_REQUIRED;
}

std::string c_string(const char* buffer, std::size_t size) {
  return std::string(buffer, strnlen(buffer, size));
}

// The count/INSUFFICIENT_SIZE protocol for one entry point; `Info` is its struct layout.
template <typename Info, typename Fn>
nvmlReturn_t fetch_processes(Fn fn, nvmlDevice_t device, std::vector<ProcessMemory>& out) {
  out.clear();
  unsigned count = 0;
  nvmlReturn_t r = fn(device, &count, nullptr);
  if (r == NVML_SUCCESS) return r;  // none running
  if (r != NVML_ERROR_INSUFFICIENT_SIZE) return r;
  std::size_t capacity = 0;
  for (int attempt = 0; attempt < kMaxListAttempts; ++attempt) {
    // Processes come and go between calls: leave room, and always grow.
    capacity = std::max<std::size_t>(capacity * 2, count + count / 4 + kListSlack);
    std::vector<Info> infos(capacity);
    unsigned n = static_cast<unsigned>(infos.size());
    r = fn(device, &n, infos.data());
    if (r == NVML_SUCCESS) {
      n = std::min<unsigned>(n, static_cast<unsigned>(infos.size()));
      for (unsigned i = 0; i < n; ++i) {
        ProcessMemory p;
        p.pid = static_cast<int>(infos[i].pid);
        if (infos[i].usedGpuMemory != nvml::kValueNotAvailable) p.used = infos[i].usedGpuMemory;
        out.push_back(std::move(p));
      }
      return r;
    }
    if (r != NVML_ERROR_INSUFFICIENT_SIZE) return r;
    count = n;
  }
  return NVML_ERROR_INSUFFICIENT_SIZE;
}

// A pid in both lists counts once, with the larger known value.
void merge_processes(std::vector<ProcessMemory>& into, const std::vector<ProcessMemory>& more) {
  for (const ProcessMemory& p : more) {
    auto it = std::find_if(into.begin(), into.end(),
                           [&](const ProcessMemory& q) { return q.pid == p.pid; });
    if (it == into.end()) {
      into.push_back(p);
    } else if (p.used && (!it->used || *p.used > *it->used)) {
      it->used = p.used;
    }
  }
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
  return "init=" + init + " mem=" + memory + " compute=" + compute + " graphics=" + graphics;
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
    resolve(handle, "nvmlInit_v2", s->init_v2);
    resolve(handle, "nvmlInit", s->init_v1);
    resolve(handle, "nvmlShutdown", s->shutdown);
    resolve(handle, "nvmlErrorString", s->error_string);
    resolve(handle, "nvmlSystemGetDriverVersion", s->driver_version);
    resolve(handle, "nvmlDeviceGetCount_v2", s->count_v2);
    resolve(handle, "nvmlDeviceGetCount", s->count_v1);
    resolve(handle, "nvmlDeviceGetHandleByIndex_v2", s->handle_v2);
    resolve(handle, "nvmlDeviceGetHandleByIndex", s->handle_v1);
    resolve(handle, "nvmlDeviceGetName", s->name);
    resolve(handle, "nvmlDeviceGetUUID", s->uuid);
    resolve(handle, "nvmlDeviceGetMemoryInfo_v2", s->memory_v2);
    resolve(handle, "nvmlDeviceGetMemoryInfo", s->memory_v1);
    resolve(handle, "nvmlDeviceGetUtilizationRates", s->utilization);
    resolve(handle, "nvmlDeviceGetTemperature", s->temperature);
    resolve(handle, "nvmlDeviceGetPowerUsage", s->power);
    resolve(handle, "nvmlDeviceGetComputeRunningProcesses_v3", s->compute_v3);
    resolve(handle, "nvmlDeviceGetComputeRunningProcesses_v2", s->compute_v2);
    resolve(handle, "nvmlDeviceGetComputeRunningProcesses", s->compute_v1);
    resolve(handle, "nvmlDeviceGetGraphicsRunningProcesses_v3", s->graphics_v3);
    resolve(handle, "nvmlDeviceGetGraphicsRunningProcesses_v2", s->graphics_v2);
    resolve(handle, "nvmlDeviceGetGraphicsRunningProcesses", s->graphics_v1);
    std::string missing;
    if (!s->init_v2 && !s->init_v1) missing += " nvmlInit";
    if (!s->count_v2 && !s->count_v1) missing += " nvmlDeviceGetCount";
    if (!s->handle_v2 && !s->handle_v1) missing += " nvmlDeviceGetHandleByIndex";
    if (!s->memory_v2 && !s->memory_v1) missing += " nvmlDeviceGetMemoryInfo";
    if (!missing.empty()) {
      ::dlclose(handle);
      tried += (tried.empty() ? "" : "; ") + path + ": loaded but lacks" + missing;
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

void NvmlReader::shutdown() {
  if (initialized_ && sym_->shutdown != nullptr) sym_->shutdown();
  initialized_ = false;
}

nvmlReturn_t NvmlReader::read_processes(bool graphics, nvmlDevice_t device,
                                        std::vector<ProcessMemory>& out, std::string& version) {
  auto v3 = graphics ? sym_->graphics_v3 : sym_->compute_v3;
  auto v2 = graphics ? sym_->graphics_v2 : sym_->compute_v2;
  auto v1 = graphics ? sym_->graphics_v1 : sym_->compute_v1;
  nvmlReturn_t r = NVML_ERROR_FUNCTION_NOT_FOUND;
  version.clear();
  if (v3 != nullptr) {
    r = fetch_processes<nvmlProcessInfo_v2_t>(v3, device, out);
    if (!is_absent(r)) version = "v3";
  }
  if (is_absent(r) && v2 != nullptr) {
    r = fetch_processes<nvmlProcessInfo_v2_t>(v2, device, out);
    if (!is_absent(r)) version = "v2";
  }
  if (is_absent(r) && v1 != nullptr) {
    r = fetch_processes<nvmlProcessInfo_v1_t>(v1, device, out);
    if (!is_absent(r)) version = "v1";
  }
  if (r != NVML_SUCCESS) out.clear();
  return r;
}

void NvmlReader::read_device(unsigned index, GpuSample& sample, bool& lost) {
  sample.index = index;
  auto fail = [&](nvmlReturn_t r, const char* what) {
    if (is_lost(r)) {
      sample.health = GpuHealth::lost;
      lost = true;
    } else if (sample.health != GpuHealth::lost) {
      sample.health = GpuHealth::error;
    }
    sample.error = "GPU " + std::to_string(index) +
                   (sample.uuid.empty() ? "" : " (" + sample.uuid + ")") + ": " + error_string(r) +
                   " (NVML " + what + ")";
  };

  nvmlDevice_t device = nullptr;
  nvmlReturn_t r = NVML_ERROR_FUNCTION_NOT_FOUND;
  if (sym_->handle_v2 != nullptr) r = sym_->handle_v2(index, &device);
  if (r == NVML_ERROR_FUNCTION_NOT_FOUND && sym_->handle_v1 != nullptr) {
    r = sym_->handle_v1(index, &device);
  }
  if (r != NVML_SUCCESS) return fail(r, "nvmlDeviceGetHandleByIndex");

  if (sym_->uuid != nullptr) {
    char buf[nvml::kDeviceUuidBufferSize] = {};
    r = sym_->uuid(device, buf, sizeof buf);
    if (r == NVML_SUCCESS)
      sample.uuid = c_string(buf, sizeof buf);
    else if (is_lost(r))
      return fail(r, "nvmlDeviceGetUUID");
  }
  if (sym_->name != nullptr) {
    char buf[nvml::kDeviceNameBufferSize] = {};
    r = sym_->name(device, buf, sizeof buf);
    if (r == NVML_SUCCESS)
      sample.name = c_string(buf, sizeof buf);
    else if (is_lost(r))
      return fail(r, "nvmlDeviceGetName");
  }

  r = NVML_ERROR_FUNCTION_NOT_FOUND;
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
  if (r != NVML_SUCCESS) return fail(r, "nvmlDeviceGetMemoryInfo");

  // Optional figures: a failure leaves them unknown, unless it says the GPU is gone.
  if (sym_->utilization != nullptr) {
    nvmlUtilization_t u{};
    r = sym_->utilization(device, &u);
    if (r == NVML_SUCCESS)
      sample.utilization_pct = u.gpu;
    else if (is_lost(r))
      return fail(r, "nvmlDeviceGetUtilizationRates");
  }
  if (sym_->temperature != nullptr) {
    unsigned t = 0;
    r = sym_->temperature(device, nvml::kTemperatureGpu, &t);
    if (r == NVML_SUCCESS)
      sample.temperature_c = t;
    else if (is_lost(r))
      return fail(r, "nvmlDeviceGetTemperature");
  }
  if (sym_->power != nullptr) {
    unsigned mw = 0;
    r = sym_->power(device, &mw);
    if (r == NVML_SUCCESS)
      sample.power_w = mw / 1000.0;
    else if (is_lost(r))
      return fail(r, "nvmlDeviceGetPowerUsage");
  }

  std::vector<ProcessMemory> compute, graphics;
  nvmlReturn_t rc = read_processes(false, device, compute, versions_.compute);
  if (is_lost(rc)) return fail(rc, "nvmlDeviceGetComputeRunningProcesses");
  nvmlReturn_t rg = read_processes(true, device, graphics, versions_.graphics);
  if (is_lost(rg)) return fail(rg, "nvmlDeviceGetGraphicsRunningProcesses");
  // Unreadable only when neither list could be read: one of them still names processes.
  sample.processes_readable = rc == NVML_SUCCESS || rg == NVML_SUCCESS;
  sample.processes = std::move(compute);
  merge_processes(sample.processes, graphics);
}

GpuReading NvmlReader::read() {
  GpuReading reading;
  reading.backend = "nvml";
  if (!initialized_) {
    nvmlReturn_t r = init();
    if (r != NVML_SUCCESS) {
      reading.error = describe_init_failure(r, error_string(r));
      return reading;
    }
  }
  if (sym_->driver_version != nullptr) {
    char buf[nvml::kDriverVersionBufferSize] = {};
    if (sym_->driver_version(buf, sizeof buf) == NVML_SUCCESS) {
      reading.driver_version = c_string(buf, sizeof buf);
    }
  }
  unsigned count = 0;
  nvmlReturn_t r = NVML_ERROR_FUNCTION_NOT_FOUND;
  if (sym_->count_v2 != nullptr) r = sym_->count_v2(&count);
  if (r == NVML_ERROR_FUNCTION_NOT_FOUND && sym_->count_v1 != nullptr) r = sym_->count_v1(&count);
  if (r != NVML_SUCCESS) {
    reading.error = "cannot count GPUs (NVML: " + error_string(r) + ")";
    shutdown();  // start afresh next time: the driver may have gone away
    return reading;
  }
  bool lost = false;
  for (unsigned i = 0; i < count; ++i) {
    GpuSample sample;
    read_device(i, sample, lost);
    reading.gpus.push_back(std::move(sample));
  }
  // A lost GPU may come back (reset, driver reload): re-initialise before the next read so that
  // NVML enumerates devices afresh.
  if (lost) shutdown();
  return reading;
}

}  // namespace vramd
