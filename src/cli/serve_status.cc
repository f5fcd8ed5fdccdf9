#include <unistd.h>

#include <boost/asio/signal_set.hpp>
#include <filesystem>
#include <fmt/format.h>
#include <iostream>
#include <spdlog/spdlog.h>

#include "cli/commands.h"
#include "cli/status_printer.h"
#include "daemon/daemon.h"
#include "daemon/sampler.h"
#include "host/linux_host_scanner.h"
#include "server/json_view.h"

namespace vramd {

namespace {
constexpr const char* kDefaultConfig = "/etc/vramd/vramd.toml";
}

Result<Config> load_cli_config(const CommonOptions& opts) {
  if (!opts.config_path.empty()) return load_config(opts.config_path);
  if (std::filesystem::exists(kDefaultConfig)) return load_config(kDefaultConfig);
  return Config{};
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
  Daemon daemon(io, *config, std::move(*reader),
                std::make_unique<LinuxHostScanner>("/proc", config->daemon.docker_socket));
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

int cmd_status(const CommonOptions& opts, bool json) {
  auto config = load_cli_config(opts);
  if (!config) {
    std::cerr << config.error() << "\n";
    return kExitFailure;
  }
  DaemonAddress addr = daemon_address(opts, *config);
  nlohmann::json status;
  auto reply = http_request(addr, "GET", "/v1/status", "", 5000, config->daemon.token);
  if (reply && reply->status == 200) {
    try {
      status = nlohmann::json::parse(reply->body);
    } catch (const std::exception& e) {
      std::cerr << "vramd: the daemon at " << addr.url << " answered garbage: " << e.what() << "\n";
      return kExitFailure;
    }
  } else if (reply) {
    std::cerr << "vramd: the daemon at " << addr.url << " answered HTTP " << reply->status << ": "
              << reply->body << "\n";
    return kExitFailure;
  } else {
    // No daemon: take one sample here, through the very same pipeline.
    auto reader = open_gpu_reader(config->gpu.backend);
    if (!reader) {
      std::cerr << "vramd: the daemon is not reachable at " << addr.url << " (" << reply.error()
                << "), and no GPU can be read directly: " << reader.error() << "\n";
      return kExitUnreachable;
    }
    LinuxHostScanner scanner("/proc", config->daemon.docker_socket);
    Arbiter arbiter(*config);
    arbiter.handle(Event{take_sample(**reader, scanner, arbiter.scan_request())}, system_now());
    status = to_json(arbiter.status());
    std::cerr << "vramd: the daemon is not reachable at " << addr.url << " (" << reply.error()
              << "); one sample taken directly (no history: since = now).\n";
  }
  if (json) {
    std::cout << status.dump(2) << "\n";
  } else {
    print_status(std::cout, status, system_now());
  }
  return kExitOk;
}

}  // namespace vramd
