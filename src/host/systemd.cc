#include "host/systemd.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <csignal>

#include <cerrno>
#include <charconv>
#include <cstring>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace vramd {

namespace {

constexpr const char* kShowProperties =
    "LoadState,ActiveState,SubState,MainPID,ExecMainCode,ExecMainStatus,NRestarts,Result,Restart,"
    "ActiveEnterTimestampMonotonic,InvocationID";

template <typename T>
bool number(std::string_view v, T& out) {
  if (v.empty()) {  // systemd prints an unset number as "" in some versions, "0" in others
    out = 0;
    return true;
  }
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  return ec == std::errc() && p == v.data() + v.size();
}

std::vector<std::string> base(const SystemdTools& t, bool journal) {
  std::vector<std::string> argv = {journal ? t.journalctl : t.systemctl};
  if (t.user) argv.emplace_back("--user");
  return argv;
}

std::string first_line(const std::string& s) {
  auto nl = s.find('\n');
  return s.substr(0, nl == std::string::npos ? s.size() : nl);
}

std::string command_text(const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& a : argv) out += (out.empty() ? "" : " ") + a;
  return out;
}

}  // namespace

Result<UnitShow> parse_systemctl_show(std::string_view text) {
  UnitShow u;
  bool has_active = false;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    std::string_view line = text.substr(pos, eol - pos);
    pos = eol + 1;
    size_t eq = line.find('=');
    if (eq == std::string_view::npos) continue;
    std::string_view k = line.substr(0, eq), v = line.substr(eq + 1);
    bool ok = true;
    if (k == "LoadState") {
      u.load_state = v;
    } else if (k == "ActiveState") {
      u.active_state = v;
      has_active = !v.empty();
    } else if (k == "SubState") {
      u.sub_state = v;
    } else if (k == "MainPID") {
      ok = number(v, u.main_pid);
    } else if (k == "ExecMainCode") {
      ok = number(v, u.exec_main_code);
    } else if (k == "ExecMainStatus") {
      ok = number(v, u.exec_main_status);
    } else if (k == "NRestarts") {
      ok = number(v, u.n_restarts);
    } else if (k == "Result") {
      u.result = v;
    } else if (k == "Restart") {
      u.restart = v;
    } else if (k == "ActiveEnterTimestampMonotonic") {
      ok = number(v, u.active_enter_mono);
    } else if (k == "InvocationID") {
      u.invocation_id = v;
    }
    if (!ok)
      return make_error(fmt::format("systemctl show: {} is not a number: '{}'", k,
                                    v.substr(0, 40)));
  }
  if (!has_active) return make_error("systemctl show: no ActiveState in its output");
  return u;
}

std::optional<JournalLine> parse_journal_json_line(std::string_view line) {
  auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return std::nullopt;
  JournalLine out;
  auto ts = j.find("__REALTIME_TIMESTAMP");
  if (ts == j.end() || !ts->is_string()) return std::nullopt;
  const auto& s = ts->get_ref<const std::string&>();
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out.realtime_us);
  if (s.empty() || ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
  auto m = j.find("MESSAGE");
  if (m == j.end() || m->is_null()) return out;  // a field too large is null: an empty line
  if (m->is_string()) {
    out.message = m->get<std::string>();
  } else if (m->is_array()) {  // not valid UTF-8: its bytes
    for (const auto& b : *m) {
      if (!b.is_number_unsigned() || b.get<uint64_t>() > 255) return std::nullopt;
      out.message += static_cast<char>(b.get<uint64_t>());
    }
  } else {
    return std::nullopt;
  }
  return out;
}

Result<ToolRun> run_tool(const std::vector<std::string>& argv, std::chrono::milliseconds timeout) {
  if (argv.empty() || argv[0].empty()) return make_error("no command");
  int out_pipe[2], err_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0) return make_error(std::string("pipe: ") + strerror(errno));
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) {
    ::close(out_pipe[0]);
    ::close(out_pipe[1]);
    return make_error(std::string("pipe: ") + strerror(errno));
  }
  std::vector<char*> args;
  args.reserve(argv.size() + 1);
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(out_pipe[1], STDOUT_FILENO);
    ::dup2(err_pipe[1], STDERR_FILENO);
    int devnull = ::open("/dev/null", O_RDONLY);
    if (devnull >= 0) ::dup2(devnull, STDIN_FILENO);
    if (::syscall(SYS_close_range, 3u, ~0u, 0u) != 0)  // none of vramd's sockets and files
      for (int fd = 3; fd < 65536; ++fd) ::close(fd);
    ::execvp(args[0], args.data());
    static const char kMsg[] = "exec failed\n";
    ssize_t ignored = ::write(STDERR_FILENO, kMsg, sizeof kMsg - 1);
    (void)ignored;
    ::_exit(127);
  }
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  if (pid < 0) {
    ::close(out_pipe[0]);
    ::close(err_pipe[0]);
    return make_error(std::string("fork: ") + strerror(errno));
  }
  ToolRun run;
  bool timed_out = false;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  int open_fds = 2;
  char buffer[8192];
  while (open_fds > 0) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      ::kill(pid, SIGKILL);
      break;
    }
    int n = ::poll(fds, 2, static_cast<int>(left.count()));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      ssize_t got = ::read(fds[i].fd, buffer, sizeof buffer);
      if (got > 0) {
        (i == 0 ? run.out : run.err).append(buffer, static_cast<size_t>(got));
      } else if (got == 0 || (errno != EINTR && errno != EAGAIN)) {
        ::close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      }
    }
  }
  for (pollfd& f : fds)
    if (f.fd >= 0) ::close(f.fd);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out)
    return make_error(fmt::format("{} did not finish in {} ms", command_text(argv), timeout.count()));
  if (WIFEXITED(status)) run.exit_code = WEXITSTATUS(status);
  if (run.exit_code == 127 && run.err == "exec failed\n")
    return make_error(fmt::format("{}: cannot run it (not found, or not executable)", argv[0]));
  return run;
}

Result<UnitShow> show_unit(const SystemdTools& t, const std::string& unit,
                           std::chrono::milliseconds timeout) {
  auto argv = base(t, false);
  argv.insert(argv.end(), {"show", "-p", kShowProperties, "--", unit});
  auto r = run_tool(argv, timeout);
  if (!r) return make_error(r.error());
  if (r->exit_code != 0)
    return make_error(fmt::format("{} exited with {}: {}", command_text(argv), r->exit_code,
                                  first_line(r->err)));
  auto u = parse_systemctl_show(r->out);
  if (!u) return make_error(fmt::format("{}: {}", unit, u.error()));
  return u;
}

Result<std::string> systemctl_action(const SystemdTools& t, const std::string& action,
                                     const std::string& unit, std::chrono::milliseconds timeout) {
  auto argv = base(t, false);
  argv.insert(argv.end(), {action, "--", unit});
  auto r = run_tool(argv, timeout);
  std::string text = command_text(argv);
  if (!r) return make_error(r.error());
  if (r->exit_code != 0)
    return make_error(fmt::format("{} exited with {}: {}", text, r->exit_code, first_line(r->err)));
  return text;
}

Result<std::vector<JournalLine>> journal_lines(const SystemdTools& t, const std::string& unit,
                                               size_t lines, uint64_t after_us,
                                               std::chrono::milliseconds timeout) {
  auto argv = base(t, true);
  argv.insert(argv.end(), {"-u", unit, "-n", std::to_string(lines), "-o", "json", "--no-pager"});
  // --since takes the moment itself too: the line at after_us comes again and is left out.
  if (after_us) argv.push_back(fmt::format("--since=@{}.{:06}", after_us / 1000000, after_us % 1000000));
  auto r = run_tool(argv, timeout);
  if (!r) return make_error(r.error());
  if (r->exit_code != 0)
    return make_error(fmt::format("{} exited with {}: {}", command_text(argv), r->exit_code,
                                  first_line(r->err)));
  std::vector<JournalLine> out;
  std::string_view text = r->out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    std::string_view line = text.substr(pos, eol - pos);
    pos = eol + 1;
    if (line.empty()) continue;
    auto l = parse_journal_json_line(line);
    if (!l) continue;  // not an entry (a "-- No entries --" hint)
    if (after_us && l->realtime_us <= after_us) continue;
    out.push_back(std::move(*l));
  }
  return out;
}

Result<std::vector<std::string>> journal_messages(const SystemdTools& t, const std::string& unit,
                                                  size_t lines, int64_t until_s,
                                                  std::chrono::milliseconds timeout) {
  auto argv = base(t, true);
  argv.insert(argv.end(), {"-u", unit, "-n", std::to_string(lines), "-o", "cat", "--no-pager"});
  if (until_s > 0) argv.push_back(fmt::format("--until=@{}", until_s));
  auto r = run_tool(argv, timeout);
  if (!r) return make_error(r.error());
  if (r->exit_code != 0)
    return make_error(fmt::format("{} exited with {}: {}", command_text(argv), r->exit_code,
                                  first_line(r->err)));
  std::vector<std::string> out;
  size_t pos = 0;
  const std::string& text = r->out;
  while (pos < text.size()) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string::npos) eol = text.size();
    out.push_back(text.substr(pos, eol - pos));
    pos = eol + 1;
  }
  if (out.size() == 1 && out[0] == "-- No entries --") out.clear();
  return out;
}

}  // namespace vramd
