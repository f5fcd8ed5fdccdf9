// Owner resolution: which owner each process belongs to, most specific first (DESIGN.md,
// Attribution): a process vramd started for a service (its tree) → a service's `match` rule →
// a lease holder's pid → container (cgroup) → systemd unit → the process itself.
#pragma once

#include <map>
#include <regex>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/config.h"
#include "core/model.h"

namespace vramd {

// What the shell knows beyond the host snapshot.
struct OwnerHints {
  std::vector<std::pair<std::string, int>> managed;     // (service, root pid vramd started)
  std::vector<std::pair<std::string, int>> lease_pids;  // (lease id, holder pid)
  // (service, MainPID systemd gives its unit): its tree is the unit's even where the cgroup
  // does not say so (a unit inside a container, a cgroup vramd cannot read)
  std::vector<std::pair<std::string, int>> unit_pids;
};

// An owner and the evidence that named it ("match cmdline", "port 8188", "container comfyui").
struct ResolvedOwner {
  Owner owner;
  std::string evidence;
};

class OwnerResolver {
 public:
  // REQUIRES: every cmdline regex in `services` compiles (config parsing checks it).
  explicit OwnerResolver(const std::deque<ServiceConfig>& services);

  // The TCP ports whose listener names a service (services without a `match`).
  std::vector<int> ports_wanted() const;
  std::vector<std::pair<std::string, std::string>> pid_files_wanted() const;

  // Resolves every process in `host` (and only those).
  std::unordered_map<int, ResolvedOwner> resolve(const HostSnapshot& host,
                                                 const OwnerHints& hints) const;

 private:
  struct Rule {
    std::string service;
    MatchRule match;
    std::optional<std::regex> cmdline;
    int port = 0;  // from url, used when match is empty
  };
  std::vector<Rule> rules_;
  // (pid, start ticks) -> does each rule's cmdline regex match; the last resolve's processes.
  mutable std::map<std::pair<int, unsigned long long>, std::vector<char>> cmdline_cache_;
};

// Port of an http(s) URL ("http://127.0.0.1:8188/x" → 8188; default 80/443), 0 when none.
int url_port(const std::string& url);

// A process owner's display name: "python3[1234]".
std::string process_owner_name(const ProcessInfo& p);
// nvidia-cuda-mps-server (by argv[0]): always an owner of its own, "nvidia-cuda-mps-server[PID]".
bool is_mps_server(const ProcessInfo& p);
std::string process_owner_name(int pid, const std::string& comm);

}  // namespace vramd
