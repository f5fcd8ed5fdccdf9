// One sample, end to end and in parts: the fake NVML read, the /proc scan and attribution, on a
// fake host of 2,000 processes (8 of them on the GPU). Target: the whole sample under 2 ms.
// The sample is taken as the daemon takes it: take_sample() asks the scanner for the GPU's pids
// and their ancestors only (HostScanRequest.pids), with the scanner's per-(pid, start ticks)
// cache warm. The old full scan (all_processes = true) runs beside it, so the before/after
// ratio comes from one run. The same scans over the real /proc run too, so the fake tree's cost
// per process can be compared with the kernel's. bench/run.sh prints the ratios and
// bench/RESULTS.md records them.
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/arbiter.h"
#include "core/config.h"
#include "daemon/sampler.h"
#include "gpu/nvml_reader.h"
#include "host/linux_host_scanner.h"
#include "testgpu/fake_gpu_state.h"
#include "test_paths.h"

namespace vramd {
namespace {

namespace fs = std::filesystem;

constexpr int kProcesses = 2000;  // pid 1 (systemd), pid 2 (kthreadd) and 1,998 from kFirstPid
constexpr int kGpuProcesses = 8;
constexpr int kFirstPid = 1000;
constexpr int kUserManagerPid = kFirstPid + 3;  // `systemd --user`: parent of the user's shells
constexpr int kComfyPid = kFirstPid + 1500;   // matched by cmdline
constexpr int kOllamaPid = kFirstPid + 1700;  // matched by its listening port (url only)
constexpr int kOllamaPort = 11434;

void write_file(const fs::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

std::string hex64(std::mt19937_64& rng) {
  return fmt::format("{:016x}{:016x}{:016x}{:016x}", rng(), rng(), rng(), rng());
}

// The cgroup line and command line of process number i, in the shapes a busy GPU host has:
// kernel threads, a login session, systemd services, Docker and Kubernetes containers.
struct Shape {
  std::string comm;
  std::string cmdline;  // NUL-separated, as in /proc
  std::string cgroup;
};

Shape shape_of(int i, int pid, std::mt19937_64& rng) {
  auto argv = [](std::initializer_list<std::string> args) {
    std::string s;
    for (const auto& a : args) s += a + '\0';
    return s;
  };
  if (pid == kComfyPid) {
    return {"python3", argv({"python3", "main.py", "--listen", "127.0.0.1", "--port", "8188"}),
            "0::/system.slice/comfyui.service\n"};
  }
  if (pid == kOllamaPid) {
    return {"ollama", argv({"/usr/local/bin/ollama", "serve"}),
            "0::/system.slice/ollama.service\n"};
  }
  if (pid == kUserManagerPid) {
    return {"systemd", argv({"/usr/lib/systemd/systemd", "--user"}),
            "0::/user.slice/user-1000.slice/user@1000.service/init.scope\n"};
  }
  switch (i % 10) {
    case 0:
    case 1:  // kernel threads: no command line, root cgroup
      return {fmt::format("kworker/{}:{}", i % 16, i % 3), "", "0::/\n"};
    case 2:
    case 3:  // a login session: shells, editors, tools
      return {
          "bash",
          argv({"/bin/bash", "-c", fmt::format("while sleep 60; do date >> /tmp/log{}; done", i)}),
          "0::/user.slice/user-1000.slice/session-3.scope\n"};
    case 4:  // terminal shells of the user's manager: parents of the python3 jobs (case 9)
      return {"bash", argv({"-bash"}),
              "0::/user.slice/user-1000.slice/user@1000.service/app.slice/"
              "app-gnome-terminal.scope\n"};
    case 5:
    case 6:  // systemd services
      return {fmt::format("svc{}", i % 40),
              argv({fmt::format("/usr/sbin/svc{}", i % 40), "--config",
                    fmt::format("/etc/svc{}.conf", i % 40)}),
              fmt::format("0::/system.slice/svc{}.service\n", i % 40)};
    case 7:  // Docker (systemd driver): 20 containers
      return {"node", argv({"node", "/app/server.js", "--port", std::to_string(3000 + i % 20)}),
              fmt::format("0::/system.slice/docker-{}.scope\n", hex64(rng))};
    case 8:  // Kubernetes pods (containerd, not asked of the Docker socket)
      return {"python", argv({"python", "-m", "worker", "--queue", fmt::format("q{}", i % 7)}),
              fmt::format("0::/kubepods.slice/kubepods-burstable.slice/"
                          "kubepods-burstable-pod{:08x}_1234_5678_9abc_def012345678.slice/"
                          "cri-containerd-{}.scope\n",
                          static_cast<unsigned>(i), hex64(rng))};
    default:  // a user service manager's apps
      return {"python3",
              argv({"/usr/bin/python3", "-u", fmt::format("/home/me/jobs/job{}.py", i),
                    "--batch-size", "16", "--model", "/models/llama-3-8b-instruct.Q4_K_M.gguf"}),
              "0::/user.slice/user-1000.slice/user@1000.service/app.slice/"
              "app-gnome-terminal.scope\n"};
  }
}

// The parent of process number i: realistic chains, so the scan of a GPU pid walks them.
//   pid 1 systemd -> services, containers, the user's manager (kUserManagerPid), session shells
//   pid 2 kthreadd -> kernel threads
//   systemd --user -> bash (case 4) -> python3 job (case 9, the GPU jobs): 4 deep
int parent_of(int i, int pid, const Shape& s) {
  if (pid == kComfyPid || pid == kOllamaPid || pid == kUserManagerPid) return 1;
  if (s.cmdline.empty()) return 2;
  switch (i % 10) {
    case 2:
    case 3:
    case 4:
      return kUserManagerPid;
    case 9:
      return kFirstPid + i - 5;  // the case-4 bash just before it
    default:
      return 1;
  }
}

void write_process(const fs::path& root, int i, int pid, int ppid, const Shape& s) {
  fs::path dir = root / std::to_string(pid);
  fs::create_directories(dir / "fd");
  // i < 0: pids 1 and 2, started first
  unsigned long long start = i < 0 ? static_cast<unsigned long long>(3 + i)
                                   : 1000 + static_cast<unsigned long long>(i) * 37;
  int n = std::max(i, 0);
  write_file(dir / "stat",
             fmt::format("{} ({}) S {} {} {} 0 -1 4194560 1234 0 0 0 12 3 0 0 20 0 1 0 {} "
                         "123456789 {} 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 "
                         "0 0 0 0 0 0 0 0 0 0\n",
                         pid, s.comm, ppid, pid, pid, start, 1000 + n));
  unsigned uid = s.cmdline.empty() || ppid == 0 ? 0 : (i % 10 < 5 || i % 10 == 9 ? 1000 : 0);
  write_file(dir / "status",
             fmt::format("Name:\t{}\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t{}\nNgid:\t0\n"
                         "Pid:\t{}\nPPid:\t{}\nTracerPid:\t0\nUid:\t{}\t{}\t{}\t{}\n"
                         "Gid:\t{}\t{}\t{}\t{}\nFDSize:\t64\nGroups:\t{}\n"
                         "VmPeak:\t  123456 kB\nVmSize:\t  120000 kB\nVmLck:\t       0 kB\n"
                         "VmHWM:\t   {} kB\nVmRSS:\t   {} kB\nRssAnon:\t    2000 kB\n"
                         "RssFile:\t    3000 kB\nVmData:\t   10000 kB\nVmStk:\t     132 kB\n"
                         "VmExe:\t     100 kB\nVmLib:\t    5000 kB\nVmPTE:\t      80 kB\n"
                         "VmSwap:\t       0 kB\nThreads:\t{}\nSigQ:\t0/514000\n"
                         "SigPnd:\t0000000000000000\nShdPnd:\t0000000000000000\n"
                         "SigBlk:\t0000000000000000\nSigIgn:\t0000000000001000\n"
                         "SigCgt:\t0000000180000002\nCapInh:\t0000000000000000\n"
                         "Cpus_allowed:\tffff\nCpus_allowed_list:\t0-15\n"
                         "voluntary_ctxt_switches:\t{}\nnonvoluntary_ctxt_switches:\t3\n",
                         s.comm, pid, pid, ppid, uid, uid, uid, uid, uid, uid, uid, uid, uid,
                         5000 + n, 5000 + n, 1 + n % 8, n));
  write_file(dir / "comm", s.comm + "\n");
  write_file(dir / "cmdline", s.cmdline);
  write_file(dir / "cgroup", s.cgroup);
  if (pid == kOllamaPid) fs::create_symlink("socket:[777001]", dir / "fd" / "3");
}

// A /proc tree with kProcesses processes, /proc/stat (btime), meminfo and net/tcp.
void write_fake_proc(const fs::path& root) {
  std::mt19937_64 rng(42);
  fs::create_directories(root / "net");
  write_file(root / "stat", "cpu  1 2 3 4 5 6 7 0 0 0\nintr 0\nctxt 0\nbtime 1764400000\n");
  write_file(root / "meminfo",
             "MemTotal:       131072000 kB\nMemFree:        65536000 kB\n"
             "MemAvailable:   98304000 kB\nBuffers:          102400 kB\n");
  std::string tcp_header =
      "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  "
      "timeout inode\n";
  write_file(root / "net" / "tcp",
             tcp_header + fmt::format("   0: 0100007F:{:04X} 00000000:0000 0A 00000000:00000000 "
                                      "00:00000000 00000000  1000        0 777001 1 0 100 0 0 "
                                      "10 0\n",
                                      kOllamaPort));
  write_file(root / "net" / "tcp6", tcp_header);
  write_process(root, -1, 1, 0,
                {"systemd", std::string("/sbin/init\0splash\0", 18), "0::/init.scope\n"});
  write_process(root, -2, 2, 0, {"kthreadd", "", "0::/\n"});
  for (int i = 0; i < kProcesses - 2; ++i) {
    int pid = kFirstPid + i;
    Shape s = shape_of(i, pid, rng);
    write_process(root, i, pid, parent_of(i, pid, s), s);
  }
}

const char* kConfig = R"(
[daemon]
listen = "127.0.0.1:7100"
state_dir = "/tmp"

[gpu]
backend = "nvml"

[services.comfyui]
kind = "comfyui"
url = "http://127.0.0.1:8188"
match = { cmdline = "main\\.py.*--port 8188" }

[services.ollama]
kind = "ollama"
url = "http://127.0.0.1:11434"

[services.whisper]
kind = "generic_http"
url = "http://127.0.0.1:9000"
match = { unit = "whisper.service" }
)";

// Everything one benchmark needs, built once per process and shared.
struct World {
  fs::path dir;
  fs::path proc;
  std::string state;
  std::string no_docker;
  Config config;

  World() {
    char tmpl[] = "/tmp/vramd-sample-bench-XXXXXX";
    if (!mkdtemp(tmpl)) std::abort();
    dir = tmpl;
    proc = dir / "proc";
    state = (dir / "gpu.json").string();
    no_docker = (dir / "docker.sock").string();  // absent: the engine is unreachable
    write_fake_proc(proc);
    auto s = make_fake_gpu_state({{"NVIDIA GeForce RTX 4090", 24 * GiB}});
    s["gpus"][0]["used"] = 400 * MiB;
    if (!write_fake_gpu_state(state, s).ok()) std::abort();
    // Eight GPU processes: the two services and six jobs spread over the table.
    std::vector<int> pids = {kComfyPid, kOllamaPid};
    for (int k = 0; pids.size() < kGpuProcesses; ++k) pids.push_back(kFirstPid + 9 + k * 190);
    for (size_t k = 0; k < pids.size(); ++k) {
      if (!add_fake_process(state, 0, pids[k], (k + 1) * 512 * MiB).ok()) std::abort();
    }
    setenv("FAKE_NVML_STATE", state.c_str(), 1);
    auto c = parse_config(kConfig, "bench.toml");
    if (!c) {
      fmt::print(stderr, "config: {}\n", c.error());
      std::abort();
    }
    config = *c;
  }
  ~World() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }

  std::unique_ptr<NvmlReader> open_reader() const {
    auto r = NvmlReader::open({vramd::test_paths::build_dir() + "/libnvidia-ml-fake.so"});
    if (!r) {
      fmt::print(stderr, "nvml: {}\n", r.error());
      std::abort();
    }
    return std::move(*r);
  }
};

World& world() {
  static World w;
  return w;
}

// Reports the time per process as "per_proc" (seconds, shown in the time unit of the counter).
void count_processes(benchmark::State& state, size_t processes) {
  state.counters["procs"] = static_cast<double>(processes);
  state.counters["per_proc"] = benchmark::Counter(
      static_cast<double>(processes),
      benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

// The daemon keeps one reader open and calls read() each sample.
void BM_NvmlRead(benchmark::State& state) {
  auto reader = world().open_reader();
  for (auto _ : state) {
    GpuReading r = reader->read();
    if (!r.error.empty() || r.gpus.size() != 1 || r.gpus[0].processes.size() != kGpuProcesses) {
      state.SkipWithError(("fake NVML read: " + r.error).c_str());
      break;
    }
    benchmark::DoNotOptimize(r);
  }
}
BENCHMARK(BM_NvmlRead)->Unit(benchmark::kMicrosecond);

// dlopen + first read + dlclose: what a one-shot `vramd status` pays once.
void BM_NvmlOpenAndRead(benchmark::State& state) {
  World& w = world();
  for (auto _ : state) {
    auto reader = w.open_reader();
    GpuReading r = reader->read();
    benchmark::DoNotOptimize(r);
  }
}
BENCHMARK(BM_NvmlOpenAndRead)->Unit(benchmark::kMicrosecond);

// The services must have been named, or the bench measures a different path.
bool services_attributed(const Arbiter& arbiter) {
  const auto& holdings = arbiter.status().gpus.at(0).holdings;
  bool comfy = false, ollama = false;
  for (const auto& h : holdings) {
    comfy |= h.owner.name == "comfyui";
    ollama |= h.owner.name == "ollama";
  }
  return comfy && ollama;
}

// The request the daemon makes (Arbiter::scan_request), as the old full scan or with pids.
HostScanRequest request_for(const std::vector<int>& pids, bool all_processes) {
  HostScanRequest r = Arbiter(world().config).scan_request();
  r.pids = pids;
  r.all_processes = all_processes;
  return r;
}

// The GPU's pids on the fake host, as the fake NVML names them.
std::vector<int> fake_gpu_pids() {
  GpuReading r = world().open_reader()->read();
  std::vector<int> pids;
  for (const auto& g : r.gpus)
    for (const auto& p : g.processes) pids.push_back(p.pid);
  return pids;
}

// Stand-ins for GPU pids on the real host: the 8 newest processes (this one among them), so
// their chains run through whatever shells and session managers started them.
std::vector<int> real_stand_in_pids() {
  std::vector<int> pids;
  std::error_code ec;
  for (fs::directory_iterator it("/proc", ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!name.empty() && std::all_of(name.begin(), name.end(), [](unsigned char c) { return std::isdigit(c); }))
      pids.push_back(std::stoi(name));
  }
  std::sort(pids.rbegin(), pids.rend());
  pids.resize(std::min<size_t>(pids.size(), kGpuProcesses - 1));
  pids.push_back(getpid());
  return pids;
}

// The scan alone. Warm: one scanner, its cache filled by a first scan, as in the daemon.
void scan_bench(benchmark::State& state, const std::string& root, const HostScanRequest& request) {
  LinuxHostScanner scanner(root, world().no_docker);
  size_t n = scanner.scan(request).processes.size();
  for (auto _ : state) {
    HostSnapshot snap = scanner.scan(request);
    n = snap.processes.size();
    benchmark::DoNotOptimize(snap);
  }
  count_processes(state, n);
}

// Before the fix: every process read (what all_processes = true still does).
void BM_ScanFakeProcAll(benchmark::State& state) {
  scan_bench(state, world().proc.string(), request_for({}, true));
}
BENCHMARK(BM_ScanFakeProcAll)->Unit(benchmark::kMicrosecond);

// After: the 8 GPU pids and their ancestors (16 processes), static fields from the cache.
void BM_ScanFakeProcGpu(benchmark::State& state) {
  scan_bench(state, world().proc.string(), request_for(fake_gpu_pids(), false));
}
BENCHMARK(BM_ScanFakeProcGpu)->Unit(benchmark::kMicrosecond);

// After, cache cold: a new scanner each time (the first sample, or every GPU process new).
void BM_ScanFakeProcGpuCold(benchmark::State& state) {
  World& w = world();
  HostScanRequest request = request_for(fake_gpu_pids(), false);
  size_t n = 0;
  for (auto _ : state) {
    LinuxHostScanner scanner(w.proc.string(), w.no_docker);
    HostSnapshot snap = scanner.scan(request);
    n = snap.processes.size();
    benchmark::DoNotOptimize(snap);
  }
  count_processes(state, n);
}
BENCHMARK(BM_ScanFakeProcGpuCold)->Unit(benchmark::kMicrosecond);

void BM_ScanRealProcAll(benchmark::State& state) {
  scan_bench(state, "/proc", request_for({}, true));
}
BENCHMARK(BM_ScanRealProcAll)->Unit(benchmark::kMicrosecond);

void BM_ScanRealProcGpu(benchmark::State& state) {
  scan_bench(state, "/proc", request_for(real_stand_in_pids(), false));
}
BENCHMARK(BM_ScanRealProcGpu)->Unit(benchmark::kMicrosecond);

// What a known process costs a sample, file by file, side by side: the statm pread (its resident
// size) and the cmdline pread the scan added so that an exec is seen (a process that runs
// another program under the same pid and start ticks). Same pids as BM_ScanRealProcGpu.
void kept_pread_bench(benchmark::State& state, const char* file) {
  std::vector<int> fds;
  for (int pid : real_stand_in_pids()) {
    int fd = ::open(fmt::format("/proc/{}/{}", pid, file).c_str(), O_RDONLY | O_CLOEXEC);
    if (fd >= 0) fds.push_back(fd);
  }
  char buf[4096];
  for (auto _ : state) {
    for (int fd : fds) benchmark::DoNotOptimize(::pread(fd, buf, sizeof buf, 0));
  }
  for (int fd : fds) ::close(fd);
  count_processes(state, fds.size());
}
void BM_KeptPreadStatm(benchmark::State& state) { kept_pread_bench(state, "statm"); }
BENCHMARK(BM_KeptPreadStatm)->Unit(benchmark::kMicrosecond);
void BM_KeptPreadCmdline(benchmark::State& state) { kept_pread_bench(state, "cmdline"); }
BENCHMARK(BM_KeptPreadCmdline)->Unit(benchmark::kMicrosecond);

// Attribution alone: the Arbiter fed the same sample with the clock one second on each time.
void attribution_bench(benchmark::State& state, bool all_processes, size_t expected) {
  World& w = world();
  Arbiter arbiter(w.config);
  auto reader = w.open_reader();
  LinuxHostScanner scanner(w.proc.string(), w.no_docker);
  HostScanRequest request = arbiter.scan_request();
  request.all_processes = all_processes;
  SampleTaken sample = take_sample(*reader, scanner, request);
  if (expected && sample.host.processes.size() != expected) {
    state.SkipWithError("fake /proc: wrong process count");
    return;
  }
  MonoTime now = mono_now();
  for (auto _ : state) {
    now += std::chrono::seconds(1);
    auto actions = arbiter.handle(sample, now);
    benchmark::DoNotOptimize(actions);
  }
  if (!services_attributed(arbiter)) state.SkipWithError("services not attributed");
  count_processes(state, sample.host.processes.size());
}

// Before: a sample holding all 2,000 processes.
void BM_ArbiterHandleSampleAll(benchmark::State& state) {
  attribution_bench(state, true, kProcesses);
}
BENCHMARK(BM_ArbiterHandleSampleAll)->Unit(benchmark::kMicrosecond);

// After: the sample take_sample builds now (GPU pids and their ancestors).
void BM_ArbiterHandleSampleGpu(benchmark::State& state) { attribution_bench(state, false, 0); }
BENCHMARK(BM_ArbiterHandleSampleGpu)->Unit(benchmark::kMicrosecond);

// The whole sample, as the daemon takes it each interval: read, scan, attribute. take_sample()
// adds the GPU's pids to the request; one scanner and one Arbiter live across samples.
void full_sample_bench(benchmark::State& state, bool all_processes) {
  World& w = world();
  Arbiter arbiter(w.config);
  auto reader = w.open_reader();
  LinuxHostScanner scanner(w.proc.string(), w.no_docker);
  HostScanRequest request = arbiter.scan_request();
  request.all_processes = all_processes;
  MonoTime now = mono_now();
  size_t n = 0;
  for (auto _ : state) {
    now += std::chrono::seconds(1);
    SampleTaken sample = take_sample(*reader, scanner, request);
    n = sample.host.processes.size();
    auto actions = arbiter.handle(sample, now);
    benchmark::DoNotOptimize(actions);
  }
  if (!services_attributed(arbiter)) state.SkipWithError("services not attributed");
  count_processes(state, n);
}

// Now: what the daemon does (src/daemon/daemon.cc: take_sample with Arbiter::scan_request()).
void BM_FullSample(benchmark::State& state) { full_sample_bench(state, false); }
BENCHMARK(BM_FullSample)->Unit(benchmark::kMicrosecond);

// Before the fix: the same sample with every process read (all_processes = true).
void BM_FullSampleAllProcesses(benchmark::State& state) { full_sample_bench(state, true); }
BENCHMARK(BM_FullSampleAllProcesses)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace vramd

BENCHMARK_MAIN();
