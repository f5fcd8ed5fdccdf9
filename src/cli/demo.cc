// `vramd demo`: the daemon on the test GPU (a simulated 24 GiB card served by the fake
// libnvidia-ml) with stand-in processes for a few services, so a newcomer sees named owners on a
// machine without a GPU.
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <csignal>

#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <filesystem>
#include <fmt/format.h>
#include <iostream>
#include <sstream>

#include "cli/commands.h"
#include "host/free_port.h"
#include "cli/status_printer.h"
#include "daemon/daemon.h"
#include "daemon/sampler.h"
#include "host/linux_host_scanner.h"
#include "server/json_view.h"
#include "testgpu/fake_gpu_state.h"

namespace vramd {

namespace fs = std::filesystem;

namespace {

constexpr const char* kStandInEnv = "VRAMD_DEMO_STAND_IN";      // comm to take
constexpr const char* kStandInPortEnv = "VRAMD_DEMO_LISTEN";  // port to listen on, optional

fs::path self_exe() { return fs::read_symlink("/proc/self/exe"); }

// Starts a stand-in: this same binary, with `argv` as its command line and `comm` as its name.
pid_t spawn_stand_in(const std::string& comm, const std::vector<std::string>& argv, int port) {
  pid_t pid = fork();
  if (pid != 0) return pid;
  // None of the demo daemon's sockets: a stand-in holding its listening ports would look like a
  // server on them (discovery would ask the ComfyUI proxy's port and find "ComfyUI").
  if (syscall(SYS_close_range, 3u, ~0u, 0u) != 0)
    for (int fd = 3; fd < 65536; ++fd) close(fd);
  setenv(kStandInEnv, comm.c_str(), 1);
  if (port) setenv(kStandInPortEnv, std::to_string(port).c_str(), 1);
  std::vector<char*> args;
  args.reserve(argv.size() + 1);
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::string exe = self_exe();
  execv(exe.c_str(), args.data());
  _exit(127);
}


bool listen_address_free(const std::string& host_port) {
  boost::asio::io_context io;
  HttpServer probe(io, nullptr);
  return probe.listen_tcp(host_port).ok();
}

}  // namespace

void maybe_run_demo_stand_in() {
  const char* comm = std::getenv(kStandInEnv);
  if (!comm) return;
  prctl(PR_SET_NAME, comm);
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (getppid() == 1) _exit(0);  // the demo is already gone
  if (const char* port = std::getenv(kStandInPortEnv)) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(std::atoi(port)));
    if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || listen(fd, 4) != 0)
      _exit(1);
  }
  for (;;) pause();
}

int cmd_demo(const DemoOptions& opts) {
  fs::path lib = self_exe().parent_path() / "libnvidia-ml-fake.so";
  if (const char* env = std::getenv("VRAMD_NVML_LIBRARY")) lib = env;
  if (!fs::exists(lib)) {
    std::cerr << "vramd demo: the test GPU library " << lib
              << " is missing; build it with `make` (it is built next to vramd).\n";
    return kExitFailure;
  }
  char dir_template[] = "/tmp/vramd-demo-XXXXXX";
  if (!mkdtemp(dir_template)) {
    std::cerr << "vramd demo: cannot create a temporary directory\n";
    return kExitFailure;
  }
  fs::path dir = dir_template;
  std::string state = (dir / "gpu.json").string();

  auto gpu = make_fake_gpu_state({{"NVIDIA GeForce RTX 3090", 24 * GiB}});
  gpu["gpus"][0]["uuid"] = "GPU-5e1d2c3b-0a9f-4e8d-b7c6-demo00000000";
  gpu["gpus"][0]["used"] = 420 * MiB;  // driver and display: the baseline
  gpu["gpus"][0]["utilization"] = 3;
  if (auto s = write_fake_gpu_state(state, gpu); !s) {
    std::cerr << "vramd demo: " << s.error() << "\n";
    return kExitFailure;
  }

  // A fake ComfyUI (16 GiB, idle) and a fake Ollama that speak the real servers' APIs and hold
  // their "VRAM" in the simulated GPU; a batch job stand-in comes and goes.
  fs::path fake_server = self_exe().parent_path() / "fake-gpu-server";
  if (!fs::exists(fake_server)) {
    std::cerr << "vramd demo: " << fake_server << " is missing; build it with `make`.\n";
    return kExitFailure;
  }
  int comfy_port = free_tcp_port();
  int ollama_port = free_tcp_port();
  int speaches_port = free_tcp_port();
  auto spawn_fake = [&](const std::vector<std::string>& args) {
    pid_t pid = fork();
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGTERM);
      int devnull = open("/dev/null", O_WRONLY);
      dup2(devnull, 1);
      std::vector<char*> argv;
      argv.reserve(args.size() + 1);
      for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    return pid;
  };
  std::vector<pid_t> children;
  children.push_back(spawn_fake({fake_server.string(), "--kind", "comfyui", "--port",
                                 std::to_string(comfy_port), "--state", state, "--model-bytes",
                                 "16GiB", "--unload-delay", "1500ms"}));
  children.push_back(spawn_fake({fake_server.string(), "--kind", "ollama", "--port",
                                 std::to_string(ollama_port), "--state", state, "--model-bytes",
                                 "5GiB", "--model", "llama3.1:8b"}));
  // A fake speaches (Whisper) that no config names: `[daemon] discover` finds it by its answers.
  children.push_back(spawn_fake({fake_server.string(), "--kind", "speaches", "--port",
                                 std::to_string(speaches_port), "--state", state, "--model-bytes",
                                 "1GiB", "--model", "Systran/faster-whisper-small"}));

  Config config;
  config.path = "(demo)";
  config.daemon.listen = opts.listen;
  config.daemon.state_dir = dir.string();
  config.daemon.probe_interval = std::chrono::seconds(1);
  config.daemon.discover = true;  // speaches is in no config: it shows up as discovered
  config.daemon.discover_interval = std::chrono::seconds(5);
  config.gpu.backend = "nvml";
  ServiceConfig comfy_svc;
  comfy_svc.name = "comfyui";
  comfy_svc.kind = "comfyui";
  comfy_svc.url = fmt::format("http://127.0.0.1:{}", comfy_port);  // matched by its port
  comfy_svc.unload_after_idle = std::chrono::seconds(60);
  comfy_svc.proxy.listen = "127.0.0.1:0";  // ComfyUI through vramd: its requests and /ws count
  ServiceConfig ollama_svc;
  ollama_svc.name = "ollama";
  ollama_svc.kind = "ollama";
  ollama_svc.url = fmt::format("http://127.0.0.1:{}", ollama_port);
  // A service vramd runs itself, which crashes now and then (a CUDA OOM after 20 s), so that
  // restarts and `vramd doctor` have something to show.
  ServiceConfig flaky_svc;
  flaky_svc.name = "whisper";
  flaky_svc.kind = "process";
  flaky_svc.start = {
      "/bin/sh", "-c",
      "echo 'Loading faster-whisper large-v3 on cuda:0'; sleep 20; "
      "echo 'Traceback (most recent call last):'; "
      "echo '  File \"/opt/whisper/server.py\", line 88, in transcribe'; "
      "echo 'torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a "
      "total capacity of 24.00 GiB of which 1.12 GiB is free.'; exit 1"};
  flaky_svc.max_restarts = 1000;
  flaky_svc.restart_window = std::chrono::hours(1);
  config.services = {comfy_svc, ollama_svc, flaky_svc};
  // The request path: one OpenAI-compatible front door (Ollama's models), on a free port.
  config.proxy.listen = "127.0.0.1:0";
  config.proxy.aliases = {{"gpt-4o-mini", "llama3.1:8b"}};

  // VRAMD_DEMO_TOKEN: every API request then needs "Authorization: Bearer TOKEN"; the browser
  // tests drive the dashboard's token form with it.
  if (const char* token = std::getenv("VRAMD_DEMO_TOKEN"); token && *token) config.daemon.token = token;

  setenv("VRAMD_NVML_LIBRARY", lib.c_str(), 1);
  setenv("FAKE_NVML_STATE", state.c_str(), 1);
  auto reader = open_gpu_reader("nvml");
  if (!reader) {
    std::cerr << "vramd demo: " << reader.error() << "\n";
    return kExitFailure;
  }

  // Port taken (another demo or a real vramd): take any free one rather than give up.
  if (!listen_address_free(config.daemon.listen)) {
    std::cerr << "vramd demo: " << config.daemon.listen << " is taken; using a free port\n";
    config.daemon.listen = "127.0.0.1:0";
  }
  boost::asio::io_context io;
  DaemonWorld world;
  world.reader = std::move(*reader);
  world.scanner = std::make_unique<LinuxHostScanner>("/proc", "");
  Daemon daemon(io, config, std::move(world));
  if (auto s = daemon.start(); !s) {
    std::cerr << "vramd demo: " << s.error() << "\n";
    for (pid_t c : children) kill(c, SIGTERM);
    return kExitFailure;
  }
  daemon.service_command("whisper", Command::start);
  std::string url = fmt::format("http://127.0.0.1:{}", daemon.tcp_port());
  std::cout << "vramd demo: a simulated 24 GiB GPU with stand-ins for ComfyUI, Ollama, speaches and a batch job.\n"
            << "  Dashboard: " << url << "/\n"
            << "  API:       " << url << "/v1/status\n"
            << "  CLI:       vramd status --url " << url << "\n"
            << "  GPU state: " << state << " (edit it, or let the demo change it)\n"
            << "  Free now:  vramd free comfyui --url " << url
            << "  (or wait: comfyui unloads after 60 s idle)\n"
            << "  Events:    vramd events -f --url " << url << "\n"
            << "  Front door: http://127.0.0.1:" << daemon.front_door_port()
            << "/v1  (OpenAI-compatible; model llama3.1:8b, alias gpt-4o-mini)\n"
            << "  ComfyUI via vramd: http://127.0.0.1:" << daemon.service_proxy_port("comfyui")
            << "/  (requests and /ws through vramd's proxy)\n"
            << (config.daemon.token.empty() ? "" : "  Token:     required (VRAMD_DEMO_TOKEN)\n")
            << "  Crashes:   vramd doctor --url " << url << "  (whisper, run by vramd, crashes every ~20 s)\n"
            << "  Discovery: a speaches server no config names shows up as `speaches` (discovered)\n"
            << "Press Ctrl-C to stop.\n\n"
            << std::flush;

  // A batch job comes and goes, so the status changes while you watch.
  pid_t job = 0;
  int tick = 0;
  boost::asio::steady_timer timer(io);
  std::function<void()> step = [&] {
    ++tick;
    if (tick == 4) {
      std::ostringstream out;
      print_status(out, to_json(daemon.arbiter().status(), daemon.now()), system_now());
      std::cout << out.str() << "\n" << std::flush;
    }
    if (tick % 20 == 4 && !job) {
      job = spawn_stand_in("python3", {"python3", "train.py", "--epochs", "3"}, 0);
    } else if (tick % 20 == 5 && job) {
      // A tick after the spawn: by now the stand-in has taken its name, so vramd never sees the
      // job as "vramd[pid]" (the name before exec and prctl).
      (void)add_fake_process(state, 0, job, 1200 * MiB);
      std::cout << "demo: a batch job (python3 train.py, pid " << job << ") took 1.2 GiB\n" << std::flush;
    } else if (tick % 20 == 15 && job) {
      (void)remove_fake_process(state, job);
      kill(job, SIGTERM);
      waitpid(job, nullptr, 0);
      std::cout << "demo: the batch job finished\n" << std::flush;
      job = 0;
    }
    if (opts.duration_s > 0 && tick >= opts.duration_s) {
      daemon.stop();
      io.stop();
      return;
    }
    timer.expires_after(std::chrono::seconds(1));
    timer.async_wait([&](auto ec) {
      if (!ec) step();
    });
  };
  step();

  boost::asio::signal_set signals(io, SIGINT, SIGTERM);
  signals.async_wait([&](auto, int) {
    daemon.stop();
    io.stop();
  });
  io.run();

  if (job) children.push_back(job);
  for (pid_t c : children) kill(c, SIGTERM);
  for (pid_t c : children) waitpid(c, nullptr, 0);
  std::error_code ec;
  fs::remove_all(dir, ec);
  std::cout << "vramd demo: stopped.\n";
  return kExitOk;
}

}  // namespace vramd
