// Discovery: which model server each GPU process belongs to, without any config. Given the GPU
// processes, their ancestors (vLLM's engine and Ollama's runner are children of the process that
// listens) and the ports each listens on, and the answers each port gave to the fingerprint GETs
// (services/fingerprint.h), it names one service per server found. Pure: the callers (`vramd
// discover`, and the daemon's `[daemon] discover` scan) read the host and make the requests.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/model.h"
#include "services/fingerprint.h"

namespace vramd {

struct DiscoveryInput {
  struct GpuHeld {
    Bytes bytes = 0;
    std::set<unsigned> gpus;
  };
  std::map<int, GpuHeld> gpu_procs;             // GPU process pid -> what it holds, where
  std::map<int, ProcessInfo> processes;         // those pids and their ancestors, as scanned
  std::map<int, std::vector<int>> ports_of;     // pid -> TCP ports it listens on
};

// Each GPU process and its parents, nearest first, up to init (at most 16).
std::map<int, std::vector<int>> process_chains(const DiscoveryInput& in);
// The pids of every chain, sorted and unique: whose listening sockets matter.
std::vector<int> chain_pids(const DiscoveryInput& in);
// The ports to probe, in the order the chains reach them, each once.
std::vector<int> ports_to_probe(const DiscoveryInput& in);

struct DiscoveredServer {
  std::string name;  // its container, compose service or unit; else its kind ("unknown")
  std::string kind;  // "" when no fingerprint matched
  std::string evidence;
  std::string url;
  // Unknown ones: the first port tried (0: none listens) and the process listening there, else
  // the GPU process itself.
  int port = 0;
  int listener_pid = 0;
  std::vector<int> gpu_pids;
  std::set<unsigned> gpus;
  Bytes bytes = 0;
  std::string match_key, match_value;  // "container" | "compose_service" | "unit" | "" (its port)
  std::string cmdline;
};

struct DiscoveryResult {
  std::vector<DiscoveredServer> found;    // one per server, names made unique ("vllm-2")
  std::vector<DiscoveredServer> unknown;  // GPU processes no fingerprint named, and why
};

// `probed`: port -> (path -> answer); a port missing from it counts as not answering.
DiscoveryResult assemble_discovery(const DiscoveryInput& in,
                                   const std::map<int, std::map<std::string, ProbeAnswer>>& probed);

// A service config for one server found: name (a TOML bare key), kind, url, match.
ServiceConfig service_config_of(const DiscoveredServer& s);

// The config `vramd discover --write` writes: one [services.NAME] per server found. `when`: the
// time shown in its first line ("2026-12-01 15:00 UTC").
std::string discovered_config_text(const std::vector<DiscoveredServer>& found,
                                   const std::string& when);

}  // namespace vramd
