#include "services/discovery.h"

#include <algorithm>
#include <cctype>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "core/units.h"

namespace vramd {

namespace {

// A TOML key for a service: letters, digits, '-' and '_' (bare keys need no quoting).
std::string key_of(std::string name) {
  for (char& c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_') c = '-';
  return name.empty() ? std::string("service") : name;
}

std::string toml_string(const std::string& s) { return nlohmann::json(s).dump(); }  // JSON escapes are TOML's

// How the service is told apart, best first: its container, its compose service, its unit; else
// its port, which its url already names.
void name_and_match(DiscoveredServer& f, const ProcessInfo* p) {
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
  } else if (cg.kind == CgroupIdentity::Kind::unit && cg.unit.size() > 8 &&
             cg.unit.compare(cg.unit.size() - 8, 8, ".service") == 0) {
    f.name = cg.unit.substr(0, cg.unit.size() - 8);
    f.match_key = "unit";
    f.match_value = cg.unit;
  }
}

// A command line inside a TOML comment: an argument's newline would end the comment.
std::string one_line(std::string s) {
  for (char& c : s)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = ' ';
  return s;
}

const ProcessInfo* find_process(const DiscoveryInput& in, int pid) {
  auto it = in.processes.find(pid);
  return it == in.processes.end() ? nullptr : &it->second;
}

}  // namespace

std::map<int, std::vector<int>> process_chains(const DiscoveryInput& in) {
  std::map<int, std::vector<int>> chains;
  for (const auto& [pid, held] : in.gpu_procs) {
    std::vector<int>& chain = chains[pid];
    for (int at = pid; at > 1 && chain.size() < 16;) {
      if (std::find(chain.begin(), chain.end(), at) != chain.end()) break;  // a loop in bad data
      chain.push_back(at);
      const ProcessInfo* p = find_process(in, at);
      if (!p) break;
      at = p->ppid;
    }
  }
  return chains;
}

std::vector<int> chain_pids(const DiscoveryInput& in) {
  std::vector<int> out;
  for (const auto& [pid, chain] : process_chains(in)) out.insert(out.end(), chain.begin(), chain.end());
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::vector<int> ports_to_probe(const DiscoveryInput& in) {
  std::vector<int> out;
  for (const auto& [pid, chain] : process_chains(in))
    for (int at : chain) {
      auto it = in.ports_of.find(at);
      if (it == in.ports_of.end()) continue;
      for (int port : it->second)
        if (std::find(out.begin(), out.end(), port) == out.end()) out.push_back(port);
    }
  return out;
}

DiscoveryResult assemble_discovery(const DiscoveryInput& in,
                                   const std::map<int, std::map<std::string, ProbeAnswer>>& probed) {
  // One entry per server found: the nearest process in a chain that listens on a port where a
  // fingerprint matches. Several GPU processes of one server share it.
  std::map<int, DiscoveredServer> by_port;
  DiscoveryResult out;
  for (const auto& [pid, chain] : process_chains(in)) {
    const DiscoveryInput::GpuHeld& held = in.gpu_procs.at(pid);
    DiscoveredServer* hit = nullptr;
    std::vector<int> tried;
    int first_listener = 0;  // the nearest process of the chain that listens, for `unknown`
    for (int at : chain) {
      auto ports = in.ports_of.find(at);
      if (ports == in.ports_of.end()) continue;
      for (int port : ports->second) {
        tried.push_back(port);
        if (!first_listener) first_listener = at;
        auto answers = probed.find(port);
        if (answers == probed.end()) continue;
        auto fp = identify_server(answers->second);
        if (!fp) continue;
        DiscoveredServer& f = by_port[port];
        if (f.kind.empty()) {
          f.kind = fp->kind;
          f.evidence = fp->evidence;
          f.port = port;
          f.url = fmt::format("http://127.0.0.1:{}", port);
          f.listener_pid = at;
          const ProcessInfo* p = find_process(in, at);
          f.cmdline = p ? p->cmdline : "";
          name_and_match(f, p);
        }
        hit = &f;
        break;
      }
      if (hit) break;
    }
    DiscoveredServer* into = hit;
    if (!into) {
      DiscoveredServer u;
      u.evidence = tried.empty() ? "no listening port"
                                 : fmt::format("no fingerprint on port {}", fmt::join(tried, ", "));
      // Its pid and the first port tried are reported too (`vramd discover --json`): the
      // process that listens there, else the GPU process itself.
      u.listener_pid = first_listener ? first_listener : pid;
      u.port = tried.empty() ? 0 : tried.front();
      const ProcessInfo* p = find_process(in, pid);
      u.cmdline = p ? p->cmdline : "";
      name_and_match(u, p);
      out.unknown.push_back(std::move(u));
      into = &out.unknown.back();
    }
    into->gpu_pids.push_back(pid);
    into->bytes += held.bytes;
    into->gpus.insert(held.gpus.begin(), held.gpus.end());
  }
  std::map<std::string, int> names;
  for (auto& [port, f] : by_port) {
    f.name = key_of(f.name);
    if (int n = ++names[f.name]; n > 1) f.name += fmt::format("-{}", n);
    out.found.push_back(f);
  }
  return out;
}

ServiceConfig service_config_of(const DiscoveredServer& s) {
  ServiceConfig c;
  c.name = key_of(s.name);
  c.kind = s.kind;
  c.url = s.url;
  if (s.match_key == "container") c.match.container = s.match_value;
  if (s.match_key == "compose_service") c.match.compose_service = s.match_value;
  if (s.match_key == "unit") c.match.unit = s.match_value;
  c.discovered_by = s.evidence;
  return c;
}

std::string discovered_config_text(const std::vector<DiscoveredServer>& found,
                                   const std::string& when) {
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
                         one_line(f.cmdline.substr(0, 100)));
    out += fmt::format("# found by {}; held {} on GPU {}\n", f.evidence, format_size(f.bytes),
                       fmt::join(f.gpus, ", "));
  }
  return out;
}

}  // namespace vramd
