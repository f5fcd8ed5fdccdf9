// A fake of systemd's two tools for tests on machines without systemd (this one, CI's): one
// binary, `systemctl` or `journalctl` by the name it is run as (or its first argument). It runs
// real processes: `systemctl start` forks a manager (its own session) that runs the unit's
// ExecStart=, sends its output to the unit's journal, records how it ended the way systemd does
// (ExecMainCode/ExecMainStatus/Result), restarts it per Restart= after RestartSec=, and on
// `systemctl stop` sends SIGTERM, then SIGKILL after TimeoutStopSec=. What it prints follows the
// real tools' documented shapes: `systemctl show` KEY=VALUE lines (`--value`: values only),
// `journalctl -o json` one JSON object a line (__REALTIME_TIMESTAMP, MESSAGE, ...), `-o cat` the
// messages alone, `-o short` a syslog-like line. Units live in $FAKE_SYSTEMD_DIR/units/NAME
// (KEY=VALUE: ExecStart=, Restart=, RestartSec=, TimeoutStopSec=; ExecStart's words split on
// spaces, no quoting), state in $FAKE_SYSTEMD_DIR/state, journals in $FAKE_SYSTEMD_DIR/journal.
// Every call is logged to $FAKE_SYSTEMD_DIR/calls (one line each).
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

namespace {

std::string g_dir;

uint64_t now_us(clockid_t clock) {
  timespec ts{};
  clock_gettime(clock, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000u + static_cast<uint64_t>(ts.tv_nsec) / 1000u;
}

std::map<std::string, std::string> read_kv(const std::string& path) {
  std::map<std::string, std::string> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    auto eq = line.find('=');
    if (eq != std::string::npos && line[0] != '#') out[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return out;
}

void write_kv(const std::string& path, const std::map<std::string, std::string>& kv) {
  std::string tmp = path + ".tmp" + std::to_string(getpid());
  {
    std::ofstream out(tmp);
    for (const auto& [k, v] : kv) out << k << '=' << v << '\n';
  }
  rename(tmp.c_str(), path.c_str());
}

std::string unit_file(const std::string& u) { return g_dir + "/units/" + u; }
std::string state_file(const std::string& u) { return g_dir + "/state/" + u; }
std::string journal_file(const std::string& u) { return g_dir + "/journal/" + u; }

std::map<std::string, std::string> state_of(const std::string& u) {
  auto s = read_kv(state_file(u));
  auto def = [&](const char* k, const char* v) { s.emplace(k, v); };
  def("ActiveState", "inactive");
  def("SubState", "dead");
  def("MainPID", "0");
  def("ExecMainCode", "0");
  def("ExecMainStatus", "0");
  def("NRestarts", "0");
  def("Result", "success");
  def("ActiveEnterTimestampMonotonic", "0");
  def("InvocationID", "");
  return s;
}

// One journal entry: realtime µs, monotonic µs, invocation, pid, message (the rest of the line).
void journal(const std::string& unit, const std::string& invocation, int pid,
             const std::string& message) {
  std::string line = std::to_string(now_us(CLOCK_REALTIME)) + ' ' +
                     std::to_string(now_us(CLOCK_MONOTONIC)) + ' ' +
                     (invocation.empty() ? "-" : invocation) + ' ' + std::to_string(pid) + ' ' +
                     message + '\n';
  int fd = open(journal_file(unit).c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return;
  ssize_t ignored = write(fd, line.data(), line.size());  // one write: lines never interleave
  (void)ignored;
  close(fd);
}

std::string new_invocation() {
  std::random_device rd;
  char buf[33];
  for (int i = 0; i < 32; ++i) buf[i] = "0123456789abcdef"[rd() % 16];
  buf[32] = 0;
  return buf;
}

double seconds_of(const std::string& v, double def) {
  if (v.empty()) return def;
  double n = std::atof(v.c_str());
  if (v.ends_with("ms")) return n / 1000;
  if (v.ends_with("min")) return n * 60;
  return n;
}

bool is_clean_signal(int s) { return s == SIGHUP || s == SIGINT || s == SIGTERM || s == SIGPIPE; }

// systemd.service(5), Restart=: by the run's result.
bool shall_restart(const std::string& policy, const std::string& result) {
  if (policy == "always") return true;
  if (policy == "on-success") return result == "success";
  if (policy == "on-failure") return result != "success";
  if (policy == "on-abnormal") return result != "success" && result != "exit-code";
  if (policy == "on-abort") return result == "signal" || result == "core-dump";
  if (policy == "on-watchdog") return result == "watchdog";
  return false;
}

volatile sig_atomic_t g_stop = 0;
void on_term(int) { g_stop = 1; }

// The manager of one unit: runs ExecStart= until stopped or done.
[[noreturn]] void manage(const std::string& unit) {
  auto cfg = read_kv(unit_file(unit));
  std::vector<std::string> words;
  std::istringstream ws(cfg["ExecStart"]);
  for (std::string w; ws >> w;) words.push_back(w);
  std::string policy = cfg.count("Restart") ? cfg["Restart"] : "no";
  double restart_sec = seconds_of(cfg["RestartSec"], 0.1);
  double stop_sec = seconds_of(cfg["TimeoutStopSec"], 90);
  struct sigaction sa {};
  sa.sa_handler = on_term;
  sigaction(SIGTERM, &sa, nullptr);
  int restarts = 0;
  while (true) {
    int out[2];
    if (pipe2(out, O_CLOEXEC) != 0) _exit(1);
    std::string invocation = new_invocation();
    pid_t child = fork();
    if (child == 0) {
      dup2(out[1], 1);
      dup2(out[1], 2);
      std::vector<char*> argv;
      for (auto& w : words) argv.push_back(w.data());
      argv.push_back(nullptr);
      signal(SIGTERM, SIG_DFL);
      execv(argv[0], argv.data());
      fprintf(stderr, "Failed to execute %s: %s\n", argv[0], strerror(errno));
      _exit(203);  // systemd's EXIT_EXEC
    }
    close(out[1]);
    auto s = state_of(unit);
    s["ActiveState"] = "active";
    s["SubState"] = "running";
    s["MainPID"] = std::to_string(child);
    s["ExecMainCode"] = "0";
    s["ExecMainStatus"] = "0";
    s["Result"] = "success";
    s["NRestarts"] = std::to_string(restarts);
    s["ActiveEnterTimestampMonotonic"] = std::to_string(now_us(CLOCK_MONOTONIC));
    s["InvocationID"] = invocation;
    s["ManagerPID"] = std::to_string(getpid());
    write_kv(state_file(unit), s);
    journal(unit, "", 1, "Started " + unit + ".");
    // Its output, line by line, into the journal (a thread: the manager waits on the child).
    std::thread reader([unit, invocation, child, fd = out[0]] {
      std::string buf;
      char chunk[4096];
      ssize_t n;
      while ((n = read(fd, chunk, sizeof chunk)) > 0 || (n < 0 && errno == EINTR)) {
        if (n < 0) continue;
        buf.append(chunk, static_cast<size_t>(n));
        size_t nl;
        while ((nl = buf.find('\n')) != std::string::npos) {
          journal(unit, invocation, child, buf.substr(0, nl));
          buf.erase(0, nl + 1);
        }
      }
      if (!buf.empty()) journal(unit, invocation, child, buf);
      close(fd);
    });
    int status = 0;
    bool stopping = false, killed = false;
    auto stop_deadline = std::chrono::steady_clock::now();
    while (true) {
      pid_t r = waitpid(child, &status, WNOHANG);
      if (r == child) break;
      if (g_stop && !stopping) {
        stopping = true;
        s["ActiveState"] = "deactivating";
        s["SubState"] = "stop-sigterm";
        write_kv(state_file(unit), s);
        journal(unit, "", 1, "Stopping " + unit + "...");
        kill(child, SIGTERM);
        stop_deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(static_cast<int>(stop_sec * 1000));
      }
      if (stopping && !killed && std::chrono::steady_clock::now() >= stop_deadline) {
        journal(unit, "", 1, unit + ": State 'stop-sigterm' timed out. Killing.");
        kill(child, SIGKILL);
        killed = true;
      }
      usleep(10000);
    }
    reader.join();
    std::string code, result;
    int exec_code = 1, exec_status = 0;
    if (WIFEXITED(status)) {
      exec_status = WEXITSTATUS(status);
      code = "exited";
      result = exec_status == 0 ? "success" : "exit-code";
    } else {
      exec_status = WTERMSIG(status);
      exec_code = WCOREDUMP(status) ? 3 : 2;
      code = WCOREDUMP(status) ? "dumped" : "killed";
      result = is_clean_signal(exec_status) ? "success" : WCOREDUMP(status) ? "core-dump" : "signal";
    }
    if (stopping) result = killed ? "timeout" : "success";
    s = state_of(unit);
    s["MainPID"] = "0";
    s["ExecMainCode"] = std::to_string(exec_code);
    s["ExecMainStatus"] = std::to_string(exec_status);
    s["Result"] = result;
    if (result != "success" || !stopping)
      journal(unit, "", 1,
              unit + ": Main process exited, code=" + code + ", status=" +
                  std::to_string(exec_status) +
                  (code == "exited" ? (exec_status ? "/FAILURE" : "/SUCCESS") : ""));
    bool again = !stopping && !g_stop && shall_restart(policy, result);
    if (result != "success") journal(unit, "", 1, unit + ": Failed with result '" + result + "'.");
    if (!again) {
      s["ActiveState"] = result == "success" ? "inactive" : "failed";
      s["SubState"] = result == "success" ? "dead" : "failed";
      s.erase("ManagerPID");
      write_kv(state_file(unit), s);
      journal(unit, "", 1, (stopping ? "Stopped " : "") + unit + (stopping ? "." : ": Deactivated."));
      _exit(0);
    }
    s["ActiveState"] = "activating";
    s["SubState"] = "auto-restart";
    write_kv(state_file(unit), s);
    for (int i = 0; i < static_cast<int>(restart_sec * 100) && !g_stop; ++i) usleep(10000);
    if (g_stop) {
      s["ActiveState"] = "inactive";
      s["SubState"] = "dead";
      s.erase("ManagerPID");
      write_kv(state_file(unit), s);
      _exit(0);
    }
    ++restarts;
    journal(unit, "", 1,
            unit + ": Scheduled restart job, restart counter is at " + std::to_string(restarts) + ".");
  }
}

bool manager_alive(const std::map<std::string, std::string>& s) {
  auto it = s.find("ManagerPID");
  if (it == s.end()) return false;
  int pid = std::atoi(it->second.c_str());
  return pid > 0 && kill(pid, 0) == 0;
}

int start(const std::string& unit) {
  if (access(unit_file(unit).c_str(), R_OK) != 0) {
    fprintf(stderr, "Failed to start %s: Unit %s not found.\n", unit.c_str(), unit.c_str());
    return 5;
  }
  auto s = state_of(unit);
  if (manager_alive(s)) return 0;  // active (or restarting): nothing to do
  std::string before = s["InvocationID"];
  pid_t pid = fork();
  if (pid == 0) {
    setsid();
    if (fork() != 0) _exit(0);
    int devnull = open("/dev/null", O_RDWR);
    dup2(devnull, 0);
    dup2(devnull, 1);
    dup2(devnull, 2);
    manage(unit);
  }
  waitpid(pid, nullptr, 0);
  // systemctl waits for the start job: for Type=simple, until the process is forked.
  for (int i = 0; i < 1000; ++i) {
    auto now = state_of(unit);
    if (now["InvocationID"] != before && now["ActiveState"] == "active") return 0;
    usleep(10000);
  }
  fprintf(stderr, "Job for %s failed.\n", unit.c_str());
  return 1;
}

int stop(const std::string& unit) {
  auto s = state_of(unit);
  if (!manager_alive(s)) return 0;
  kill(std::atoi(s["ManagerPID"].c_str()), SIGTERM);
  // systemctl waits for the stop job: until the unit is inactive (or failed).
  while (manager_alive(state_of(unit))) usleep(10000);
  return 0;
}

int systemctl(std::vector<std::string> args) {
  bool value = false;
  std::vector<std::string> props, rest;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--user" || a == "--system" || a == "--no-pager" || a == "-q" || a == "--quiet") continue;
    if (a == "--value") {
      value = true;
    } else if ((a == "-p" || a == "--property") && i + 1 < args.size()) {
      std::istringstream ps(args[++i]);
      for (std::string p; std::getline(ps, p, ',');) props.push_back(p);
    } else if (a.starts_with("--property=")) {
      std::istringstream ps(a.substr(11));
      for (std::string p; std::getline(ps, p, ',');) props.push_back(p);
    } else if (a != "--") {
      rest.push_back(a);
    }
  }
  if (rest.size() < 2) {
    fprintf(stderr, "fake systemctl: usage: systemctl start|stop|restart|show|is-active UNIT\n");
    return 1;
  }
  const std::string& verb = rest[0];
  int rc = 0;
  bool first = true;
  for (size_t u = 1; u < rest.size(); ++u) {
    const std::string& unit = rest[u];
    if (verb == "start") {
      rc = std::max(rc, start(unit));
    } else if (verb == "stop") {
      rc = std::max(rc, stop(unit));
    } else if (verb == "restart") {
      stop(unit);
      rc = std::max(rc, start(unit));
    } else if (verb == "is-active") {
      auto s = state_of(unit);
      printf("%s\n", s["ActiveState"].c_str());
      if (s["ActiveState"] != "active") rc = 3;
    } else if (verb == "show") {
      auto s = state_of(unit);
      bool exists = access(unit_file(unit).c_str(), R_OK) == 0;
      auto cfg = read_kv(unit_file(unit));
      s["Id"] = unit;
      s["LoadState"] = exists ? "loaded" : "not-found";
      s["Restart"] = cfg.count("Restart") ? cfg["Restart"] : "no";
      if (!manager_alive(s) && (s["ActiveState"] == "active" || s["ActiveState"] == "activating")) {
        s["ActiveState"] = "failed";  // its manager was killed: as if systemd lost it
        s["SubState"] = "failed";
        s["MainPID"] = "0";
      }
      if (!first) printf("\n");  // units' blocks are separated by an empty line
      first = false;
      std::vector<std::string> keys = props;
      if (keys.empty())
        for (const auto& [k, v] : s) keys.push_back(k);
      for (const auto& k : keys) {
        auto it = s.find(k);
        std::string v = it == s.end() ? "" : it->second;
        if (value)
          printf("%s\n", v.c_str());
        else
          printf("%s=%s\n", k.c_str(), v.c_str());
      }
    } else {
      fprintf(stderr, "fake systemctl: unknown command %s\n", verb.c_str());
      return 1;
    }
  }
  return rc;
}

struct Entry {
  uint64_t realtime = 0, monotonic = 0;
  std::string invocation;
  int pid = 0;
  std::string message;
};

std::vector<Entry> entries(const std::string& unit) {
  std::vector<Entry> out;
  std::ifstream in(journal_file(unit));
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    Entry e;
    if (!(ls >> e.realtime >> e.monotonic >> e.invocation >> e.pid)) continue;
    ls.get();
    std::getline(ls, e.message);
    if (e.invocation == "-") e.invocation.clear();
    out.push_back(std::move(e));
  }
  return out;
}

// "@1700000000.25" (seconds since the epoch, systemd.time(7)): µs.
std::optional<uint64_t> parse_time(const std::string& t) {
  if (t.empty() || t[0] != '@') return std::nullopt;
  return static_cast<uint64_t>(std::strtold(t.c_str() + 1, nullptr) * 1e6L);
}

void print(const Entry& e, const std::string& unit, const std::string& output) {
  if (output == "cat") {
    printf("%s\n", e.message.c_str());
  } else if (output == "json") {
    nlohmann::json j = {{"__CURSOR", "s=fake;i=" + std::to_string(e.realtime)},
                        {"__REALTIME_TIMESTAMP", std::to_string(e.realtime)},
                        {"__MONOTONIC_TIMESTAMP", std::to_string(e.monotonic)},
                        {"PRIORITY", "6"},
                        {"_PID", std::to_string(e.pid)},
                        {"MESSAGE", e.message}};
    if (e.pid == 1) {
      j["UNIT"] = unit;
      j["SYSLOG_IDENTIFIER"] = "systemd";
    } else {
      j["_SYSTEMD_UNIT"] = unit;
      j["_SYSTEMD_INVOCATION_ID"] = e.invocation;
      j["SYSLOG_IDENTIFIER"] = unit.substr(0, unit.rfind('.'));
    }
    printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    time_t secs = static_cast<time_t>(e.realtime / 1000000);
    char when[64];
    tm t{};
    localtime_r(&secs, &t);
    strftime(when, sizeof when, "%b %d %H:%M:%S", &t);
    printf("%s fakehost %s[%d]: %s\n", when,
           e.pid == 1 ? "systemd" : unit.substr(0, unit.rfind('.')).c_str(), e.pid,
           e.message.c_str());
  }
  fflush(stdout);
}

int journalctl(const std::vector<std::string>& args) {
  std::string unit, output = "short";
  size_t n = SIZE_MAX;
  bool follow = false;
  std::optional<uint64_t> since, until;
  auto value = [&](size_t& i, const std::string& a, const std::string& longname) -> std::string {
    if (a.starts_with(longname + "=")) return a.substr(longname.size() + 1);
    return i + 1 < args.size() ? args[++i] : "";
  };
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "-u" || a.starts_with("--unit")) {
      unit = value(i, a, "--unit");
    } else if (a == "-n" || a.starts_with("--lines")) {
      n = std::strtoull(value(i, a, "--lines").c_str(), nullptr, 10);
    } else if (a == "-o" || a.starts_with("--output")) {
      output = value(i, a, "--output");
    } else if (a == "-f" || a == "--follow") {
      follow = true;
    } else if (a == "-S" || a.starts_with("--since")) {
      since = parse_time(value(i, a, "--since"));
    } else if (a == "-U" || a.starts_with("--until")) {
      until = parse_time(value(i, a, "--until"));
    }
  }
  if (unit.empty()) {
    fprintf(stderr, "fake journalctl: only -u UNIT is supported\n");
    return 1;
  }
  std::vector<Entry> shown;
  for (auto& e : entries(unit))
    if ((!since || e.realtime >= *since) && (!until || e.realtime <= *until)) shown.push_back(e);
  size_t from = shown.size() > n ? shown.size() - n : 0;
  uint64_t last = 0;
  for (size_t i = from; i < shown.size(); ++i) {
    print(shown[i], unit, output);
    last = shown[i].realtime;
  }
  while (follow) {
    usleep(100000);
    for (auto& e : entries(unit))
      if (e.realtime > last) {
        print(e, unit, output);
        last = e.realtime;
      }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const char* dir = std::getenv("FAKE_SYSTEMD_DIR");
  if (!dir || !*dir) {
    fprintf(stderr, "fake systemd: set FAKE_SYSTEMD_DIR\n");
    return 1;
  }
  g_dir = dir;
  for (const char* d : {"/units", "/state", "/journal"}) mkdir((g_dir + d).c_str(), 0755);
  std::string name = argv[0];
  name = name.substr(name.rfind('/') + 1);
  std::vector<std::string> args(argv + 1, argv + argc);
  if ((name != "systemctl" && name != "journalctl") && !args.empty()) {
    name = args[0];
    args.erase(args.begin());
  }
  {
    std::ofstream calls(g_dir + "/calls", std::ios::app);
    calls << name;
    for (const auto& a : args) calls << ' ' << a;
    calls << '\n';
  }
  if (name == "systemctl") return systemctl(args);
  if (name == "journalctl") return journalctl(args);
  fprintf(stderr, "fake systemd: run me as systemctl or journalctl\n");
  return 1;
}
