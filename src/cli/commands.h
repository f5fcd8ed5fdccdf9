// The `vramd` subcommands. Each returns the process exit code: 0 ok, 1 failure, 2 usage,
// 3 daemon unreachable (DESIGN.md).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "cli/client.h"
#include "core/config.h"

namespace vramd {

enum ExitCode { kExitOk = 0, kExitFailure = 1, kExitUsage = 2, kExitUnreachable = 3 };

struct CommonOptions {
  std::string config_path;  // --config; empty: /etc/vramd/vramd.toml when it exists
  std::string url;          // --url; empty: $VRAMD_URL, else from the config, else the default
};

// The config named by --config, or the default file when present, or built-in defaults.
// Error only when a named or present file is broken.
Result<Config> load_cli_config(const CommonOptions& opts);
// Where to reach the daemon, by --url, $VRAMD_URL, the config's socket, or 127.0.0.1:7100.
DaemonAddress daemon_address(const CommonOptions& opts, const Config& config);

int cmd_serve(const CommonOptions& opts);
struct StatusOptions {
  bool json = false;
  bool watch = false;       // refresh until interrupted (or `count` refreshes)
  double interval_s = 2.0;  // --interval, between refreshes
  int count = 0;            // --count: stop after this many refreshes; 0: never
  bool all_hosts = false;   // --all-hosts: every host's last status (GET /v1/hosts)
};
// Without a daemon, takes one sample here (not with --watch: it keeps trying the daemon).
int cmd_status(const CommonOptions& opts, const StatusOptions& status);
int cmd_services(const CommonOptions& opts, bool json);
// Unloads one service (or every idle one) and waits for the verdict from the GPU's numbers.
int cmd_free(const CommonOptions& opts, const std::string& service, bool idle, bool force,
             bool json);
// since: a duration back from now ("1h") or an RFC 3339 time.
int cmd_events(const CommonOptions& opts, bool follow, const std::string& since, bool json);

struct RunOptions {
  std::string vram;         // --vram, required
  std::string gpu = "any";  // --gpu N|any
  std::string ram;          // --ram
  int priority = 0;
  std::string label;    // default: the program's name
  std::string timeout;  // --timeout: give up waiting after this long
  bool detach = false;
  bool preemptible = false;  // --preemptible: may be suspended (cuda-checkpoint) for other work
  bool no_cuda_env = false;
  std::string host;          // --host NAME|any (a shared PostgreSQL store); "": the daemon's default
  std::string on_host_lost;  // --on-host-lost requeue|end
  // --on-lease-lost stop|keep (suspend: with CUDA checkpointing, not yet offered); "": stop with
  // requeue, keep with end. What the command's process group gets when its lease is lost (its
  // host cut off from a shared store): SIGTERM, then SIGKILL after stop_timeout; or nothing.
  std::string on_lease_lost;
  std::string stop_timeout = "10s";  // --stop-timeout

  std::vector<std::string> command;
};
// Asks for a lease, waits (one live line on a terminal), runs the command with
// CUDA_VISIBLE_DEVICES set to the granted GPU, releases at exit; exits with the command's status.
int cmd_run(const CommonOptions& opts, const RunOptions& run);
// `host`: "" this host's leases; "all" every host's on the shared store; else that host's.
int cmd_leases(const CommonOptions& opts, bool json, const std::string& host = "");
// Finds the model servers that hold GPU memory, by their ports' answers (cli/discover.cc);
// `write_path`: also writes them as a config there.
int cmd_discover(const CommonOptions& opts, bool json, const std::string& write_path,
                 int timeout_ms);
// The durations history of one service (docs/history.md): its recent prompts and requests, or,
// with `by` ("version" | "args"), p50/p95 per workflow or model per variant and the change.
struct HistoryOptions {
  std::string service;
  std::string by;
  std::string workflow, model, since;
  size_t limit = 20;
};
int cmd_history(const CommonOptions& opts, const HistoryOptions& h, bool json);
// Finished leases; with stats_label, count and p50/p95 wait, run and peak memory of that label.
int cmd_jobs(const CommonOptions& opts, const std::string& stats_label, size_t limit, bool json);

// start | stop | restart; with wait, until the service is up (or stopped, memory checked). force
// (start): start now, without waiting for GPU room for the service's vram_estimate.
int cmd_lifecycle(const CommonOptions& opts, const std::string& action, const std::string& service,
                  bool wait, bool force = false);
int cmd_logs(const CommonOptions& opts, const std::string& service, bool follow, size_t lines);
// Crashes grouped by signature, with the evidence and the suggested fix.
int cmd_doctor(const CommonOptions& opts, const std::string& service, bool json);

struct SimOptions {
  std::string trace;                  // TRACE.jsonl
  std::vector<std::string> policies;  // --policy, repeatable; empty: every policy
  std::string config_path;            // --config: vramd's TTLs, min_idle, ... for `vramd`
  bool json = false;
  bool markdown = false;  // --markdown: the table as markdown (bench/RESULTS.md)
  std::string plot;       // --plot OUT.svg
  std::string generate;   // --generate NAME: print a seeded trace instead
  uint64_t seed = 1;
};
// Replays a trace through each policy, side by side (docs/sim.md). Needs no daemon and no GPU.
int cmd_sim(const SimOptions& opts);

struct DemoOptions {
  std::string listen = "127.0.0.1:7100";
  double duration_s = 0;  // 0: until interrupted
};
int cmd_demo(const DemoOptions& opts);

// When this process was started by `vramd demo` as a stand-in for a GPU service, runs as that
// stand-in and never returns. Otherwise returns.
void maybe_run_demo_stand_in();

}  // namespace vramd
