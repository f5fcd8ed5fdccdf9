// Crash diagnosis: from what a supervised service left behind when it exited (status or signal,
// the tail of its log, who held the GPU at that moment) to a signature, a title, an explanation
// and a suggested fix. Pure: no I/O; the supervisor gathers the CrashInput.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/units.h"

namespace vramd {

// One row of the rules table; also what a config [[crash_rules]] entry becomes.
// In title, explanation and suggestion, "{1}".."{9}" (and "{0}", the whole match) are replaced by
// the capture groups of the first line that matched pattern, and "{holders}" by who held the GPU
// ("comfyui held 16.0 GiB, flux#7 held 6.0 GiB").
struct CrashRule {
  std::string signature;  // stable id, e.g. "cuda-async-offload"; config: derived from the title
  std::string title;      // "CUDA error in async weight offloading"
  std::string pattern;    // ECMAScript regex searched in each line of the log tail
  // Optional: must also match some line of the whole log given (boot log and tail), e.g.
  // "Using async weight offloading". Empty: no such condition.
  std::string requires_pattern;
  std::string explanation;
  std::string suggestion;  // "add --disable-async-offload to the service's start command"
};

struct CrashInput {
  std::vector<std::string> log_tail;  // last lines of the service's log (<= 200), oldest first
  std::vector<std::string> boot_log;  // first lines since the last start (may be empty)
  std::optional<int> exit_code;       // exited normally with this code
  std::optional<int> signal;          // killed by this signal
  bool oom_killed = false;  // the kernel OOM killer ended this pid (dmesg, cgroup memory.events)
  // Who held GPU memory at that moment, largest first: owner name, bytes.
  std::vector<std::pair<std::string, Bytes>> gpu_holders;
};

struct CrashDiagnosis {
  // A rule's signature, "host-oom", "signal:<NAME>" ("signal:SIGSEGV"),
  // "python-exception:<ExceptionType>", "exit:<code>", or "unknown" when nothing is known.
  std::string signature;
  std::string title;
  std::string explanation;
  std::string suggestion;
  std::vector<std::string> evidence;  // log lines behind the verdict (at most 5), verbatim
};

// The built-in table, most specific first. Its regexes are compiled once, on first use.
const std::vector<CrashRule>& builtin_crash_rules();

// Precedence, first that applies:
//   1. oom_killed: "host-oom" (host RAM, not the GPU), whatever the log says;
//   2. config_rules in order (so they override), then the built-ins in order: the first rule whose
//      pattern matches a line of log_tail and whose requires_pattern (if any) matches the log;
//   3. a signal: "signal:<NAME>" (SIGSEGV is a segfault, SIGBUS, SIGABRT, SIGKILL, ...);
//   4. exit status 0, or 128+N for a signal N (as a shell or container runtime reports it):
//      "exit:<code>";
//   5. the last Python traceback in log_tail: "python-exception:<Type>" (a traceback whose message
//      points to an earlier one, like vLLM's "See root cause above", yields to that one);
//   6. "exit:<code>", else "unknown".
// A config rule whose regex does not compile is skipped (check_crash_rule rejects it earlier).
CrashDiagnosis diagnose_crash(const CrashInput& in, const std::vector<CrashRule>& config_rules);

// Why a config rule cannot be used (no title or pattern, a regex that does not compile, a
// signature with other characters than [a-z0-9._-]), or nullopt when it is fine. The text names
// the field by its config key ("pattern", "requires", "signature"); the parser adds file:line.
std::optional<std::string> check_crash_rule(const CrashRule& r);

// The signature a config rule without one gets: "CUDA error in async offload!" ->
// "cuda-error-in-async-offload" (lowercase, runs of other characters become one '-').
std::string crash_signature_from_title(std::string_view title);

}  // namespace vramd
