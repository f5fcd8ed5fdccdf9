// Managed children: spawning a service's `start` command in its own session and process group
// with its output appended to state_dir/logs/NAME.log, pid files for re-adoption after a
// restart of vramd, log rotation and tails. Blocking system calls; the daemon runs them on its
// worker thread or (fork, kill) on the loop where they cannot block.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/result.h"

namespace vramd {

struct Spawned {
  int pid = 0;
  uint64_t start_ticks = 0;
};

// Forks and execs `svc.start` (no shell): setsid, cwd, env (+ env_file), user when running as
// root, stdin from /dev/null, stdout and stderr appended to `log_path`. A line marks the start
// in the log. Error when the program cannot be run (checked before fork: exists, executable).
Result<Spawned> spawn_service(const ServiceConfig& svc, const std::string& log_path);

// A child's pid file: "PID START_TICKS\n".
Status write_pid_file(const std::string& path, const Spawned& s);
// The pid file's process when it still runs with the same start time (a reused pid is not it).
std::optional<Spawned> read_live_pid_file(const std::string& path);

// The process listening on `port` (TCP) when it is not one of `ours`: "python3[812]".
std::optional<std::pair<int, std::string>> port_taken(int port, const std::vector<int>& ours);

// Copy-truncate rotation: when the log is over `max_bytes`, it is copied to PATH.1 (the older
// PATH.1 dropped) and truncated; writers with O_APPEND go on at its new end.
void rotate_log(const std::string& path, uint64_t max_bytes);

// The last `n` lines of the log (and of PATH.1 before it when the log has fewer).
std::vector<std::string> log_tail(const std::string& path, size_t n);
// The lines after the last start marker (at most `n`): what the service printed while booting.
std::vector<std::string> boot_lines(const std::string& path, size_t n);
// The log's lines from byte `offset` on (for `vramd logs -f`); returns the new offset.
std::pair<std::vector<std::string>, uint64_t> log_since(const std::string& path, uint64_t offset);
// GET /v1/services/NAME/logs: the last `lines` lines, or the lines after byte `after`; with the
// offset to ask from next (the end of the last whole line).
struct LogPage {
  std::vector<std::string> lines;
  uint64_t offset = 0;
};
LogPage read_log_page(const std::string& path, size_t lines, std::optional<uint64_t> after);

// The marker written at each start, "---- vramd: started NAME (pid N) at T ----".
extern const char* const kStartMarker;

// True when the kernel log names `pid` as killed by the OOM killer (needs /dev/kmsg access).
bool killed_by_oom_killer(int pid);

}  // namespace vramd
