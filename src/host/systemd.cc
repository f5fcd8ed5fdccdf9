#include "host/systemd.h"

#include "host/subprocess.h"

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
  ProcessOutput r = run_process(argv, timeout);
  if (!r.spawn_error.empty()) return make_error(fmt::format("{}: {}", argv[0], r.spawn_error));
  if (r.timed_out)
    return make_error(fmt::format("{} did not finish in {} ms", command_text(argv), timeout.count()));
  return ToolRun{r.exit_code, std::move(r.out), std::move(r.err)};
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
