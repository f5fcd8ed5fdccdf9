#include "host/cuda_checkpoint.h"

#include <cctype>
#include <string>

#include <fmt/format.h>

#include "host/subprocess.h"

namespace vramd {

// In a namespace of its own: a unity batch shares one translation unit with systemd.cc's helpers.
namespace cuda_checkpoint {

constexpr std::size_t kMaxWords = 400;  // a --help dumped as an error stays one readable line

std::string_view trim(std::string_view s) {
  const char* space = " \t\r\n";
  std::size_t b = s.find_first_not_of(space);
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(space) - b + 1);
}

// What the utility said, on one line: its stderr, else its stdout.
std::string words(const ProcessOutput& r) {
  std::string_view said = trim(r.err);
  if (said.empty()) said = trim(r.out);
  std::string line;
  for (char c : said) {
    if (c == '\n') {
      line += "; ";
    } else if (c != '\r') {
      line += c;
    }
  }
  if (line.size() > kMaxWords) line = line.substr(0, kMaxWords) + "...";
  return line;
}

std::string command_text(const std::vector<std::string>& argv) {
  std::string out;
  for (const std::string& a : argv) out += (out.empty() ? "" : " ") + a;
  return out;
}

std::string first_line(std::string_view s) {
  s = trim(s);
  return std::string(s.substr(0, s.find('\n')));
}

}  // namespace cuda_checkpoint

std::string_view to_string(CudaProcessState s) {
  switch (s) {
    case CudaProcessState::running:
      return "running";
    case CudaProcessState::locked:
      return "locked";
    case CudaProcessState::checkpointed:
      return "checkpointed";
    case CudaProcessState::failed:
      return "failed";
  }
  return "?";
}

Result<CudaProcessState> parse_cuda_process_state(std::string_view text) {
  std::string_view word = cuda_checkpoint::trim(text);
  for (CudaProcessState s : {CudaProcessState::running, CudaProcessState::locked,
                             CudaProcessState::checkpointed, CudaProcessState::failed}) {
    if (word == to_string(s)) return s;
  }
  std::string shown(word.substr(0, 80));
  return make_error(fmt::format("not a CUDA process state: \"{}\"{}", shown,
                                word.size() > shown.size() ? "..." : ""));
}

Result<CheckpointHelp> parse_cuda_checkpoint_help(std::string_view help) {
  CheckpointHelp h;
  // "Version 570.86.10. Copyright (C) 2025 NVIDIA Corporation."
  if (std::size_t v = help.find("Version "); v != std::string_view::npos) {
    std::size_t b = v + 8, e = b;
    while (e < help.size() &&
           (std::isdigit(static_cast<unsigned char>(help[e])) != 0 || help[e] == '.'))
      ++e;
    h.version = help.substr(b, e - b);
    while (!h.version.empty() && h.version.back() == '.') h.version.pop_back();
  }
  bool action = help.find("--action") != std::string_view::npos;
  bool toggle = help.find("--toggle") != std::string_view::npos;
  bool get_state = help.find("--get-state") != std::string_view::npos;
  if (action && get_state) {
    h.form = CheckpointForm::action;
  } else if (toggle && get_state) {
    h.form = CheckpointForm::toggle;
  } else if (toggle) {
    // 550.54's utility: a toggle does not say which way it went, and nothing tells the state.
    return make_error("it offers --toggle but no --get-state, so a toggle could go the wrong way");
  } else {
    return make_error(fmt::format("its --help names neither --action nor --toggle (\"{}\")",
                                  cuda_checkpoint::first_line(help)));
  }
  return h;
}

Result<CudaCheckpoint> CudaCheckpoint::probe(const std::string& path, CheckpointTimeouts timeouts) {
  auto not_offered = [](const std::string& why) {
    return make_error("suspend is not offered: " + why);
  };
  if (path.empty()) return not_offered("no cuda-checkpoint is configured ([gpu] cuda_checkpoint)");
  ProcessOutput r = run_process({path, "--help"}, timeouts.call);
  if (!r.spawn_error.empty()) return not_offered(path + ": " + r.spawn_error);
  if (r.timed_out)
    return not_offered(
        fmt::format("{} --help did not answer in {} ms", path, timeouts.call.count()));
  // No driver, or one too old ("Insufficient driver"), or no libcuda.so.1 (the loader's words).
  if (r.exit_code != 0)
    return not_offered(fmt::format("{} --help failed: {} (exit {})", path,
                                   cuda_checkpoint::words(r), r.exit_code));
  Result<CheckpointHelp> help = parse_cuda_checkpoint_help(r.out + r.err);
  if (!help) return not_offered(path + ": " + help.error());
  return CudaCheckpoint(path, help->form, help->version, timeouts);
}

Result<std::string> CudaCheckpoint::run(const std::vector<std::string>& args,
                                        Duration timeout) const {
  std::vector<std::string> argv = {path_};
  argv.insert(argv.end(), args.begin(), args.end());
  ProcessOutput r = run_process(argv, timeout);
  std::string command = cuda_checkpoint::command_text(argv);
  if (!r.spawn_error.empty()) return make_error(command + ": " + r.spawn_error);
  // Killed: what it was doing may or may not have happened (the caller reads the state again).
  if (r.timed_out)
    return make_error(
        fmt::format("{} did not finish in {} ms and was killed", command, timeout.count()));
  if (r.exit_code < 0) return make_error(command + " was killed by a signal");
  if (r.exit_code != 0) {
    std::string said = cuda_checkpoint::words(r);
    return make_error(
        fmt::format("{}: {} (exit {})", command, said.empty() ? "no message" : said, r.exit_code));
  }
  return std::move(r.out);
}

Result<CudaProcessState> CudaCheckpoint::state(int pid) const {
  Result<std::string> out = run({"--get-state", "--pid", std::to_string(pid)}, timeouts_.call);
  if (!out) return make_error(out.error());
  Result<CudaProcessState> s = parse_cuda_process_state(*out);
  if (!s) return make_error(fmt::format("{} --get-state --pid {}: {}", path_, pid, s.error()));
  return s;
}

std::string CudaCheckpoint::put_back(int pid) const {
  std::string p = std::to_string(pid);
  Result<CudaProcessState> s = state(pid);
  if (!s) return "its CUDA state is unknown: " + s.error();
  std::string done;
  switch (*s) {
    case CudaProcessState::running:
      return "it is still running";
    case CudaProcessState::failed:
      return "its CUDA state is failed: the driver gave up on it";
    case CudaProcessState::checkpointed:
      if (form_ == CheckpointForm::toggle) {
        Result<std::string> t = run({"--toggle", "--pid", p}, timeouts_.copy);
        if (!t) return "it is left checkpointed: toggling it back failed: " + t.error();
        done = "toggled back";
        break;
      }
      if (Result<std::string> r = run({"--action", "restore", "--pid", p}, timeouts_.copy); !r)
        return "it is left checkpointed: restoring it failed: " + r.error();
      done = "restored and ";
      [[fallthrough]];
    case CudaProcessState::locked:
      if (form_ == CheckpointForm::toggle) return "it is left locked (this utility has no unlock)";
      if (Result<std::string> u = run({"--action", "unlock", "--pid", p}, timeouts_.call); !u)
        return "it is left locked: unlocking it failed: " + u.error();
      done += "unlocked";
      break;
  }
  Result<CudaProcessState> again = state(pid);
  if (!again) return "it was " + done + ", then its CUDA state is unknown: " + again.error();
  if (*again != CudaProcessState::running)
    return fmt::format("it was {}, yet its CUDA state is {}", done, to_string(*again));
  return "it was " + done + " and runs again";
}

Status CudaCheckpoint::suspend(int pid, Duration lock_timeout) const {
  Result<CudaProcessState> before = state(pid);
  if (!before) return make_error(fmt::format("pid {}: not suspended: {}", pid, before.error()));
  if (*before == CudaProcessState::checkpointed) return Ok{};
  if (*before != CudaProcessState::running)
    return make_error(
        fmt::format("pid {}: not suspended: its CUDA state is {}", pid, to_string(*before)));
  std::string p = std::to_string(pid);
  Result<std::string> step;
  if (form_ == CheckpointForm::action) {
    // The lock waits for work already submitted, up to lock_timeout; the utility gets a call's
    // time on top before it is killed.
    step = run({"--action", "lock", "--pid", p, "--timeout", std::to_string(lock_timeout.count())},
               lock_timeout + timeouts_.call);
    if (step) step = run({"--action", "checkpoint", "--pid", p}, timeouts_.copy);
  } else {
    step = run({"--toggle", "--pid", p}, timeouts_.copy);
  }
  std::string failure;
  if (!step) {
    failure = step.error();
  } else {
    Result<CudaProcessState> after = state(pid);
    if (after && *after == CudaProcessState::checkpointed) return Ok{};
    failure = after ? fmt::format("its CUDA state is {} after the checkpoint", to_string(*after))
                    : after.error();
  }
  return make_error(fmt::format("pid {}: not suspended: {}; {}", pid, failure, put_back(pid)));
}

Status CudaCheckpoint::resume(int pid) const {
  Result<CudaProcessState> before = state(pid);
  if (!before) return make_error(fmt::format("pid {}: not resumed: {}", pid, before.error()));
  std::string p = std::to_string(pid);
  Result<std::string> step;
  switch (*before) {
    case CudaProcessState::running:
      return Ok{};
    case CudaProcessState::failed:
      return make_error(fmt::format("pid {}: not resumed: its CUDA state is failed", pid));
    case CudaProcessState::locked:
      if (form_ == CheckpointForm::toggle)
        return make_error(
            fmt::format("pid {}: not resumed: it is locked and this utility has no unlock", pid));
      step = run({"--action", "unlock", "--pid", p}, timeouts_.call);
      break;
    case CudaProcessState::checkpointed:
      if (form_ == CheckpointForm::toggle) {
        step = run({"--toggle", "--pid", p}, timeouts_.copy);
        break;
      }
      step = run({"--action", "restore", "--pid", p}, timeouts_.copy);
      if (step) step = run({"--action", "unlock", "--pid", p}, timeouts_.call);
      break;
  }
  Result<CudaProcessState> after = state(pid);
  if (step && after && *after == CudaProcessState::running) return Ok{};
  std::string now = after ? fmt::format("its CUDA state is {}", to_string(*after))
                          : "its CUDA state is unknown: " + after.error();
  return make_error(fmt::format("pid {}: not resumed: {}{}", pid,
                                step ? std::string() : step.error() + "; ", now));
}

}  // namespace vramd
