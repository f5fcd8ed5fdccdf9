#include "supervisor/crash_rules.h"
#include "core/text.h"

#include <algorithm>
#include <cctype>
#include <csignal>
#include <regex>

#include <fmt/format.h>

namespace vramd {

namespace {

constexpr std::size_t kMaxEvidence = 5;
constexpr std::size_t kMaxHoldersNamed = 5;
constexpr std::size_t kMaxTitleChars = 160;
// libstdc++'s regex matcher recurses once per character; a tqdm line of 100k characters would
// overflow the stack. Error messages worth matching fit well within this.
constexpr std::size_t kMaxMatchChars = 2048;

const std::vector<CrashRule>& builtin_table() {
  static const std::vector<CrashRule> rules = {
      {"cuda-async-offload", "CUDA error in async weight offloading", "CUDA error: unknown error",
       "Using async weight offloading",
       "ComfyUI was started with async weight offloading (it logged \"Using async weight "
       "offloading\"), which copies weights to the GPU on extra CUDA streams; a CUDA \"unknown "
       "error\" while waiting on those streams (cast_bias_weight -> sync_stream) is a known "
       "failure "
       "of this mode. The CUDA context is broken afterwards: every later prompt fails until the "
       "process restarts.",
       "add --disable-async-offload to the service's start command"},
      {"cuda-oom", "Out of GPU memory",
       "CUDA out of memory|OutOfMemoryError|CUDA error: out of memory|cudaMalloc failed: out of "
       "memory|CUBLAS_STATUS_ALLOC_FAILED",
       "",
       "The service asked for more GPU memory than was free. Who held the GPU at that moment: "
       "{holders}.",
       "free the GPU before this service loads (unload or stop idle services, or have it take a "
       "vramd lease), or make it need less: a smaller or quantized model, a smaller batch or "
       "resolution; for fragmentation in PyTorch, "
       "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"},
      {"vllm-gpu-memory-utilization", "vLLM could not reserve its share of GPU memory",
       "less than desired GPU memory utilization|No available memory for the cache "
       "blocks|maximum number of tokens that can be stored in KV cache",
       "",
       "vLLM reserves gpu_memory_utilization times the GPU's total memory at start, for weights "
       "and KV cache; what other processes held was not available to it. Who held the GPU at that "
       "moment: {holders}.",
       "lower --gpu-memory-utilization so vLLM fits beside the other services (or --max-model-len "
       "for a smaller KV cache), or free the GPU before it starts"},
      {"cuda-illegal-memory-access", "CUDA illegal memory access",
       "an illegal memory access was encountered", "",
       "A GPU kernel read or wrote memory it does not own: a bug in a kernel (attention backend, "
       "custom op, quantization kernel) or in how it was called, rarely a driver or hardware "
       "fault. The CUDA context is unusable afterwards, and the Python stack trace may point "
       "elsewhere: CUDA reports errors asynchronously.",
       "rerun with CUDA_LAUNCH_BLOCKING=1 to find the kernel; try another attention backend or "
       "turn off the custom kernel or quantization in use; update torch and the driver; if it "
       "recurs at random, look for NVIDIA Xid errors in dmesg"},
      {"cublas-error", "cuBLAS failed: {1}", "(CUBLAS_STATUS_[A-Z_]+)", "",
       "A cuBLAS call failed with {1}. EXECUTION_FAILED and INTERNAL_ERROR usually mean a kernel "
       "the GPU cannot run (bfloat16 on a pre-Ampere card, torch built for another CUDA) or an "
       "earlier asynchronous CUDA error; NOT_INITIALIZED often means no GPU memory was left to "
       "create the cuBLAS handle.",
       "rerun with CUDA_LAUNCH_BLOCKING=1 to find the call; use float16 instead of bfloat16 on "
       "older GPUs; make sure torch's CUDA build suits the driver; check free GPU memory at start"},
      {"nccl-timeout", "NCCL collective timed out", "Watchdog caught collective operation timeout",
       "",
       "A rank waited for a collective (all-reduce, broadcast) that the other ranks never joined, "
       "until the watchdog aborted the process. Usually another rank died or hung first, one GPU "
       "is much slower (shared with other work), or the GPUs cannot reach each other.",
       "find the first error in the other ranks' logs; run with NCCL_DEBUG=INFO; on GPUs without "
       "peer-to-peer try NCCL_P2P_DISABLE=1; in a container use --ipc=host or a larger --shm-size"},
      {"nccl-error", "NCCL error",
       "NCCL error|Cuda "
       "failure|nccl(UnhandledCudaError|SystemError|InternalError|InvalidArgument|InvalidUsage|"
       "RemoteError)",
       "",
       "Communication between the GPUs of a multi-GPU (tensor-parallel or distributed) run failed "
       "in NCCL. \"unhandled cuda error\" and \"system error\" most often come from peer-to-peer "
       "access the GPUs or the VM do not support, too little shared memory (/dev/shm) in a "
       "container, or an earlier CUDA error on one of the GPUs.",
       "run with NCCL_DEBUG=INFO for the cause; try NCCL_P2P_DISABLE=1 (consumer cards, VMs); in a "
       "container use --ipc=host or --shm-size=16g; check every GPU with nvidia-smi"},
      {"cuda-driver", "CUDA driver unusable",
       "Driver/library version mismatch|unsupported display driver / cuda driver "
       "combination|CUDA driver version is insufficient|NVIDIA driver on your system is too "
       "old|Found no NVIDIA driver|no CUDA-capable device is detected",
       "",
       "The service could not start CUDA: the NVIDIA kernel module and user libraries differ in "
       "version (a driver upgrade without a reboot), the driver is older than the service's CUDA "
       "needs, or no GPU is visible to it (a container without GPUs, CUDA_VISIBLE_DEVICES).",
       "after a driver upgrade, reboot or reload the nvidia kernel modules; otherwise install a "
       "driver new enough for the service's CUDA, and check nvidia-smi in the service's "
       "environment"},
      {"cuda-error", "CUDA error: {1}", "CUDA error: (.+)", "",
       "A CUDA call failed ({1}). CUDA reports errors asynchronously, so the stack trace may point "
       "past the call that failed, and the CUDA context is usually unusable afterwards.",
       "rerun with CUDA_LAUNCH_BLOCKING=1 to find the failing call; look for NVIDIA Xid errors in "
       "dmesg; update the driver and torch"},
      {"port-in-use", "Port already in use", "[Aa]ddress already in use|EADDRINUSE", "",
       "The service could not listen on its port because another process holds it, often an "
       "earlier instance of the same service that is still running or shutting down.",
       "find the holder with `ss -ltnp` and stop it, or give the service another port"},
      {"bad-arguments", "Start command rejected",
       "error: (unrecognized arguments: .+|the following arguments are required: .+|argument "
       "[^ ]+: .+)",
       "",
       "The program rejected its command line: {1}. An option is misspelled, or newer than the "
       "installed version of the program.",
       "fix the service's start command in the vramd config, or update the program"},
  };
  return rules;
}

struct CompiledRule {
  const CrashRule* rule;
  std::regex pattern;
  std::optional<std::regex> requires_pattern;
};

std::optional<CompiledRule> compile(const CrashRule& r, std::regex::flag_type flags) {
  try {
    CompiledRule c{&r, std::regex(r.pattern, flags), std::nullopt};
    if (!r.requires_pattern.empty()) c.requires_pattern.emplace(r.requires_pattern, flags);
    return c;
  } catch (const std::regex_error&) {
    return std::nullopt;
  }
}

const std::vector<CompiledRule>& compiled_builtins() {
  static const std::vector<CompiledRule> compiled = [] {
    std::vector<CompiledRule> out;
    for (const CrashRule& r : builtin_table()) {
      // A built-in that does not compile is a bug in this file: .value() throws at first use.
      out.push_back(compile(r, std::regex::ECMAScript | std::regex::optimize).value());
    }
    return out;
  }();
  return compiled;
}

// The text rules see: colour codes removed (vLLM and uvicorn colour their prefixes), no trailing
// '\r', at most kMaxMatchChars. Evidence keeps the line as logged.
std::string clean(std::string_view line) {
  std::string out;
  out.reserve(std::min(line.size(), kMaxMatchChars));
  for (std::size_t i = 0; i < line.size() && out.size() < kMaxMatchChars; ++i) {
    if (line[i] == '\x1b' && i + 1 < line.size() && line[i + 1] == '[') {
      i += 2;
      while (i < line.size() && !(line[i] >= '@' && line[i] <= '~')) ++i;
      continue;
    }
    out.push_back(line[i]);
  }
  while (!out.empty() && (out.back() == '\r' || out.back() == '\n')) out.pop_back();
  return out;
}

std::vector<std::string> clean_all(const std::vector<std::string>& lines) {
  std::vector<std::string> out;
  out.reserve(lines.size());
  for (const std::string& l : lines) out.push_back(clean(l));
  return out;
}

bool is_blank(std::string_view s) {
  return s.find_first_not_of(" \t\r\n") == std::string_view::npos;
}


void add_evidence(std::vector<std::string>& evidence, const std::string& line) {
  if (evidence.size() >= kMaxEvidence) return;
  for (const std::string& e : evidence) {
    if (e == line) return;
  }
  evidence.push_back(line);
}

std::string holders_text(const std::vector<std::pair<std::string, Bytes>>& holders) {
  if (holders.empty()) return "none recorded";
  std::string out;
  std::size_t named = std::min(holders.size(), kMaxHoldersNamed);
  for (std::size_t i = 0; i < named; ++i) {
    if (i > 0) out += ", ";
    out += fmt::format("{} held {}", holders[i].first, format_size(holders[i].second));
  }
  if (holders.size() > named) {
    Bytes rest = 0;
    for (std::size_t i = named; i < holders.size(); ++i) rest += holders[i].second;
    out += fmt::format(", and {} more held {}", holders.size() - named, format_size(rest));
  }
  return out;
}

// Replaces "{holders}" and "{0}".."{9}"; other braces stay as written.
std::string expand(std::string_view text, const std::vector<std::string>& groups,
                   const std::string& holders) {
  std::string out;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '{') {
      std::string_view rest = text.substr(i);
      if (rest.starts_with("{holders}")) {
        out += holders;
        i += 8;
        continue;
      }
      if (rest.size() >= 3 && rest[1] >= '0' && rest[1] <= '9' && rest[2] == '}') {
        std::size_t g = std::size_t(rest[1] - '0');
        if (g < groups.size()) out += groups[g];
        i += 2;
        continue;
      }
    }
    out.push_back(text[i]);
  }
  return out;
}

std::string shorten(std::string s, std::size_t max) {
  if (s.size() <= max) return s;
  s.resize(max - 3);
  return s + "...";
}

std::optional<CrashDiagnosis> try_rule(const CompiledRule& c, const CrashInput& in,
                                       const std::vector<std::string>& tail,
                                       const std::vector<std::string>& boot,
                                       const std::string& holders) {
  std::vector<std::size_t> hits;
  std::vector<std::string> groups;
  std::smatch m;
  for (std::size_t i = 0; i < tail.size(); ++i) {
    if (!std::regex_search(tail[i], m, c.pattern)) continue;
    if (hits.empty()) {
      for (const auto& g : m) groups.emplace_back(trim(g.str()));
    }
    hits.push_back(i);
  }
  if (hits.empty()) return std::nullopt;

  CrashDiagnosis d;
  if (c.requires_pattern) {
    const std::string* found = nullptr;
    for (std::size_t i = 0; i < boot.size() && !found; ++i) {
      if (std::regex_search(boot[i], *c.requires_pattern)) found = &in.boot_log[i];
    }
    for (std::size_t i = 0; i < tail.size() && !found; ++i) {
      if (std::regex_search(tail[i], *c.requires_pattern)) found = &in.log_tail[i];
    }
    if (!found) return std::nullopt;
    add_evidence(d.evidence, *found);
  }
  for (std::size_t i : hits) add_evidence(d.evidence, in.log_tail[i]);

  const CrashRule& r = *c.rule;
  d.signature = r.signature.empty() ? crash_signature_from_title(r.title) : r.signature;
  d.title = shorten(expand(r.title, groups, holders), kMaxTitleChars);
  d.explanation = expand(r.explanation, groups, holders);
  d.suggestion = expand(r.suggestion, groups, holders);
  return d;
}

struct SignalInfo {
  int number;
  const char* name;
  const char* title;  // empty: "Killed by <name>"
  const char* explanation;
  const char* suggestion;
};

const SignalInfo* find_signal(int number) {
  static const SignalInfo table[] = {
      {SIGSEGV, "SIGSEGV", "Segmentation fault",
       "The process touched memory it does not own, in native code: a Python extension or "
       "custom node, torch or a CUDA library, or the driver. Python code alone cannot do this.",
       "look for \"Fatal Python error: Segmentation fault\" and the frame under \"Current "
       "thread\"; update or remove recently added extensions or custom nodes; check that torch, "
       "its CUDA libraries and the driver go together"},
      {SIGBUS, "SIGBUS", "Bus error",
       "The process touched a mapping with nothing behind it: usually shared memory (/dev/shm) "
       "ran out (PyTorch DataLoader workers, vLLM and NCCL use it), or a memory-mapped model "
       "file was truncated or replaced while in use.",
       "in a container use --ipc=host or a larger --shm-size; check free space on /dev/shm; "
       "download the model file again if it was being replaced"},
      {SIGABRT, "SIGABRT", "Aborted",
       "The process aborted itself: an uncaught C++ exception (\"terminate called after throwing "
       "...\"), a failed assertion, or a fatal Python error.",
       "the lines just before the exit name the cause (\"what():\", an assertion, \"Fatal Python "
       "error\")"},
      {SIGILL, "SIGILL", "Illegal instruction",
       "The CPU met an instruction it does not have: a binary or wheel built for newer CPU "
       "features (AVX2, AVX-512) than this host's, or a corrupted binary.",
       "use a build for this CPU, or build from source on this host"},
      {SIGFPE, "SIGFPE", "Arithmetic exception",
       "Native code divided an integer by zero or hit a similar arithmetic fault.",
       "the last lines of the log show what it was doing; update the program"},
      {SIGKILL, "SIGKILL", "Killed (SIGKILL)",
       "Something sent SIGKILL: vramd stopping a service that ignored SIGTERM, a user, the "
       "container runtime, or the kernel OOM killer where vramd found no record of it.",
       "nothing to do if the stop was intended; otherwise look in dmesg for \"Out of memory: "
       "Killed process\""},
      {SIGTERM, "SIGTERM", "Terminated (SIGTERM)",
       "The process was asked to stop: by vramd, a user, systemd or the container runtime.",
       "nothing to do if the stop was intended"},
      {SIGINT, "SIGINT", "Interrupted (SIGINT)", "The process was interrupted, as by Ctrl-C.",
       "nothing to do if the stop was intended"},
      {SIGHUP, "SIGHUP", "Hung up (SIGHUP)",
       "The terminal or session the process belonged to closed.",
       "run the service under vramd (or systemd) rather than from a terminal"},
      {SIGQUIT, "SIGQUIT", "Quit (SIGQUIT)", "The process was told to quit and dump core.",
       "nothing to do if the stop was intended"},
      {SIGPIPE, "SIGPIPE", "Broken pipe (SIGPIPE)",
       "The process wrote to a pipe or socket that nobody reads any more, such as its log pipe "
       "after the reader exited.",
       "check what reads the service's output"},
      {SIGTRAP, "SIGTRAP", "", "", ""},
      {SIGUSR1, "SIGUSR1", "", "", ""},
      {SIGUSR2, "SIGUSR2", "", "", ""},
      {SIGALRM, "SIGALRM", "", "", ""},
      {SIGXCPU, "SIGXCPU", "CPU time limit exceeded (SIGXCPU)",
       "The process used up the CPU time its limits (ulimit -t, RLIMIT_CPU) allow.",
       "raise the limit"},
      {SIGXFSZ, "SIGXFSZ", "File size limit exceeded (SIGXFSZ)",
       "The process wrote a file larger than its limits (ulimit -f) allow.", "raise the limit"},
      {SIGSYS, "SIGSYS", "Bad system call (SIGSYS)",
       "A seccomp filter (container profile) refused a system call the process made.",
       "allow the call in the container's seccomp profile"},
  };
  for (const SignalInfo& s : table) {
    if (s.number == number) return &s;
  }
  return nullptr;
}

std::string signal_name(int number) {
  const SignalInfo* s = find_signal(number);
  return s ? s->name : fmt::format("{}", number);
}

// Lines that explain a native crash, plus the innermost frame faulthandler printed for the
// thread that crashed.
std::vector<std::string> native_crash_evidence(const CrashInput& in,
                                               const std::vector<std::string>& tail) {
  static const std::regex notable(
      "Fatal Python error|Segmentation fault|Bus error|core dumped|terminate called|what\\(\\):|"
      "Assertion .* failed|Illegal instruction",
      std::regex::ECMAScript | std::regex::optimize);
  std::vector<std::string> evidence;
  std::optional<std::size_t> frame;
  for (std::size_t i = 0; i < tail.size(); ++i) {
    if (tail[i].find("Current thread") == std::string::npos) continue;
    for (std::size_t j = i + 1; j < tail.size() && j < i + 3; ++j) {
      if (trim(tail[j]).starts_with("File \"")) {
        frame = j;
        break;
      }
    }
  }
  for (std::size_t i = 0; i < tail.size(); ++i) {
    if (std::regex_search(tail[i], notable) || frame == i) add_evidence(evidence, in.log_tail[i]);
  }
  return evidence;
}

void add_last_words(CrashDiagnosis& d, const CrashInput& in) {
  if (!d.evidence.empty()) return;
  for (auto it = in.log_tail.rbegin(); it != in.log_tail.rend(); ++it) {
    if (!is_blank(*it)) {
      d.evidence.push_back(*it);
      return;
    }
  }
}

CrashDiagnosis from_signal(int number, const CrashInput& in, const std::vector<std::string>& tail) {
  CrashDiagnosis d;
  const SignalInfo* s = find_signal(number);
  std::string name = signal_name(number);
  d.signature = "signal:" + name;
  if (s && *s->title) {
    d.title = s->title;
    d.explanation = s->explanation;
    d.suggestion = s->suggestion;
  } else {
    d.title = fmt::format("Killed by {}", s ? name : "signal " + name);
    d.explanation = fmt::format("The process ended on signal {}, which it did not handle.", name);
    d.suggestion = "find out what sent the signal";
  }
  d.evidence = native_crash_evidence(in, tail);
  add_last_words(d, in);
  return d;
}

struct PythonException {
  std::string type;
  std::string message;
  std::size_t line;                  // index into log_tail
  std::optional<std::size_t> frame;  // the innermost "File ..." line, where it was raised
  std::string frame_text;            // that line without its prefix and indent
};

// The last traceback whose exception line does not send the reader to an earlier one.
std::optional<PythonException> last_python_exception(const std::vector<std::string>& tail) {
  static const std::regex exception_line(
      R"(^([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)(?::\s*(.*))?$)",
      std::regex::ECMAScript | std::regex::optimize);
  static const std::regex points_above(
      R"(see (the )?(root cause|stack trace|traceback|error)s? \(?above)",
      std::regex::ECMAScript | std::regex::icase | std::regex::optimize);
  static constexpr std::string_view kHeader = "Traceback (most recent call last):";

  std::optional<PythonException> fallback;
  for (std::size_t h = tail.size(); h-- > 0;) {
    std::size_t at = tail[h].find(kHeader);
    if (at == std::string::npos) continue;
    // Multi-process servers prefix every line ("(EngineCore_DP0 pid=7) ", "[rank1]: "); lines
    // without the header's prefix belong to another process and are skipped.
    std::string_view prefix = std::string_view(tail[h]).substr(0, at);
    std::optional<std::size_t> frame;
    std::string_view frame_text;
    for (std::size_t j = h + 1; j < tail.size(); ++j) {
      std::string_view body = tail[j];
      if (!body.starts_with(prefix)) continue;
      body.remove_prefix(prefix.size());
      if (is_blank(body)) continue;
      if (body[0] == ' ' || body[0] == '\t') {
        if (trim(body).starts_with("File \"")) {
          frame = j;
          frame_text = trim(body);
        }
        continue;
      }
      std::match_results<std::string_view::const_iterator> m;
      if (std::regex_match(body.begin(), body.end(), m, exception_line)) {
        PythonException e{m[1].str(), m[2].str(), j, frame, std::string(frame_text)};
        if (!std::regex_search(e.message, points_above)) return e;
        if (!fallback) fallback = e;
      }
      break;
    }
  }
  return fallback;
}

CrashDiagnosis from_python_exception(const PythonException& e, const CrashInput& in) {
  CrashDiagnosis d;
  d.signature = "python-exception:" + e.type;
  d.title = shorten(e.message.empty() ? e.type : e.type + ": " + e.message, kMaxTitleChars);
  d.explanation = fmt::format("The service's last traceback ends in an uncaught {}", e.type);
  if (e.frame) d.explanation += fmt::format(" ({})", e.frame_text);
  if (!e.message.empty()) d.explanation += ": " + e.message;
  if (!d.explanation.ends_with('.')) d.explanation += '.';
  d.suggestion =
      "read the traceback in the log; to name this error next time, add a [[crash_rules]] entry "
      "for it";
  if (e.frame) d.evidence.push_back(in.log_tail[*e.frame]);
  d.evidence.push_back(in.log_tail[e.line]);
  return d;
}

CrashDiagnosis from_exit_code(int code, const CrashInput& in,
                              const std::vector<std::string>& tail) {
  CrashDiagnosis d;
  d.signature = fmt::format("exit:{}", code);
  if (code == 0) {
    d.title = "Exited with status 0";
    d.explanation =
        "The service ended on its own and reported success. A server is not expected to exit: "
        "something told it to, or its start command only launches it in the background.";
    d.suggestion =
        "make the start command run the server in the foreground (no '&', no 'docker run -d', "
        "no script that returns)";
  } else if (const SignalInfo* s = code > 128 ? find_signal(code - 128) : nullptr) {
    d.title = fmt::format("Exited with status {} (128+{})", code, s->name);
    d.explanation = fmt::format(
        "A wrapper (a shell or the container runtime) reports that the process it ran was killed "
        "by {}.{}{}",
        s->name, *s->explanation ? " " : "", s->explanation);
    d.suggestion = *s->suggestion ? s->suggestion : "find out what sent the signal";
    d.evidence = native_crash_evidence(in, tail);
  } else {
    d.title = fmt::format("Exited with status {}", code);
    d.explanation = fmt::format(
        "The service exited with status {} and left no error vramd recognises in the last lines "
        "of its log.",
        code);
    d.suggestion =
        "read the end of the service's log; to name this error next time, add a [[crash_rules]] "
        "entry for it";
  }
  add_last_words(d, in);
  return d;
}

}  // namespace

const std::vector<CrashRule>& builtin_crash_rules() { return builtin_table(); }

CrashDiagnosis diagnose_crash(const CrashInput& in, const std::vector<CrashRule>& config_rules) {
  if (in.oom_killed) {
    CrashDiagnosis d;
    d.signature = "host-oom";
    d.title = "Killed by the kernel OOM killer (host RAM)";
    d.explanation =
        "The host ran out of RAM, not GPU memory, and the kernel killed this process to free "
        "some. Models loaded or offloaded to system RAM (CPU offload, pinned memory, swap space, "
        "several services loading at once) are the usual cause.";
    d.suggestion =
        "give the host more RAM or swap, lower this service's RAM use (less CPU offload, smaller "
        "--swap-space or pinned memory), or stagger service starts";
    add_last_words(d, in);
    return d;
  }

  std::vector<std::string> tail = clean_all(in.log_tail);
  std::vector<std::string> boot = clean_all(in.boot_log);
  std::string holders = holders_text(in.gpu_holders);

  for (const CrashRule& r : config_rules) {
    std::optional<CompiledRule> c = compile(r, std::regex::ECMAScript);
    if (!c) continue;
    if (auto d = try_rule(*c, in, tail, boot, holders)) return *d;
  }
  for (const CompiledRule& c : compiled_builtins()) {
    if (auto d = try_rule(c, in, tail, boot, holders)) return *d;
  }

  if (in.signal) return from_signal(*in.signal, in, tail);
  // Status 0 is no crash, and 128+N is a wrapper's report of signal N: a traceback in the log is
  // then from earlier, not the cause.
  if (in.exit_code &&
      (*in.exit_code == 0 || (*in.exit_code > 128 && find_signal(*in.exit_code - 128)))) {
    return from_exit_code(*in.exit_code, in, tail);
  }
  if (auto e = last_python_exception(tail)) return from_python_exception(*e, in);
  if (in.exit_code) return from_exit_code(*in.exit_code, in, tail);

  CrashDiagnosis d;
  d.signature = "unknown";
  d.title = "Exited for an unknown reason";
  d.explanation = "Neither an exit status nor a signal was recorded, and the log names no error.";
  d.suggestion = "read the end of the service's log";
  add_last_words(d, in);
  return d;
}

std::optional<std::string> check_crash_rule(const CrashRule& r) {
  static const std::regex signature_chars("[a-z0-9][a-z0-9._-]*", std::regex::ECMAScript);
  if (r.title.empty()) return "a crash rule needs a title";
  if (r.pattern.empty()) return "a crash rule needs a pattern";
  if (!r.signature.empty() && !std::regex_match(r.signature, signature_chars)) {
    return fmt::format(
        "signature \"{}\": use lowercase letters, digits, '.', '_' and '-', like \"{}\"",
        r.signature, crash_signature_from_title(r.signature));
  }
  auto check = [](std::string_view field, const std::string& re) -> std::optional<std::string> {
    try {
      std::regex compiled(re, std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
      return fmt::format("{} \"{}\" is not a valid regular expression: {}", field, re, e.what());
    }
    return std::nullopt;
  };
  if (auto e = check("pattern", r.pattern)) return e;
  if (!r.requires_pattern.empty()) {
    if (auto e = check("requires", r.requires_pattern)) return e;
  }
  return std::nullopt;
}

std::string crash_signature_from_title(std::string_view title) {
  std::string out;
  bool dash = false;
  for (char ch : title) {
    auto c = static_cast<unsigned char>(ch);
    if (std::isalnum(c)) {
      if (dash && !out.empty()) out.push_back('-');
      dash = false;
      out.push_back(static_cast<char>(std::tolower(c)));
      if (out.size() >= 64) break;
    } else {
      dash = true;
    }
  }
  return out.empty() ? "custom" : out;
}

}  // namespace vramd
