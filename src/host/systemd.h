// systemd through its own tools: a unit's state from `systemctl show` (KEY=VALUE lines), its
// output from the journal (`journalctl -o json`, one JSON object a line; `-o cat`, the messages
// alone). The parsers are pure (tests/fuzz/systemd_fuzz.cc); the rest runs the tools (blocking:
// call it off the event loop).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"

namespace vramd {

// The properties vramd reads of a unit (systemd.exec(5), org.freedesktop.systemd1(5)).
struct UnitShow {
  std::string load_state;    // LoadState: "loaded", "not-found", "masked", ...
  std::string active_state;  // ActiveState: "active", "inactive", "failed", "activating", ...
  std::string sub_state;     // SubState: "running", "dead", "auto-restart", "exited", ...
  int main_pid = 0;          // MainPID (0: none)
  // How the last run of ExecStart= ended: ExecMainCode is a CLD_* code (1 exited: ExecMainStatus
  // is its exit status; 2 killed, 3 dumped: the signal; 0: it has not ended).
  int exec_main_code = 0;
  int exec_main_status = 0;
  int n_restarts = 0;               // NRestarts: systemd's own restarts (Restart=)
  std::string result;               // Result: "success", "exit-code", "signal", "oom-kill", ...
  std::string restart;              // Restart: "no", "always", "on-failure", ...
  uint64_t active_enter_mono = 0;   // ActiveEnterTimestampMonotonic (µs; 0: never)
  std::string invocation_id;        // InvocationID: one per run
  bool active() const { return active_state == "active" || active_state == "reloading"; }
  bool found() const { return load_state != "not-found"; }
};

// `systemctl show -p ...` output (KEY=VALUE a line; other keys, blank lines ignored). Error when
// it has no ActiveState or a number is not one.
Result<UnitShow> parse_systemctl_show(std::string_view text);

// One line of `journalctl -o json`: __REALTIME_TIMESTAMP (µs, a decimal string) and MESSAGE (a
// string, an array of bytes when it is not UTF-8, null when too large). nullopt: not such a line.
struct JournalLine {
  uint64_t realtime_us = 0;
  std::string message;
};
std::optional<JournalLine> parse_journal_json_line(std::string_view line);

// How to reach systemd: the tools (a path, or a name looked up in PATH) and which manager.
struct SystemdTools {
  std::string systemctl = "systemctl";
  std::string journalctl = "journalctl";
  bool user = false;  // --user: the user's manager and journal
};

// What a tool wrote and how it ended.
struct ToolRun {
  int exit_code = -1;  // -1: killed, or could not run
  std::string out, err;
};
// Runs argv (argv[0] looked up in PATH when it has no '/'), no shell, stdin /dev/null; killed
// after `timeout`. Error when it could not be started or timed out.
Result<ToolRun> run_tool(const std::vector<std::string>& argv, std::chrono::milliseconds timeout);

// `systemctl [--user] show -p <the UnitShow properties> UNIT`.
Result<UnitShow> show_unit(const SystemdTools& t, const std::string& unit,
                           std::chrono::milliseconds timeout);
// `systemctl [--user] ACTION UNIT` (start, stop, restart: systemctl waits for the job). The
// message says what ran, or how it failed (its stderr's first line).
Result<std::string> systemctl_action(const SystemdTools& t, const std::string& action,
                                     const std::string& unit, std::chrono::milliseconds timeout);
// The unit's last `lines` journal lines after `after_us` (realtime µs; 0: the last `lines`):
// `journalctl [--user] -u UNIT -n N -o json --no-pager [--since @S.U]`.
Result<std::vector<JournalLine>> journal_lines(const SystemdTools& t, const std::string& unit,
                                               size_t lines, uint64_t after_us,
                                               std::chrono::milliseconds timeout);
// The unit's last `lines` messages up to `until_s` (wall seconds): `journalctl [--user] -u UNIT
// -n N -o cat --no-pager --until @S`.
Result<std::vector<std::string>> journal_messages(const SystemdTools& t, const std::string& unit,
                                                  size_t lines, int64_t until_s,
                                                  std::chrono::milliseconds timeout);

}  // namespace vramd
