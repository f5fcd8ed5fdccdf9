// A fake libnvidia-ml: serves the NVML subset of src/gpu/nvml_api.h from the JSON state file named
// by $FAKE_NVML_STATE (see fake_state.h), re-read on every call. Built as libnvidia-ml-fake.so;
// vramd loads it when VRAMD_NVML_LIBRARY points at it.
//
// Knobs in the state file:
// - "omit_symbols": [names]: the library cannot hide an exported symbol from dlsym, so those entry
//   points answer NVML_ERROR_FUNCTION_NOT_FOUND instead; vramd's reader treats that answer at call
//   time as "symbol absent" and falls back, exactly as it does when dlsym finds nothing.
// - "errors": {"nvmlFunctionName": "GPU_IS_LOST"}: that function returns that code (names as in
//   the reference: GPU_IS_LOST, DRIVER_NOT_LOADED, NOT_SUPPORTED, UNKNOWN, ...), for every gpu at
//   top level, or for one gpu when inside that gpu's object. Per gpu "lost": true makes every
//   device call on it return GPU_IS_LOST.
// - per gpu "extra_processes_after_first_call": N: every process-list call after the first one
//   since nvmlInit sees N more (synthetic) processes, so the list grows between count and fetch.
// - per gpu "mig_devices": [{"gi": 2, "ci": 0, "uuid": "MIG-...", "profile": "3g.71gb",
//   "total": N, "used": N, "processes": [...]}, null, ...]: MIG mode on, one entry per MIG device
//   slot of nvmlDeviceGetMigDeviceHandleByIndex (null: NOT_FOUND, no instance there). Compute
//   instances of one GI repeat its gi, total and used. Processes carry the entry's gi/ci ids;
//   with MIG off every process's ids are 0xFFFFFFFF, as the real library gives them.
// - "privileged": false (top level or per gpu): with MIG on, the parent's memory and process
//   lists answer NO_PERMISSION, as they do for a non-root caller. Default true. With privileges
//   the parent's process list is every instance's.
// - per gpu "mps_processes": [...]: MPS clients, for nvmlDeviceGetMPSComputeRunningProcesses*.
// - "v3_entry_bytes": 32: the _v3 lists write early-R535 32-byte entries (nvmlProcessInfo_r535_t).
//   The build FAKE_NVML_R535 (libnvidia-ml-fake-r535.so) always does, and, like those drivers,
//   exports nvmlDeviceGetConfComputeMemSizeInfo but not nvmlDeviceGetRunningProcessDetailList.
// - "overstate_count": N: a successful process-list call reports N more entries than it wrote.
// - A missing or unreadable state file makes nvmlInit return DRIVER_NOT_LOADED.
// Every call is counted by entry point: with $FAKE_NVML_CALLS set, the counts are written there
// as a JSON object ({"nvmlDeviceGetMemoryInfo_v2": 61, ...}) when the library is unloaded (the
// process exits or dlcloses it), so that a test can hold vramd's own count against the driver's.
// Device handles encode the index: (nvmlDevice_t)(index + 1); a MIG device's handle adds
// (slot + 1) << 16.

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <string_view>

#include "../../src/gpu/nvml_api.h"  // the fake is built without src/ on its include path
#include "fake_state.h"

namespace {

using nlohmann::json;

#ifdef FAKE_NVML_R535
constexpr bool kR535 = true;
#else
constexpr bool kR535 = false;
#endif

std::mutex g_mutex;
int g_init_count = 0;
// Every call, by entry point (under g_mutex). Never destroyed: the library's destructor below
// runs after the static destructors at exit.
std::map<std::string, unsigned long long, std::less<>>& g_calls =
    *new std::map<std::string, unsigned long long, std::less<>>;

void count_call(const char* fn) {
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = g_calls.find(std::string_view(fn));  // no allocation once the name is there
  if (it == g_calls.end()) it = g_calls.emplace(fn, 0).first;
  ++it->second;
}

// At unload: the counts to $FAKE_NVML_CALLS, when set.
__attribute__((destructor)) void write_call_counts() {
  const char* path = std::getenv("FAKE_NVML_CALLS");
  if (path == nullptr || *path == '\0') return;
  json counts = json::object();
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    for (const auto& [fn, n] : g_calls) counts[fn] = n;
  }
  if (FILE* f = std::fopen(path, "w")) {
    std::string text = counts.dump();
    std::fwrite(text.data(), 1, text.size(), f);
    std::fclose(f);
  }
}
// Process-list calls since nvmlInit, by function name and gpu index.
std::map<std::pair<std::string, unsigned>, int> g_list_calls;

nvmlReturn_t code_from_name(const std::string& name) {
  static const std::map<std::string, nvmlReturn_t> kCodes = {
      {"SUCCESS", NVML_SUCCESS},
      {"UNINITIALIZED", NVML_ERROR_UNINITIALIZED},
      {"INVALID_ARGUMENT", NVML_ERROR_INVALID_ARGUMENT},
      {"NOT_SUPPORTED", NVML_ERROR_NOT_SUPPORTED},
      {"NO_PERMISSION", NVML_ERROR_NO_PERMISSION},
      {"NOT_FOUND", NVML_ERROR_NOT_FOUND},
      {"INSUFFICIENT_SIZE", NVML_ERROR_INSUFFICIENT_SIZE},
      {"DRIVER_NOT_LOADED", NVML_ERROR_DRIVER_NOT_LOADED},
      {"LIBRARY_NOT_FOUND", NVML_ERROR_LIBRARY_NOT_FOUND},
      {"FUNCTION_NOT_FOUND", NVML_ERROR_FUNCTION_NOT_FOUND},
      {"GPU_IS_LOST", NVML_ERROR_GPU_IS_LOST},
      {"RESET_REQUIRED", NVML_ERROR_RESET_REQUIRED},
      {"LIB_RM_VERSION_MISMATCH", NVML_ERROR_LIB_RM_VERSION_MISMATCH},
      {"ARGUMENT_VERSION_MISMATCH", NVML_ERROR_ARGUMENT_VERSION_MISMATCH},
      {"UNKNOWN", NVML_ERROR_UNKNOWN},
  };
  std::string key = name.rfind("NVML_ERROR_", 0) == 0 ? name.substr(11) : name;
  auto it = kCodes.find(key);
  return it == kCodes.end() ? NVML_ERROR_UNKNOWN : it->second;
}

bool omitted(const json& state, const char* fn) {
  auto it = state.find("omit_symbols");
  if (it == state.end() || !it->is_array()) return false;
  for (const auto& name : *it) {
    if (name.is_string() && name.get<std::string>() == fn) return true;
  }
  return false;
}

// The code configured for `fn` under obj["errors"], if any.
std::optional<nvmlReturn_t> configured_error(const json& obj, const char* fn) {
  auto errors = obj.find("errors");
  if (errors == obj.end() || !errors->is_object()) return std::nullopt;
  auto it = errors->find(fn);
  if (it == errors->end()) return std::nullopt;
  if (it->is_number_integer()) return static_cast<nvmlReturn_t>(it->get<int>());
  if (it->is_string()) return code_from_name(it->get<std::string>());
  return std::nullopt;
}

// Common checks of a library-level call: state readable, initialised, not omitted, no error set.
nvmlReturn_t enter(const char* fn, std::shared_ptr<const json>& state) {
  count_call(fn);
  state = fake_nvml::load_state();
  if (!state) return NVML_ERROR_DRIVER_NOT_LOADED;
  if (omitted(*state, fn)) return NVML_ERROR_FUNCTION_NOT_FOUND;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (g_init_count <= 0) return NVML_ERROR_UNINITIALIZED;
  }
  if (auto code = configured_error(*state, fn)) return *code;
  return NVML_SUCCESS;
}

unsigned index_of(nvmlDevice_t device) {
  return static_cast<unsigned>((reinterpret_cast<std::uintptr_t>(device) & 0xFFFF) - 1);
}
// The MIG device slot a handle names, or -1 for a physical GPU's handle.
int slot_of(nvmlDevice_t device) {
  return static_cast<int>(reinterpret_cast<std::uintptr_t>(device) >> 16) - 1;
}

const json* mig_devices(const json& gpu) {
  auto it = gpu.find("mig_devices");
  return it != gpu.end() && it->is_array() ? &*it : nullptr;
}
bool mig_on(const json& gpu) { return mig_devices(gpu) != nullptr; }
bool privileged(const json& state, const json& gpu) {
  return gpu.value("privileged", state.value("privileged", true));
}

// As enter(), then resolves the device; `gpu` is set on success, `mig` too for a MIG handle.
nvmlReturn_t enter_device(const char* fn, nvmlDevice_t device, std::shared_ptr<const json>& state,
                          const json*& gpu, const json** mig = nullptr) {
  nvmlReturn_t r = enter(fn, state);
  if (r != NVML_SUCCESS) return r;
  if (device == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  gpu = fake_nvml::gpu_at(*state, index_of(device));
  if (gpu == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (gpu->value("lost", false)) return NVML_ERROR_GPU_IS_LOST;
  if (auto code = configured_error(*gpu, fn)) return *code;
  int slot = slot_of(device);
  if (mig != nullptr) *mig = nullptr;
  if (slot >= 0) {
    const json* devices = mig_devices(*gpu);
    if (devices == nullptr || static_cast<std::size_t>(slot) >= devices->size() ||
        !(*devices)[slot].is_object())
      return NVML_ERROR_INVALID_ARGUMENT;
    if (mig == nullptr) return NVML_ERROR_NOT_SUPPORTED;  // this call takes no MIG handle
    *mig = &(*devices)[slot];
    if (auto code = configured_error(**mig, fn)) return *code;
  }
  return NVML_SUCCESS;
}

nvmlReturn_t copy_string(const std::string& s, char* out, unsigned length) {
  if (out == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (s.size() + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
  std::memcpy(out, s.c_str(), s.size() + 1);
  return NVML_SUCCESS;
}

nvmlReturn_t do_init(const char* fn) {
  count_call(fn);
  std::shared_ptr<const json> state = fake_nvml::load_state();
  if (!state) return NVML_ERROR_DRIVER_NOT_LOADED;
  if (omitted(*state, fn)) return NVML_ERROR_FUNCTION_NOT_FOUND;
  if (auto code = configured_error(*state, fn)) return *code;
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_init_count++ == 0) g_list_calls.clear();
  return NVML_SUCCESS;
}

nvmlReturn_t do_count(const char* fn, unsigned* count) {
  std::shared_ptr<const json> state;
  nvmlReturn_t r = enter(fn, state);
  if (r != NVML_SUCCESS) return r;
  if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *count = static_cast<unsigned>(fake_nvml::gpu_count(*state));
  return NVML_SUCCESS;
}

nvmlReturn_t do_handle(const char* fn, unsigned index, nvmlDevice_t* device) {
  std::shared_ptr<const json> state;
  nvmlReturn_t r = enter(fn, state);
  if (r != NVML_SUCCESS) return r;
  if (device == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  const json* gpu = fake_nvml::gpu_at(*state, index);
  if (gpu == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (gpu->value("lost", false)) return NVML_ERROR_GPU_IS_LOST;
  if (auto code = configured_error(*gpu, fn)) return *code;
  *device = reinterpret_cast<nvmlDevice_t>(static_cast<std::uintptr_t>(index) + 1);
  return NVML_SUCCESS;
}

struct Listed {
  fake_nvml::FakeProcess p;
  unsigned gi = vramd::nvml::kNoInstance;
  unsigned ci = vramd::nvml::kNoInstance;
};

void add_listed(std::vector<Listed>& out, const json& obj, const char* key, unsigned gi,
                unsigned ci) {
  for (auto& p : fake_nvml::processes(obj, key)) out.push_back({std::move(p), gi, ci});
}

// The process-list protocol: *count is the capacity of `infos`; too small (or infos NULL with a
// non-empty list) → INSUFFICIENT_SIZE with *count set to what is needed. Entries are `stride`
// bytes (the layout of nvmlProcessInfo_v1_t, _v2_t or _r535_t, all sharing their first fields).
nvmlReturn_t do_processes(const char* fn, const char* key, nvmlDevice_t device, unsigned* count,
                          void* infos, std::size_t stride) {
  std::shared_ptr<const json> state;
  const json* gpu = nullptr;
  const json* mig = nullptr;
  nvmlReturn_t r = enter_device(fn, device, state, gpu, &mig);
  if (r != NVML_SUCCESS) return r;
  if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (std::string(fn).find("_v3") != std::string::npos &&
      (kR535 || fake_nvml::get_u64(*state, "v3_entry_bytes", 24) == 32)) {
    stride = sizeof(nvmlProcessInfo_r535_t);
  }
  std::vector<Listed> list;
  if (mig != nullptr) {
    add_listed(list, *mig, key, static_cast<unsigned>(fake_nvml::get_u64(*mig, "gi", 0)),
               static_cast<unsigned>(fake_nvml::get_u64(*mig, "ci", 0)));
  } else if (mig_on(*gpu)) {
    if (!privileged(*state, *gpu)) return NVML_ERROR_NO_PERMISSION;
    for (const auto& d : *mig_devices(*gpu)) {
      if (!d.is_object()) continue;
      add_listed(list, d, key, static_cast<unsigned>(fake_nvml::get_u64(d, "gi", 0)),
                 static_cast<unsigned>(fake_nvml::get_u64(d, "ci", 0)));
    }
  } else {
    add_listed(list, *gpu, key, vramd::nvml::kNoInstance, vramd::nvml::kNoInstance);
  }
  unsigned extra =
      static_cast<unsigned>(fake_nvml::get_u64(*gpu, "extra_processes_after_first_call", 0));
  if (extra > 0 && std::string(key) == "processes") {
    int calls;
    {
      std::lock_guard<std::mutex> lock(g_mutex);
      calls = g_list_calls[{fn, index_of(device)}]++;
    }
    if (calls > 0) {
      for (unsigned i = 0; i < extra; ++i) list.push_back({{900000 + i, 1ULL << 20, "grown"}});
    }
  }
  unsigned needed = static_cast<unsigned>(list.size());
  if (needed == 0) {
    *count = 0;
    return NVML_SUCCESS;
  }
  if (infos == nullptr || *count < needed) {
    *count = needed;
    return NVML_ERROR_INSUFFICIENT_SIZE;
  }
  for (unsigned i = 0; i < needed; ++i) {
    nvmlProcessInfo_r535_t info{};
    info.pid = list[i].p.pid;
    info.usedGpuMemory = list[i].p.used ? *list[i].p.used : vramd::nvml::kValueNotAvailable;
    info.gpuInstanceId = list[i].gi;
    info.computeInstanceId = list[i].ci;
    std::memcpy(static_cast<unsigned char*>(infos) + std::size_t{i} * stride, &info, stride);
  }
  // A library that claims more entries than it wrote, and more than there was room for.
  *count = needed + static_cast<unsigned>(fake_nvml::get_u64(*state, "overstate_count", 0));
  return NVML_SUCCESS;
}

}  // namespace

extern "C" {

nvmlReturn_t nvmlInit_v2(void) { return do_init("nvmlInit_v2"); }
nvmlReturn_t nvmlInit(void) { return do_init("nvmlInit"); }

nvmlReturn_t nvmlShutdown(void) {
  count_call("nvmlShutdown");
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_init_count <= 0) return NVML_ERROR_UNINITIALIZED;
  --g_init_count;
  return NVML_SUCCESS;
}

// Not NVML's: the counts so far, as the JSON object written to $FAKE_NVML_CALLS. For tests that
// load the library in their own process. The text stays valid until the next call.
const char* fakeNvmlCallCounts(void) {
  static std::string text;
  json counts = json::object();
  std::lock_guard<std::mutex> lock(g_mutex);
  for (const auto& [fn, n] : g_calls) counts[fn] = n;
  text = counts.dump();
  return text.c_str();
}

const char* nvmlErrorString(nvmlReturn_t result) {
  count_call("nvmlErrorString");
  switch (result) {
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
      return "RM has detected an NVML/RM version mismatch.";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH:
      return "Argument version mismatch";
    default:
      return "Unknown Error";
  }
}

nvmlReturn_t nvmlSystemGetDriverVersion(char* version, unsigned length) {
  std::shared_ptr<const json> state;
  nvmlReturn_t r = enter("nvmlSystemGetDriverVersion", state);
  if (r != NVML_SUCCESS) return r;
  return copy_string(fake_nvml::get_string(*state, "driver_version", "550.54.14"), version, length);
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned* count) {
  return do_count("nvmlDeviceGetCount_v2", count);
}
nvmlReturn_t nvmlDeviceGetCount(unsigned* count) { return do_count("nvmlDeviceGetCount", count); }

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned index, nvmlDevice_t* device) {
  return do_handle("nvmlDeviceGetHandleByIndex_v2", index, device);
}
nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned index, nvmlDevice_t* device) {
  return do_handle("nvmlDeviceGetHandleByIndex", index, device);
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char* name, unsigned length) {
  std::shared_ptr<const json> state;
  const json* gpu = nullptr;
  const json* mig = nullptr;
  nvmlReturn_t r = enter_device("nvmlDeviceGetName", device, state, gpu, &mig);
  if (r != NVML_SUCCESS) return r;
  std::string parent = fake_nvml::get_string(*gpu, "name", "NVIDIA Fake GPU");
  if (mig != nullptr) parent += " MIG " + fake_nvml::get_string(*mig, "profile", "1g.10gb");
  return copy_string(parent, name, length);
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char* uuid, unsigned length) {
  std::shared_ptr<const json> state;
  const json* gpu = nullptr;
  const json* mig = nullptr;
  nvmlReturn_t r = enter_device("nvmlDeviceGetUUID", device, state, gpu, &mig);
  if (r != NVML_SUCCESS) return r;
  std::string fallback =
      "GPU-00000000-0000-0000-0000-00000000000" + std::to_string(index_of(device));
  if (mig != nullptr)
    return copy_string(
        fake_nvml::get_string(*mig, "uuid",
                              "MIG-" + fallback.substr(4) + "-" + std::to_string(slot_of(device))),
        uuid, length);
  return copy_string(fake_nvml::get_string(*gpu, "uuid", fallback), uuid, length);
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory) {
  std::shared_ptr<const json> state;
  const json* gpu = nullptr;
  const json* mig = nullptr;
  nvmlReturn_t r = enter_device("nvmlDeviceGetMemoryInfo", device, state, gpu, &mig);
  if (r != NVML_SUCCESS) return r;
  if (memory == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (mig == nullptr && mig_on(*gpu) && !privileged(*state, *gpu)) return NVML_ERROR_NO_PERMISSION;
  const json& from = mig != nullptr ? *mig : *gpu;
  unsigned long long total = fake_nvml::get_u64(from, "total", 0);
  unsigned long long used = std::min(fake_nvml::get_u64(from, "used", 0), total);
  memory->total = total;
  memory->used = used;  // v1: used includes the driver-reserved part
  memory->free = total - used;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t* memory) {
  std::shared_ptr<const json> state;
  const json* gpu = nullptr;
  const json* mig = nullptr;
  nvmlReturn_t r = enter_device("nvmlDeviceGetMemoryInfo_v2", device, state, gpu, &mig);
  if (r != NVML_SUCCESS) return r;
  if (memory == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (memory->version != vramd::nvml::kMemoryV2Version) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
  if (mig == nullptr && mig_on(*gpu) && !privileged(*state, *gpu)) return NVML_ERROR_NO_PERMISSION;
  const json& from = mig != nullptr ? *mig : *gpu;
  unsigned long long total = fake_nvml::get_u64(from, "total", 0);
  unsigned long long used = std::min(fake_nvml::get_u64(from, "used", 0), total);
  unsigned long long reserved = std::min(fake_nvml::get_u64(from, "reserved", 0), used);
  memory->total = total;
  memory->reserved = reserved;
  memory->used = used - reserved;  // v2: used excludes the driver-reserved part
  memory->free = total - used;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t* utilization) {
  std::shared_ptr<const json> state;
  const json* gpu = nullptr;
  nvmlReturn_t r = enter_device("nvmlDeviceGetUtilizationRates", device, state, gpu);
  if (r != NVML_SUCCESS) return r;
  if (utilization == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  std::optional<double> gpu_pct = fake_nvml::get_number(*gpu, "utilization");
  if (!gpu_pct) return NVML_ERROR_NOT_SUPPORTED;
  utilization->gpu = static_cast<unsigned>(*gpu_pct);
  utilization->memory = static_cast<unsigned>(fake_nvml::get_u64(*gpu, "memory_utilization", 0));
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, int sensor, unsigned* temp) {
  std::shared_ptr<const json> state;
  const json* gpu = nullptr;
  nvmlReturn_t r = enter_device("nvmlDeviceGetTemperature", device, state, gpu);
  if (r != NVML_SUCCESS) return r;
  if (temp == nullptr || sensor != vramd::nvml::kTemperatureGpu) return NVML_ERROR_INVALID_ARGUMENT;
  std::optional<double> t = fake_nvml::get_number(*gpu, "temperature");
  if (!t) return NVML_ERROR_NOT_SUPPORTED;
  *temp = static_cast<unsigned>(*t);
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned* milliwatts) {
  std::shared_ptr<const json> state;
  const json* gpu = nullptr;
  nvmlReturn_t r = enter_device("nvmlDeviceGetPowerUsage", device, state, gpu);
  if (r != NVML_SUCCESS) return r;
  if (milliwatts == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  std::optional<double> p = fake_nvml::get_number(*gpu, "power_mw");
  if (!p) return NVML_ERROR_NOT_SUPPORTED;
  *milliwatts = static_cast<unsigned>(*p);
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned* count,
                                                     nvmlProcessInfo_v2_t* infos) {
  return do_processes("nvmlDeviceGetComputeRunningProcesses_v3", "processes", device, count, infos,
                      sizeof(nvmlProcessInfo_v2_t));
}
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device, unsigned* count,
                                                     nvmlProcessInfo_v2_t* infos) {
  return do_processes("nvmlDeviceGetComputeRunningProcesses_v2", "processes", device, count, infos,
                      sizeof(nvmlProcessInfo_v2_t));
}
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t device, unsigned* count,
                                                  nvmlProcessInfo_v1_t* infos) {
  return do_processes("nvmlDeviceGetComputeRunningProcesses", "processes", device, count, infos,
                      sizeof(nvmlProcessInfo_v1_t));
}
nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t device, unsigned* count,
                                                      nvmlProcessInfo_v2_t* infos) {
  return do_processes("nvmlDeviceGetGraphicsRunningProcesses_v3", "graphics_processes", device,
                      count, infos, sizeof(nvmlProcessInfo_v2_t));
}
nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v2(nvmlDevice_t device, unsigned* count,
                                                      nvmlProcessInfo_v2_t* infos) {
  return do_processes("nvmlDeviceGetGraphicsRunningProcesses_v2", "graphics_processes", device,
                      count, infos, sizeof(nvmlProcessInfo_v2_t));
}
nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses(nvmlDevice_t device, unsigned* count,
                                                   nvmlProcessInfo_v1_t* infos) {
  return do_processes("nvmlDeviceGetGraphicsRunningProcesses", "graphics_processes", device, count,
                      infos, sizeof(nvmlProcessInfo_v1_t));
}
nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses_v3(nvmlDevice_t device, unsigned* count,
                                                        nvmlProcessInfo_v2_t* infos) {
  return do_processes("nvmlDeviceGetMPSComputeRunningProcesses_v3", "mps_processes", device, count,
                      infos, sizeof(nvmlProcessInfo_v2_t));
}
nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses_v2(nvmlDevice_t device, unsigned* count,
                                                        nvmlProcessInfo_v2_t* infos) {
  return do_processes("nvmlDeviceGetMPSComputeRunningProcesses_v2", "mps_processes", device, count,
                      infos, sizeof(nvmlProcessInfo_v2_t));
}
nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses(nvmlDevice_t device, unsigned* count,
                                                     nvmlProcessInfo_v1_t* infos) {
  return do_processes("nvmlDeviceGetMPSComputeRunningProcesses", "mps_processes", device, count,
                      infos, sizeof(nvmlProcessInfo_v1_t));
}

nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned* current, unsigned* pending) {
  std::shared_ptr<const json> state;
  const json* gpu = nullptr;
  nvmlReturn_t r = enter_device("nvmlDeviceGetMigMode", device, state, gpu);
  if (r != NVML_SUCCESS) return r;
  if (current == nullptr || pending == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (!gpu->value("mig_capable", true)) return NVML_ERROR_NOT_SUPPORTED;
  *current = *pending = mig_on(*gpu) ? vramd::nvml::kDeviceMigEnable : 0;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned* count) {
  std::shared_ptr<const json> state;
  const json* gpu = nullptr;
  nvmlReturn_t r = enter_device("nvmlDeviceGetMaxMigDeviceCount", device, state, gpu);
  if (r != NVML_SUCCESS) return r;
  if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  const json* devices = mig_devices(*gpu);
  *count = devices == nullptr ? 0 : std::max<unsigned>(7, static_cast<unsigned>(devices->size()));
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned index,
                                                 nvmlDevice_t* mig) {
  std::shared_ptr<const json> state;
  const json* gpu = nullptr;
  nvmlReturn_t r = enter_device("nvmlDeviceGetMigDeviceHandleByIndex", device, state, gpu);
  if (r != NVML_SUCCESS) return r;
  if (mig == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  const json* devices = mig_devices(*gpu);
  if (devices == nullptr) return NVML_ERROR_INVALID_ARGUMENT;  // MIG off
  if (index >= devices->size() || !(*devices)[index].is_object()) return NVML_ERROR_NOT_FOUND;
  *mig = reinterpret_cast<nvmlDevice_t>(reinterpret_cast<std::uintptr_t>(device) +
                                        ((static_cast<std::uintptr_t>(index) + 1) << 16));
  return NVML_SUCCESS;
}

namespace {
nvmlReturn_t instance_id(const char* fn, const char* key, nvmlDevice_t device, unsigned* id) {
  std::shared_ptr<const json> state;
  const json* gpu = nullptr;
  const json* mig = nullptr;
  nvmlReturn_t r = enter_device(fn, device, state, gpu, &mig);
  if (r != NVML_SUCCESS) return r;
  if (id == nullptr || mig == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *id = static_cast<unsigned>(fake_nvml::get_u64(*mig, key, 0));
  return NVML_SUCCESS;
}
}  // namespace

nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned* id) {
  return instance_id("nvmlDeviceGetGpuInstanceId", "gi", device, id);
}
nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device, unsigned* id) {
  return instance_id("nvmlDeviceGetComputeInstanceId", "ci", device, id);
}

// Exported only for what their presence tells (the R535 layout test); vramd never calls them.
nvmlReturn_t nvmlDeviceGetConfComputeMemSizeInfo(nvmlDevice_t, void*) {
  return NVML_ERROR_NOT_SUPPORTED;
}
#ifndef FAKE_NVML_R535
nvmlReturn_t nvmlDeviceGetRunningProcessDetailList(nvmlDevice_t, void*) {
  return NVML_ERROR_NOT_SUPPORTED;
}
#endif

}  // extern "C"
