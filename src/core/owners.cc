#include "core/owners.h"

#include <algorithm>
#include <functional>
#include <map>

#include <fmt/format.h>

namespace vramd {

int url_port(const std::string& url) {
  std::string_view s = url;
  int def = 0;
  if (s.starts_with("http://")) {
    s.remove_prefix(7);
    def = 80;
  } else if (s.starts_with("https://")) {
    s.remove_prefix(8);
    def = 443;
  } else {
    return 0;
  }
  auto slash = s.find('/');
  if (slash != std::string_view::npos) s = s.substr(0, slash);
  auto colon = s.rfind(':');
  if (colon == std::string_view::npos || (s.find(']') != std::string_view::npos && colon < s.find(']')))
    return def;
  int port = 0;
  for (char c : s.substr(colon + 1)) {
    if (c < '0' || c > '9') return 0;
    port = port * 10 + (c - '0');
    if (port > 65535) return 0;
  }
  return port;
}

std::string process_owner_name(int pid, const std::string& comm) {
  return fmt::format("{}[{}]", comm.empty() ? "?" : comm, pid);
}

std::string process_owner_name(const ProcessInfo& p) { return process_owner_name(p.pid, p.comm); }

bool is_mps_server(const ProcessInfo& p) {
  // comm is cut to 15 characters ("nvidia-cuda-mps" for the control daemon too): ask argv[0].
  std::string_view argv0 = std::string_view(p.cmdline).substr(0, p.cmdline.find(' '));
  if (auto slash = argv0.rfind('/'); slash != std::string_view::npos)
    argv0.remove_prefix(slash + 1);
  return argv0 == "nvidia-cuda-mps-server";
}

OwnerResolver::OwnerResolver(const std::deque<ServiceConfig>& services) {
  for (const auto& s : services) {
    Rule r;
    r.service = s.name;
    r.match = s.match;
    if (!s.match.cmdline.empty()) r.cmdline.emplace(s.match.cmdline, std::regex::ECMAScript);
    if (s.match.empty()) r.port = url_port(s.url);
    rules_.push_back(std::move(r));
  }
}

std::vector<int> OwnerResolver::ports_wanted() const {
  std::vector<int> ports;
  for (const auto& r : rules_)
    if (r.port) ports.push_back(r.port);
  return ports;
}

std::vector<std::pair<std::string, std::string>> OwnerResolver::pid_files_wanted() const {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& r : rules_)
    if (!r.match.pid_file.empty()) out.emplace_back(r.service, r.match.pid_file);
  return out;
}

namespace {

bool container_matches(const CgroupIdentity& cg, const std::string& want) {
  if (cg.kind != CgroupIdentity::Kind::container) return false;
  if (!cg.container_name.empty() && cg.container_name == want) return true;
  return want.size() >= 12 && cg.container_id.starts_with(want);
}

std::string short_id(const std::string& id) { return id.substr(0, std::min<size_t>(12, id.size())); }

}  // namespace

std::unordered_map<int, ResolvedOwner> OwnerResolver::resolve(const HostSnapshot& host,
                                                              const OwnerHints& hints) const {
  std::unordered_map<int, const ProcessInfo*> by_pid;
  by_pid.reserve(host.processes.size());
  for (const auto& p : host.processes) by_pid[p.pid] = &p;

  // Owners named directly for a pid, by rank (lower wins): 0 managed, 1 match, 2 lease.
  struct Direct {
    int rank;
    ResolvedOwner owner;
  };
  std::unordered_map<int, Direct> direct;
  auto name_pid = [&](int pid, int rank, Owner o, std::string evidence) {
    auto it = direct.find(pid);
    if (it == direct.end() || rank < it->second.rank)
      direct[pid] = Direct{rank, ResolvedOwner{std::move(o), std::move(evidence)}};
  };

  for (const auto& [service, pid] : hints.managed)
    name_pid(pid, 0, {OwnerKind::service, service}, "started by vramd");
  for (const auto& [service, pid] : hints.unit_pids)
    name_pid(pid, 1, {OwnerKind::service, service}, "MainPID of its unit");
  for (const auto& [lease, pid] : hints.lease_pids)
    name_pid(pid, 2, {OwnerKind::lease, lease}, "lease holder");

  // Regex matches are cached per process (pid and start time): a sample sees the same
  // processes again and again, and 64 rules x 64 processes of regex_search cost ~1.4 ms.
  std::map<std::pair<int, unsigned long long>, std::vector<char>> matches;
  auto matched = [&](const ProcessInfo& p, size_t rule) {
    auto key = std::pair{p.pid, p.start_ticks};
    auto it = matches.find(key);
    if (it == matches.end()) {
      auto old = cmdline_cache_.find(key);
      if (old != cmdline_cache_.end()) {
        it = matches.emplace(key, std::move(old->second)).first;
      } else {
        std::vector<char> v(rules_.size(), 0);
        for (size_t i = 0; i < rules_.size(); ++i)
          if (rules_[i].cmdline && !p.cmdline.empty())
            v[i] = std::regex_search(p.cmdline, *rules_[i].cmdline) ? 1 : 0;
        it = matches.emplace(key, std::move(v)).first;
      }
    }
    return it->second[rule] != 0;
  };
  for (size_t ri = 0; ri < rules_.size(); ++ri) {
    const Rule& r = rules_[ri];
    Owner svc{OwnerKind::service, r.service};
    if (r.cmdline) {
      for (const auto& p : host.processes)
        if (!p.cmdline.empty() && matched(p, ri))
          name_pid(p.pid, 1, svc, "cmdline matches " + r.match.cmdline);
    } else if (!r.match.container.empty()) {
      for (const auto& p : host.processes)
        if (container_matches(p.cgroup, r.match.container))
          name_pid(p.pid, 1, svc, "container " + r.match.container);
    } else if (!r.match.compose_service.empty()) {
      for (const auto& p : host.processes)
        if (p.cgroup.kind == CgroupIdentity::Kind::container &&
            p.cgroup.compose_service == r.match.compose_service)
          name_pid(p.pid, 1, svc, "compose service " + r.match.compose_service);
    } else if (!r.match.unit.empty()) {
      for (const auto& p : host.processes)
        if (p.cgroup.unit == r.match.unit) name_pid(p.pid, 1, svc, "unit " + r.match.unit);
    } else if (!r.match.pid_file.empty()) {
      for (const auto& [service, pid] : host.pid_files)
        if (service == r.service) name_pid(pid, 1, svc, "pid file " + r.match.pid_file);
    } else if (r.port) {
      for (const auto& [port, pid] : host.listeners)
        if (port == r.port) name_pid(pid, 1, svc, fmt::format("listens on port {}", port));
    }
  }

  std::unordered_map<int, ResolvedOwner> out;
  out.reserve(host.processes.size());
  // Memoised walk up the parent chain: a descendant of a named process has its owner.
  std::unordered_map<int, const Direct*> inherited;
  std::function<const Direct*(int, int)> find_direct = [&](int pid, int depth) -> const Direct* {
    if (pid <= 1 || depth > 64) return nullptr;
    if (auto it = inherited.find(pid); it != inherited.end()) return it->second;
    const Direct* best = nullptr;
    if (auto it = direct.find(pid); it != direct.end()) best = &it->second;
    auto pit = by_pid.find(pid);
    if (pit != by_pid.end()) {
      const Direct* up = find_direct(pit->second->ppid, depth + 1);
      if (up && (!best || up->rank < best->rank)) best = up;
    }
    inherited[pid] = best;
    return best;
  };

  for (const auto& p : host.processes) {
    // The MPS server holds the memory MPS itself needs, for every client: an owner of its own,
    // whichever service, unit or container started its control daemon. (Clients are listed
    // by the driver with their own pids and memory, and are attributed like any process.)
    if (is_mps_server(p)) {
      out[p.pid] = {{OwnerKind::process, fmt::format("nvidia-cuda-mps-server[{}]", p.pid)},
                    "the CUDA MPS server"};
      continue;
    }
    if (const Direct* d = find_direct(p.pid, 0)) {
      out[p.pid] = d->owner;
      continue;
    }
    const auto& cg = p.cgroup;
    if (cg.kind == CgroupIdentity::Kind::container) {
      std::string name = !cg.container_name.empty() ? cg.container_name
                         : !cg.pod_uid.empty()
                             ? fmt::format("pod {}/{}", cg.pod_uid.substr(0, 8), short_id(cg.container_id))
                             : short_id(cg.container_id);
      out[p.pid] = {{OwnerKind::container, name},
                    fmt::format("cgroup {}{}", cg.runtime.empty() ? "" : cg.runtime + " ", short_id(cg.container_id))};
    } else if (cg.kind == CgroupIdentity::Kind::unit && !cg.unit.empty()) {
      out[p.pid] = {{OwnerKind::unit, cg.unit}, "cgroup " + cg.path};
    } else {
      out[p.pid] = {{OwnerKind::process, process_owner_name(p)},
                    cg.kind == CgroupIdentity::Kind::private_ns
                        ? "process (private cgroup namespace: container unknown)"
                        : "process"};
    }
  }
  cmdline_cache_ = std::move(matches);
  return out;
}

}  // namespace vramd
