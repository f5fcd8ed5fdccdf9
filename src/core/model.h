// The words of DESIGN.md as types: GPU samples, processes, owners, holdings.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/units.h"

namespace vramd {

// ---- What the GPU reader sees (gpu/) ----

// One process's memory on one GPU as the driver reports it.
struct ProcessMemory {
  int pid = 0;
  std::optional<Bytes> used;  // nullopt: NVML_VALUE_NOT_AVAILABLE / "[N/A]" (WSL, WDDM). Never 0.
  std::string name;           // process name when the backend gives one (nvidia-smi), else empty
  // The MIG instance the driver places it in; nullopt when MIG is off (the driver's 0xFFFFFFFF).
  std::optional<unsigned> gpu_instance_id;
  std::optional<unsigned> compute_instance_id;
};

enum class GpuHealth {
  ok,     // read normally
  lost,   // GPU_IS_LOST / RESET_REQUIRED: the device fell off the bus or needs a reset
  error,  // any other failure reading this device; see GpuSample::error
};
const char* to_string(GpuHealth h);

// Every device the core sees is a GpuSample keyed by a flat `index`: a physical GPU's NVML index,
// or for a MIG GPU instance the value of mig_flat_index() (core/gpu_select.h), which no physical
// index reaches. A MIG instance is a device of its own (its memory, its processes, leases);
// its parent (mig_enabled) stays in the list for its card-wide figures but holds no memory of its
// own and admits no lease (core/gpu_select.h: admits_leases, attributes_memory).
struct GpuSample {
  unsigned index = 0;
  std::string label;  // "0"; "0/2" for GPU instance 2 of GPU 0 (nvidia-smi's GI id). gpu_label()
  std::string uuid;   // "GPU-..."; a MIG instance's is "MIG-..." (its first compute instance's)
  std::string name;
  GpuHealth health = GpuHealth::ok;
  std::string error;  // set when health != ok
  Bytes total = 0;
  Bytes used = 0;                 // total - free: everything not available to a new allocation
  std::optional<Bytes> reserved;  // driver-reserved part of `used` (MemoryInfo_v2 only)
  std::optional<double> utilization_pct;
  std::optional<unsigned> temperature_c;
  std::optional<double> power_w;
  // false when the process list could not be read at all (then `processes` is empty but
  // that says nothing); per-process N/A is per entry instead.
  bool processes_readable = true;
  std::vector<ProcessMemory> processes;
  // false when this sample did not read the driver's process lists (core/process_scan.h): then
  // `processes` are those of the last read, which its memory has not moved far from since.
  bool processes_listed = true;
  // MIG. On a physical GPU: mig_enabled when its MIG mode is on. On an instance: parent is the
  // physical GPU's index; gpu_instance_id its GI id; compute_instance_id its first CI's id;
  // mig_profile "1g.18gb" (empty when the driver does not say).
  bool mig_enabled = false;
  std::optional<unsigned> parent;
  std::optional<unsigned> gpu_instance_id;
  std::optional<unsigned> compute_instance_id;
  std::string mig_profile;
  // What could not be read without making the device an error ("card-wide memory: Insufficient
  // Permissions (needs root with MIG on); read per MIG instance"); empty when none.
  std::string note;
};

// One read of every GPU.
struct GpuReading {
  std::string backend;         // "nvml" | "nvidia-smi"
  std::string driver_version;  // may be empty
  std::string error;           // non-empty: the whole read failed (driver not loaded, ...)
  std::vector<GpuSample> gpus;
  // NVML entry points called since the reader was opened, by name ("nvmlDeviceGetMemoryInfo_v2"),
  // counted by the reader itself: the metric vramd_nvml_calls_total{function}. Empty for
  // nvidia-smi.
  std::vector<std::pair<std::string, uint64_t>> nvml_calls;
};

// ---- What the host shell sees (host/) ----

// Where a process sits according to its cgroup path.
struct CgroupIdentity {
  enum class Kind {
    host,        // no container, unit or session: the root cgroup or an unknown shape
    container,   // Docker, Podman, containerd, CRI-O container (possibly in a pod)
    unit,        // systemd service (or a scope that is not a session)
    session,     // a user login session scope
    private_ns,  // path relative to a private cgroup namespace ("/../.."): cannot tell
  };
  Kind kind = Kind::host;
  std::string path;            // the raw path used
  std::string runtime;         // container: "docker" | "podman" | "containerd" | "cri-o" | ""
  std::string container_id;    // container: full id as in the path
  std::string pod_uid;         // Kubernetes pod UID with dashes, when in a pod
  std::string unit;            // unit: "comfyui.service"; session: "session-3.scope"
  std::string container_name;  // filled by the Docker lookup when known ("comfyui")
  std::string compose_service; // filled by the Docker lookup from labels
  std::string compose_project;
};
const char* to_string(CgroupIdentity::Kind k);

struct ProcessInfo {
  int pid = 0;
  int ppid = 0;
  std::string comm;     // /proc/PID/comm
  std::string cmdline;  // argv joined with spaces; empty for kernel threads
  unsigned uid = 0;
  std::string user;                // name of uid when resolvable, else the number
  unsigned long long start_ticks = 0;  // field 22 of /proc/PID/stat: with pid, identifies a process
  std::optional<TimePoint> start_time;
  Bytes rss = 0;
  CgroupIdentity cgroup;
};

// What a host scan must gather besides the process table.
struct HostScanRequest {
  // The processes wanted: these pids (the GPU's) and their ancestors, which is all attribution
  // needs; reading every process each second would cost far more. all_processes reads them all.
  std::vector<int> pids;
  bool all_processes = false;
  std::vector<int> ports;  // TCP ports whose listening process is wanted (among those read)
  std::vector<std::pair<std::string, std::string>> pid_files;  // (service, path)
};

// A snapshot of the host taken in one scan.
struct HostSnapshot {
  std::vector<ProcessInfo> processes;  // sorted by pid
  // TCP ports in LISTEN state owned by local processes: (port, pid). Only those asked for.
  std::vector<std::pair<int, int>> listeners;
  // Content of each service's pid_file, keyed by service name, when readable.
  std::vector<std::pair<std::string, int>> pid_files;
  std::optional<Bytes> mem_available;  // host RAM, /proc/meminfo MemAvailable
  std::optional<Bytes> mem_total;
  std::string error;  // non-empty: the process table could not be read (the scan is incomplete)
};

// ---- What the core decides (core/) ----

enum class OwnerKind { service, lease, container, unit, process, baseline, unknown };
const char* to_string(OwnerKind k);

enum class Source { process, residual, self_report, baseline, unknown };
const char* to_string(Source s);

struct Owner {
  OwnerKind kind = OwnerKind::unknown;
  std::string name;  // service name, lease id, container name, unit, "python3[1234]", ...
  bool operator==(const Owner&) const = default;
  // clang-tidy 14 reads the defaulted <=> as a comparison with a literal 0.
  auto operator<=>(const Owner&) const = default;  // NOLINT(modernize-use-nullptr)
};

struct Candidate {
  int pid = 0;
  std::string name;
  bool operator==(const Candidate&) const = default;
};

// (gpu, owner, bytes, source, since).
struct Holding {
  Owner owner;
  Bytes bytes = 0;
  Source source = Source::unknown;
  std::vector<int> pids;
  MonoTime since{};  // monotonic (Now::wall_of for people)
  std::vector<Candidate> candidates;  // for unknown: the processes that may hold it
};

}  // namespace vramd
