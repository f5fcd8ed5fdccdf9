// `vramd discover`: without any config, finds the model servers that hold GPU memory. For each
// process in the GPUs' process lists it walks up to its parents (vLLM's engine and Ollama's
// runner are children of the process that listens), finds their listening TCP ports, and tries
// each kind's fingerprint there (services/fingerprint.h: GET requests only, short timeouts).
// Prints what it found and, with --write, a config that `vramd serve` takes as it is.
#include <algorithm>
#include <cctype>
#include <chrono>
#include <ctime>
#include <fstream>
#include <iostream>
#include <map>
#include <set>

#include <filesystem>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "core/units.h"
#include "gpu/gpu_reader.h"
#include "host/linux_host_scanner.h"
#include "host/ports.h"
#include "services/discovery.h"

namespace vramd {

namespace {

using nlohmann::json;

using Found = DiscoveredServer;

std::map<std::string, ProbeAnswer> probe_port(int port, int timeout_ms) {
  std::map<std::string, ProbeAnswer> out;
  DaemonAddress addr{fmt::format("http://127.0.0.1:{}", port)};
  for (const auto& path : fingerprint_paths()) {
    auto r = http_request(addr, "GET", path, "", timeout_ms);
    if (!r) {
      // Nothing answers there at all (refused, not HTTP, hung): no use asking further paths.
      if (out.empty()) return out;
      continue;
    }
    out[path] = ProbeAnswer{r->status, r->body.substr(0, std::size_t{256} * 1024)};
  }
  return out;
}

json to_json(const Found& f) {
  return {{"name", f.name},
          {"kind", f.kind.empty() ? json(nullptr) : json(f.kind)},
          {"url", f.url.empty() ? json(nullptr) : json(f.url)},
          {"port", f.port ? json(f.port) : json(nullptr)},
          {"evidence", f.evidence},
          {"pid", f.listener_pid ? json(f.listener_pid) : json(nullptr)},
          {"gpu_pids", f.gpu_pids},
          {"gpus", f.gpus},
          {"bytes", f.bytes},
          {"match", f.match_key.empty() ? json{{"port", f.port}} : json{{f.match_key, f.match_value}}},
          {"cmdline", f.cmdline}};
}

}  // namespace

int cmd_discover(const CommonOptions& opts, bool as_json, const std::string& write_path,
                 int timeout_ms) {
  auto config = load_cli_config(opts);
  if (!config) {
    std::cerr << "vramd discover: " << config.error() << "\n";
    return kExitUsage;
  }
  std::error_code ec;
  if (!write_path.empty() && std::filesystem::exists(write_path, ec)) {
    std::cerr << "vramd discover: " << write_path
              << " exists; it is left as it is (remove it, or --write another file)\n";
    return kExitUsage;
  }
  auto reader = open_gpu_reader(config->gpu.backend);
  if (!reader) {
    std::cerr << "vramd discover: " << reader.error() << "\n";
    return kExitFailure;
  }
  GpuReading reading = (*reader)->read();
  if (!reading.error.empty()) {
    std::cerr << "vramd discover: cannot read the GPUs: " << reading.error << "\n";
    return kExitFailure;
  }
  // Each GPU process: what it holds, where; it and its parents; the ports they listen on.
  DiscoveryInput in;
  for (const auto& g : reading.gpus)
    for (const auto& p : g.processes) {
      auto& held = in.gpu_procs[p.pid];
      held.bytes += p.used.value_or(0);
      held.gpus.insert(g.index);
    }
  LinuxHostScanner scanner("/proc", config->daemon.docker_socket);
  HostScanRequest request;
  for (const auto& [pid, held] : in.gpu_procs) request.pids.push_back(pid);
  for (auto& p : scanner.scan(request).processes) in.processes[p.pid] = std::move(p);
  in.ports_of = listening_ports_of("/proc", chain_pids(in));
  std::map<int, std::map<std::string, ProbeAnswer>> probed;
  for (int port : ports_to_probe(in)) probed[port] = probe_port(port, timeout_ms);
  DiscoveryResult result = assemble_discovery(in, probed);
  const std::vector<Found>& found = result.found;
  const std::vector<Found>& unknown = result.unknown;

  if (!write_path.empty()) {
    std::ofstream out(write_path);
    std::time_t t = std::time(nullptr);
    char when[32];
    std::strftime(when, sizeof when, "%Y-%m-%d %H:%M UTC", std::gmtime(&t));
    out << discovered_config_text(found, when);
    if (!out.good()) {
      std::cerr << "vramd discover: cannot write " << write_path << "\n";
      return kExitFailure;
    }
  }
  if (as_json) {
    json list = json::array();
    for (const auto& f : found) list.push_back(to_json(f));
    json unk = json::array();
    for (const auto& f : unknown) unk.push_back(to_json(f));
    std::cout << json{{"services", list}, {"unknown", unk}}.dump(2) << "\n";
    return kExitOk;
  }
  if (found.empty() && unknown.empty()) {
    std::cout << "No process holds GPU memory now: nothing to discover. Start your services and "
                 "run `vramd discover` again.\n";
    return kExitOk;
  }
  if (!found.empty())
    std::cout << fmt::format("{:<16} {:<10} {:<24} {:>10}  {}\n", "NAME", "KIND", "URL", "VRAM",
                             "MATCHED BY");
  for (const auto& f : found)
    std::cout << fmt::format("{:<16} {:<10} {:<24} {:>10}  {}\n", f.name, f.kind, f.url,
                             format_size(f.bytes),
                             f.match_key.empty() ? fmt::format("port {}", f.port)
                                                 : f.match_key + " " + f.match_value);
  for (const auto& f : unknown)
    std::cout << fmt::format("not a server vramd knows: pid {} ({}) holds {}: {}\n",
                             f.gpu_pids.empty() ? 0 : f.gpu_pids[0], f.cmdline.substr(0, 60),
                             format_size(f.bytes), f.evidence);
  if (!write_path.empty())
    std::cout << "Wrote " << write_path << ": run `vramd serve --config " << write_path << "`.\n";
  else if (!found.empty())
    std::cout << "`vramd discover --write vramd.toml` writes this as a config.\n";
  return kExitOk;
}

}  // namespace vramd
