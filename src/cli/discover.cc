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
#include "services/fingerprint.h"

namespace vramd {

namespace {

using nlohmann::json;

struct Found {
  std::string name;
  std::string kind;  // "" when no fingerprint matched
  std::string evidence;
  std::string url;
  int port = 0;
  int listener_pid = 0;
  std::vector<int> gpu_pids;
  std::set<unsigned> gpus;
  Bytes bytes = 0;
  std::string match_key, match_value;  // "container" | "compose_service" | "unit" | "" (its port)
  std::string cmdline;
};

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
    out[path] = ProbeAnswer{r->status, r->body.substr(0, 256 * 1024)};
  }
  return out;
}

// A TOML key for a service: letters, digits, '-' and '_' (bare keys need no quoting).
std::string key_of(std::string name) {
  for (char& c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_') c = '-';
  return name.empty() ? std::string("service") : name;
}

std::string toml_string(const std::string& s) { return json(s).dump(); }  // JSON escapes are TOML's

// How the service is told apart, best first: its container, its compose service, its unit; else
// its port, which its url already names.
void name_and_match(Found& f, const ProcessInfo* p) {
  f.name = f.kind.empty() ? "unknown" : f.kind;
  if (!p) return;
  const CgroupIdentity& cg = p->cgroup;
  if (!cg.container_name.empty()) {
    f.name = cg.container_name;
    f.match_key = "container";
    f.match_value = cg.container_name;
  } else if (!cg.compose_service.empty()) {
    f.name = cg.compose_service;
    f.match_key = "compose_service";
    f.match_value = cg.compose_service;
  } else if (cg.kind == CgroupIdentity::Kind::unit && !cg.unit.empty() &&
             cg.unit.size() > 8 && cg.unit.compare(cg.unit.size() - 8, 8, ".service") == 0) {
    f.name = cg.unit.substr(0, cg.unit.size() - 8);
    f.match_key = "unit";
    f.match_value = cg.unit;
  }
}

std::string config_text(const std::vector<Found>& found) {
  std::time_t t = std::time(nullptr);
  char when[32];
  std::strftime(when, sizeof when, "%Y-%m-%d %H:%M UTC", std::gmtime(&t));
  std::string out = fmt::format(
      "# Written by `vramd discover` on {}: the GPU services it found.\n"
      "# Run it with `vramd serve --config THIS_FILE`; docs/config.md explains every key.\n",
      when);
  for (const auto& f : found) {
    if (f.kind.empty()) continue;
    out += fmt::format("\n[services.{}]\nkind = {}\nurl = {}\n", key_of(f.name), toml_string(f.kind),
                       toml_string(f.url));
    if (!f.match_key.empty())
      out += fmt::format("match = {{ {} = {} }}\n", f.match_key, toml_string(f.match_value));
    else
      out += fmt::format("# matched by its port {} (pid {}: {})\n", f.port, f.listener_pid,
                         f.cmdline.substr(0, 100));
    out += fmt::format("# found by {}; held {} on GPU {}\n", f.evidence, format_size(f.bytes),
                       fmt::join(f.gpus, ", "));
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
  // Each GPU process: what it holds, where.
  std::map<int, std::pair<Bytes, std::set<unsigned>>> gpu_procs;
  for (const auto& g : reading.gpus)
    for (const auto& p : g.processes) {
      auto& [bytes, gpus] = gpu_procs[p.pid];
      bytes += p.used.value_or(0);
      gpus.insert(g.index);
    }

  LinuxHostScanner scanner("/proc", config->daemon.docker_socket);
  HostScanRequest request;
  for (const auto& [pid, held] : gpu_procs) request.pids.push_back(pid);
  HostSnapshot host = scanner.scan(request);
  std::map<int, const ProcessInfo*> by_pid;
  for (const auto& p : host.processes) by_pid[p.pid] = &p;
  // Each GPU process and its parents (nearest first), up to init.
  std::map<int, std::vector<int>> chains;
  std::vector<int> candidates;
  for (const auto& [pid, held] : gpu_procs) {
    std::vector<int>& chain = chains[pid];
    for (int at = pid; at > 1 && chain.size() < 16;) {
      chain.push_back(at);
      candidates.push_back(at);
      auto it = by_pid.find(at);
      if (it == by_pid.end()) break;
      at = it->second->ppid;
    }
  }
  std::sort(candidates.begin(), candidates.end());
  candidates.erase(std::unique(candidates.begin(), candidates.end()), candidates.end());
  auto listeners = netlink_tcp_listeners();
  std::vector<TcpListener> sockets = listeners ? *listeners : proc_tcp_listeners("/proc");
  std::vector<int> ports;
  for (const auto& l : sockets) ports.push_back(l.port);
  std::sort(ports.begin(), ports.end());
  ports.erase(std::unique(ports.begin(), ports.end()), ports.end());
  std::map<int, std::vector<int>> ports_of;  // pid -> ports it listens on
  for (const auto& [port, pid] : match_listeners("/proc", ports, sockets, &candidates))
    ports_of[pid].push_back(port);

  // One entry per server found: the nearest process in a chain that listens on a port where a
  // fingerprint matches. Several GPU processes of one server share it.
  std::map<int, Found> by_port;
  std::map<int, std::map<std::string, ProbeAnswer>> probed;
  std::vector<Found> unknown;
  for (const auto& [pid, chain] : chains) {
    const auto& [bytes, gpus] = gpu_procs.at(pid);
    Found* hit = nullptr;
    std::vector<int> tried;
    for (int at : chain) {
      for (int port : ports_of[at]) {
        tried.push_back(port);
        if (!probed.count(port)) probed[port] = probe_port(port, timeout_ms);
        auto fp = identify_server(probed[port]);
        if (!fp) continue;
        Found& f = by_port[port];
        if (f.kind.empty()) {
          f.kind = fp->kind;
          f.evidence = fp->evidence;
          f.port = port;
          f.url = fmt::format("http://127.0.0.1:{}", port);
          f.listener_pid = at;
          const ProcessInfo* p = by_pid.count(at) ? by_pid.at(at) : nullptr;
          f.cmdline = p ? p->cmdline : "";
          name_and_match(f, p);
        }
        hit = &f;
        break;
      }
      if (hit) break;
    }
    Found* into = hit;
    if (!into) {
      Found u;
      u.evidence = tried.empty() ? "no listening port" : fmt::format("no fingerprint on port {}", fmt::join(tried, ", "));
      const ProcessInfo* p = by_pid.count(pid) ? by_pid.at(pid) : nullptr;
      u.cmdline = p ? p->cmdline : "";
      name_and_match(u, p);
      unknown.push_back(std::move(u));
      into = &unknown.back();
    }
    into->gpu_pids.push_back(pid);
    into->bytes += bytes;
    into->gpus.insert(gpus.begin(), gpus.end());
  }
  std::vector<Found> found;
  std::map<std::string, int> names;
  for (auto& [port, f] : by_port) {
    if (int n = ++names[f.name]; n > 1) f.name += fmt::format("-{}", n);
    found.push_back(f);
  }

  if (!write_path.empty()) {
    std::ofstream out(write_path);
    out << config_text(found);
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
