#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <boost/asio/signal_set.hpp>

#include "cli/commands.h"
#include "cli/daemon_call.h"
#include "cli/status_printer.h"
#include "daemon/config_file.h"
#include "daemon/daemon.h"
#include "daemon/sampler.h"
#include "host/docker_engine.h"
#include "host/linux_host_scanner.h"
#include "server/json_view.h"

namespace vramd {

namespace {
constexpr const char* kDefaultConfig = "/etc/vramd/vramd.toml";

std::atomic<int> g_stop_signal{0};

void on_stop_signal(int sig) { g_stop_signal = sig; }

// Sleeps `d`, in short steps so that Ctrl-C ends the wait at once.
void sleep_unless_stopped(std::chrono::duration<double> d) {
  auto end = std::chrono::steady_clock::now() +
             std::chrono::duration_cast<std::chrono::steady_clock::duration>(d);
  while (!g_stop_signal && std::chrono::steady_clock::now() < end)
    std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(
        std::chrono::milliseconds(50), end - std::chrono::steady_clock::now()));
}

std::string local_time_text() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

// `vramd status --watch`: a snapshot every interval until Ctrl-C or `count` snapshots. Never falls
// back to a local sample: an unreachable daemon is shown as such, and tried again next time.
int watch_status(const DaemonClient& client, const StatusOptions& o) {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sa.sa_flags = SA_RESETHAND;  // a second Ctrl-C ends it even inside a slow request
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM}) sigaction(sig, &sa, nullptr);
  bool tty = !o.json && isatty(STDOUT_FILENO);
  int code = kExitOk;
  for (int n = 0; (o.count == 0 || n < o.count) && !g_stop_signal; ++n) {
    if (n > 0) sleep_unless_stopped(std::chrono::duration<double>(o.interval_s));
    if (g_stop_signal) break;
    DaemonCall c = client.request("GET", "/v1/status", "", 5000);
    code = c.code;
    if (o.json) {
      // One object per line, for scripts; failures go to stderr and the watch goes on.
      if (c.ok())
        std::cout << c.body.dump() << "\n" << std::flush;
      else
        print_call_error(c);
      continue;
    }
    std::ostringstream body;
    if (c.ok()) {
      try {
        print_status(body, c.body, system_now());
      } catch (const std::exception& e) {
        body.str("");
        body << "vramd: cannot read the daemon's status: " << e.what() << "\n";
        code = kExitFailure;
      }
    } else {
      body << "vramd: " << c.error << "\n";
    }
    std::string header = fmt::format("Every {:g}s: vramd status, {}    {}", o.interval_s,
                                     client.address().url, local_time_text());
    std::cout << watch_frame(header, body.str(), tty, n == 0) << std::flush;
  }
  // Interrupted is how a watch ends: that is success. With --count, the last refresh decides.
  return g_stop_signal ? kExitOk : code;
}

}  // namespace

Result<Config> load_cli_config(const CommonOptions& opts) {
  Result<Config> c = !opts.config_path.empty()                ? load_config(opts.config_path)
                     : std::filesystem::exists(kDefaultConfig) ? load_config(kDefaultConfig)
                                                               : Result<Config>(Config{});
  // No docker_socket in the file: Docker's, else Podman's (rootless, then rootful).
  if (c && !c->daemon.docker_socket_given) {
    const char* xdg = std::getenv("XDG_RUNTIME_DIR");
    c->daemon.docker_socket = find_engine_socket(xdg ? xdg : "");
  }
  return c;
}

DaemonAddress daemon_address(const CommonOptions& opts, const Config& config) {
  if (!opts.url.empty()) return {opts.url};
  if (const char* env = std::getenv("VRAMD_URL"); env && *env && opts.config_path.empty())
    return {env};
  if (!config.path.empty()) {
    // The unix socket needs no token and tells the daemon who we are.
    auto sock = std::filesystem::path(config.daemon.state_dir) / "vramd.sock";
    if (::access(sock.c_str(), W_OK) == 0) return {"unix:" + sock.string()};
    return {"http://" + config.daemon.listen};
  }
  return {"http://127.0.0.1:7100"};
}

int cmd_serve(const CommonOptions& opts) {
  auto config = load_cli_config(opts);
  if (!config) {
    std::cerr << config.error() << "\n";
    return kExitFailure;
  }
  if (config->path.empty())
    spdlog::info("no config file ({} does not exist): running with defaults", kDefaultConfig);
  auto reader = open_gpu_reader(config->gpu.backend);
  if (!reader) {
    std::cerr << "vramd: no way to read the GPUs: " << reader.error() << "\n";
    return kExitFailure;
  }
  boost::asio::io_context io;
  DaemonWorld world;
  world.reader = std::move(*reader);
  world.scanner = std::make_unique<LinuxHostScanner>("/proc", config->daemon.docker_socket);
  Daemon daemon(io, *config, std::move(world));
  if (auto s = daemon.start(); !s) {
    std::cerr << "vramd: " << s.error() << "\n";
    return kExitFailure;
  }
  spdlog::info("vramd {} listening on http://{} and {}", VRAMD_VERSION_STRING,
               config->daemon.listen, daemon.socket_path());
  boost::asio::signal_set signals(io, SIGINT, SIGTERM);
  signals.async_wait([&](auto, int sig) {
    spdlog::info("signal {}: stopping", sig);
    daemon.stop();
    io.stop();
  });
  io.run();
  return kExitOk;
}

// `vramd status --all-hosts`: each host's last snapshot, as the shared store has it.
int all_hosts_status(DaemonClient& client, const StatusOptions& o) {
  DaemonCall c = client.request("GET", "/v1/hosts", "", 5000);
  if (!c.ok()) {
    print_call_error(c);
    return c.reached() ? c.code : kExitUnreachable;
  }
  if (o.json) {
    std::cout << c.body.dump(2) << "\n";
    return kExitOk;
  }
  for (const auto& h : c.body.value("hosts", nlohmann::json::array())) {
    std::cout << fmt::format("== {} ({}, heartbeat {} ago) ==\n", h.value("host", "?"),
                             h.value("state", "?"),
                             format_duration(Duration(h.value("age_ms", int64_t{0}))));
    if (h.contains("status") && h["status"].is_object())
      print_status(std::cout, h["status"], system_now());
    else
      std::cout << "  no status written yet\n";
    std::cout << "\n";
  }
  return kExitOk;
}

int cmd_status(const CommonOptions& opts, const StatusOptions& o) {
  auto config = load_cli_config(opts);
  if (!config) {
    std::cerr << config.error() << "\n";
    return kExitFailure;
  }
  DaemonClient client = DaemonClient::from_config(opts, *config);
  if (o.watch) return watch_status(client, o);
  if (o.all_hosts) return all_hosts_status(client, o);
  nlohmann::json status;
  DaemonCall c = client.request("GET", "/v1/status", "", 5000);
  if (c.ok()) {
    status = std::move(c.body);
  } else if (c.reached()) {
    print_call_error(c);
    return c.code;
  } else {
    // No daemon: take one sample here, through the very same pipeline.
    auto reader = open_gpu_reader(config->gpu.backend);
    if (!reader) {
      std::cerr << "vramd: " << c.error << ", and no GPU can be read directly: " << reader.error()
                << "\n";
      return kExitUnreachable;
    }
    LinuxHostScanner scanner("/proc", config->daemon.docker_socket);
    Arbiter arbiter(*config);
    Now now = read_clocks();
    arbiter.handle(Event{take_sample(**reader, scanner, arbiter.scan_request())}, now);
    status = to_json(arbiter.status(), now);
    std::cerr << "vramd: " << c.error << "; one sample taken directly (no history: since = now).\n";
  }
  if (o.json) {
    std::cout << status.dump(2) << "\n";
  } else {
    print_status(std::cout, status, system_now());
  }
  return kExitOk;
}

}  // namespace vramd
