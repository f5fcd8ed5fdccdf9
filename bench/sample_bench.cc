// One sample, end to end and in parts: the fake NVML read, the /proc scan and attribution, on a
// fake host of 2,000 processes (8 of them on the GPU). Target: the whole sample under 2 ms.
// The same scan over the real /proc runs beside it, so the fake tree's cost per process can be
// compared with the kernel's. bench/run.sh prints the ratios and bench/RESULTS.md records them.
#include <stdlib.h>
#include <unistd.h>

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
#include "sim/fake_gpu_state.h"

namespace vramd {
namespace {

namespace fs = std::filesystem;

constexpr int kProcesses = 2000;
constexpr int kGpuProcesses = 8;
constexpr int kFirstPid = 1000;
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
  switch (i % 10) {
    case 0:
    case 1:  // kernel threads: no command line, root cgroup
      return {fmt::format("kworker/{}:{}", i % 16, i % 3), "", "0::/\n"};
    case 2:
    case 3:
    case 4:  // a login session: shells, editors, tools
      return {
          "bash",
          argv({"/bin/bash", "-c", fmt::format("while sleep 60; do date >> /tmp/log{}; done", i)}),
          "0::/user.slice/user-1000.slice/session-3.scope\n"};
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
  for (int i = 0; i < kProcesses; ++i) {
    int pid = kFirstPid + i;
    Shape s = shape_of(i, pid, rng);
    fs::path dir = root / std::to_string(pid);
    fs::create_directories(dir / "fd");
    int ppid = s.cmdline.empty() ? 2 : (i % 10 < 5 ? kFirstPid + 2 : 1);
    unsigned long long start = 1000 + static_cast<unsigned long long>(i) * 37;
    write_file(dir / "stat",
               fmt::format("{} ({}) S {} {} {} 0 -1 4194560 1234 0 0 0 12 3 0 0 20 0 1 0 {} "
                           "123456789 {} 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 "
                           "0 0 0 0 0 0 0 0 0 0\n",
                           pid, s.comm, ppid, pid, pid, start, 1000 + i));
    unsigned uid = s.cmdline.empty() ? 0 : (i % 10 < 5 || i % 10 == 9 ? 1000 : 0);
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
                           5000 + i, 5000 + i, 1 + i % 8, i));
    write_file(dir / "comm", s.comm + "\n");
    write_file(dir / "cmdline", s.cmdline);
    write_file(dir / "cgroup", s.cgroup);
    if (pid == kOllamaPid) fs::create_symlink("socket:[777001]", dir / "fd" / "3");
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
    auto r = NvmlReader::open({std::string(VRAMD_BUILD_DIR) + "/libnvidia-ml-fake.so"});
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

void scan_bench(benchmark::State& state, const std::string& root) {
  World& w = world();
  Arbiter arbiter(w.config);
  HostScanRequest request = arbiter.scan_request();
  LinuxHostScanner scanner(root, w.no_docker);
  size_t n = 0;
  for (auto _ : state) {
    HostSnapshot snap = scanner.scan(request);
    n = snap.processes.size();
    benchmark::DoNotOptimize(snap);
  }
  count_processes(state, n);
}

void BM_ScanFakeProc(benchmark::State& state) { scan_bench(state, world().proc.string()); }
BENCHMARK(BM_ScanFakeProc)->Unit(benchmark::kMicrosecond);

void BM_ScanRealProc(benchmark::State& state) { scan_bench(state, "/proc"); }
BENCHMARK(BM_ScanRealProc)->Unit(benchmark::kMicrosecond);

// Attribution alone: the Arbiter fed the same sample with the clock one second on each time.
void BM_ArbiterHandleSample(benchmark::State& state) {
  World& w = world();
  Arbiter arbiter(w.config);
  auto reader = w.open_reader();
  LinuxHostScanner scanner(w.proc.string(), w.no_docker);
  SampleTaken sample = take_sample(*reader, scanner, arbiter.scan_request());
  if (sample.host.processes.size() != kProcesses) {
    state.SkipWithError("fake /proc: wrong process count");
    return;
  }
  TimePoint now = system_now();
  for (auto _ : state) {
    now += std::chrono::seconds(1);
    auto actions = arbiter.handle(sample, now);
    benchmark::DoNotOptimize(actions);
  }
  // The services must have been named, or the bench measures a different path.
  const auto& holdings = arbiter.status().gpus.at(0).holdings;
  bool comfy = false, ollama = false;
  for (const auto& h : holdings) {
    comfy |= h.owner.name == "comfyui";
    ollama |= h.owner.name == "ollama";
  }
  if (!comfy || !ollama) state.SkipWithError("services not attributed");
  count_processes(state, sample.host.processes.size());
}
BENCHMARK(BM_ArbiterHandleSample)->Unit(benchmark::kMicrosecond);

// The whole sample, as the daemon takes it each interval: read, scan, attribute.
void BM_FullSample(benchmark::State& state) {
  World& w = world();
  Arbiter arbiter(w.config);
  auto reader = w.open_reader();
  LinuxHostScanner scanner(w.proc.string(), w.no_docker);
  HostScanRequest request = arbiter.scan_request();
  TimePoint now = system_now();
  size_t n = 0;
  for (auto _ : state) {
    now += std::chrono::seconds(1);
    SampleTaken sample = take_sample(*reader, scanner, request);
    n = sample.host.processes.size();
    auto actions = arbiter.handle(sample, now);
    benchmark::DoNotOptimize(actions);
  }
  count_processes(state, n);
}
BENCHMARK(BM_FullSample)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace vramd

BENCHMARK_MAIN();
