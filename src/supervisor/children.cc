#include "supervisor/children.h"

#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <csignal>

#include <algorithm>
#include <chrono>
#include <map>
#include <cstring>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <sstream>

#include "core/units.h"
#include "host/ports.h"
#include "host/proc_table.h"

extern char** environ;

namespace vramd {

const char* const kStartMarker = "---- vramd: starting ";

namespace {

bool executable(const std::string& path) { return access(path.c_str(), X_OK) == 0; }

std::optional<std::string> find_program(const std::string& name, const std::string& cwd) {
  if (name.find('/') != std::string::npos) {
    std::string p = name[0] == '/' || cwd.empty() ? name : cwd + "/" + name;
    return executable(p) ? std::optional(p) : std::nullopt;
  }
  const char* path = getenv("PATH");
  std::stringstream dirs(path ? path : "/usr/local/bin:/usr/bin:/bin");
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    if (dir.empty()) continue;
    std::string candidate = fmt::format("{}/{}", dir, name);
    if (executable(candidate)) return candidate;
  }
  return std::nullopt;
}

std::vector<std::string> read_lines(const std::string& path) {
  std::vector<std::string> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) out.push_back(line);
  return out;
}

}  // namespace

Result<Spawned> spawn_service(const ServiceConfig& svc, const std::string& log_path) {
  if (svc.start.empty()) return make_error("no start command");
  auto program = find_program(svc.start[0], svc.cwd);
  if (!program) return make_error(fmt::format("{}: no such program (or not executable)", svc.start[0]));
  if (!svc.cwd.empty() && !std::filesystem::is_directory(svc.cwd))
    return make_error(fmt::format("cwd {}: no such directory", svc.cwd));

  // Everything the child needs is prepared here: between fork and exec only async-signal-safe
  // calls are allowed (vramd has other threads).
  std::map<std::string, std::string> env;
  for (char** e = environ; *e; ++e) {
    std::string kv(*e);
    auto eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  if (!svc.env_file.empty()) {
    std::ifstream f(svc.env_file);
    if (!f) return make_error(fmt::format("env_file {}: cannot read it", svc.env_file));
    std::string line;
    while (std::getline(f, line)) {
      auto start = line.find_first_not_of(" \t");
      if (start == std::string::npos || line[start] == '#') continue;
      auto eq = line.find('=');
      if (eq == std::string::npos) continue;
      std::string key = line.substr(start, eq - start);
      if (key.starts_with("export ")) key = key.substr(7);
      std::string value = line.substr(eq + 1);
      if (value.size() >= 2 && (value.front() == '"' || value.front() == '\'') && value.back() == value.front())
        value = value.substr(1, value.size() - 2);
      env[key] = value;
    }
  }
  for (const auto& [k, v] : svc.env) env[k] = v;
  std::vector<std::string> env_strings;
  env_strings.reserve(env.size());
  for (const auto& [k, v] : env) env_strings.push_back(fmt::format("{}={}", k, v));
  std::vector<char*> envp;
  envp.reserve(env_strings.size() + 1);
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = svc.start;
  std::vector<char*> argv;
  argv.reserve(args.size() + 1);
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  std::optional<uid_t> uid;
  std::optional<gid_t> gid;
  if (!svc.user.empty()) {
    if (geteuid() != 0) return make_error(fmt::format("user = \"{}\" needs vramd to run as root", svc.user));
    struct passwd* pw = getpwnam(svc.user.c_str());
    if (!pw) return make_error(fmt::format("user {}: no such user", svc.user));
    uid = pw->pw_uid;
    gid = pw->pw_gid;
  }

  std::filesystem::create_directories(std::filesystem::path(log_path).parent_path());
  int log_fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640);
  if (log_fd < 0) return make_error(fmt::format("cannot open log {}: {}", log_path, strerror(errno)));
  std::string marker = fmt::format("{}{} at {} ----\n", kStartMarker, svc.name,
                                   format_rfc3339(std::chrono::time_point_cast<std::chrono::milliseconds>(
                                       std::chrono::system_clock::now())));
  (void)!write(log_fd, marker.data(), marker.size());
  int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  const char* cwd = svc.cwd.empty() ? nullptr : svc.cwd.c_str();
  std::string prog = *program;

  pid_t pid = fork();
  if (pid < 0) {
    close(log_fd);
    if (null_fd >= 0) close(null_fd);
    return make_error(fmt::format("fork: {}", strerror(errno)));
  }
  if (pid == 0) {
    setsid();  // its own session and process group: a stop signals the whole group
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    for (int s : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE, SIGCHLD}) signal(s, SIG_DFL);
    if (null_fd >= 0) dup2(null_fd, 0);
    dup2(log_fd, 1);
    dup2(log_fd, 2);
    // Nothing else of vramd's: its listening sockets held by a child would keep the next vramd
    // from binding its port after a restart (Asio opens sockets without O_CLOEXEC).
    if (syscall(SYS_close_range, 3u, ~0u, 0u) != 0)
      for (int fd = 3; fd < 65536; ++fd) close(fd);
    if (cwd && chdir(cwd) != 0) _exit(126);
    if (gid && (setgroups(1, &*gid) != 0 || setgid(*gid) != 0)) _exit(126);
    if (uid && setuid(*uid) != 0) _exit(126);
    execve(prog.c_str(), argv.data(), envp.data());
    _exit(127);
  }
  close(log_fd);
  if (null_fd >= 0) close(null_fd);
  Spawned s;
  s.pid = pid;
  if (auto p = read_process("/proc", pid)) s.start_ticks = p->start_ticks;
  return s;
}

Status write_pid_file(const std::string& path, const Spawned& s) {
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    out << s.pid << " " << s.start_ticks << "\n";
    if (!out) return make_error(fmt::format("cannot write {}", tmp));
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec) return make_error(fmt::format("cannot write {}: {}", path, ec.message()));
  return Ok{};
}

std::optional<Spawned> read_live_pid_file(const std::string& path) {
  std::ifstream in(path);
  Spawned s;
  if (!(in >> s.pid >> s.start_ticks) || s.pid <= 1) return std::nullopt;
  if (!process_alive("/proc", s.pid, s.start_ticks)) return std::nullopt;
  return s;
}

std::optional<std::pair<int, std::string>> port_taken(int port, const std::vector<int>& ours) {
  if (port <= 0) return std::nullopt;
  for (const auto& [p, pid] : find_listeners("/proc", {port})) {
    if (p != port) continue;
    if (std::find(ours.begin(), ours.end(), pid) != ours.end()) return std::nullopt;
    auto proc = read_process("/proc", pid);
    return std::pair{pid, proc ? fmt::format("{}[{}]", proc->comm, pid) : fmt::format("pid {}", pid)};
  }
  return std::nullopt;
}

void rotate_log(const std::string& path, uint64_t max_bytes) {
  std::error_code ec;
  auto size = std::filesystem::file_size(path, ec);
  if (ec || size <= max_bytes) return;
  std::filesystem::copy_file(path, path + ".1", std::filesystem::copy_options::overwrite_existing, ec);
  if (ec) return;
  if (truncate(path.c_str(), 0) != 0) return;
}

std::vector<std::string> log_tail(const std::string& path, size_t n) {
  std::vector<std::string> lines = read_lines(path);
  if (lines.size() < n) {
    std::vector<std::string> older = read_lines(path + ".1");
    size_t take = std::min(older.size(), n - lines.size());
    lines.insert(lines.begin(), older.end() - static_cast<long>(take), older.end());
  }
  if (lines.size() > n) lines.erase(lines.begin(), lines.end() - static_cast<long>(n));
  return lines;
}

std::vector<std::string> boot_lines(const std::string& path, size_t n) {
  std::vector<std::string> lines = read_lines(path);
  size_t start = 0;
  for (size_t i = 0; i < lines.size(); ++i)
    if (lines[i].starts_with(kStartMarker)) start = i + 1;
  std::vector<std::string> out(lines.begin() + static_cast<long>(start),
                               lines.begin() + static_cast<long>(std::min(lines.size(), start + n)));
  return out;
}

std::pair<std::vector<std::string>, uint64_t> log_since(const std::string& path, uint64_t offset) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return {{}, 0};
  in.seekg(0, std::ios::end);
  uint64_t size = static_cast<uint64_t>(in.tellg());
  if (offset > size) offset = 0;  // rotated: start again
  in.seekg(static_cast<std::streamoff>(offset));
  std::vector<std::string> out;
  std::string line;
  uint64_t pos = offset;
  while (std::getline(in, line)) {
    if (in.eof()) break;  // a partial last line waits for its newline
    pos += line.size() + 1;
    out.push_back(line);
  }
  return {out, pos};
}

LogPage read_log_page(const std::string& path, size_t lines, std::optional<uint64_t> after) {
  if (after) {
    auto [got, offset] = log_since(path, *after);
    return {std::move(got), offset};
  }
  LogPage page{log_tail(path, lines), 0};
  // The end of the last whole line: what `after` asks from next.
  std::ifstream in(path, std::ios::binary);
  if (!in) return page;
  in.seekg(0, std::ios::end);
  auto size = static_cast<uint64_t>(in.tellg());
  uint64_t from = size > 65536 ? size - 65536 : 0;
  std::string tail(size - from, '\0');
  in.seekg(static_cast<std::streamoff>(from));
  in.read(tail.data(), static_cast<std::streamsize>(tail.size()));
  auto nl = tail.rfind('\n');
  page.offset = nl == std::string::npos ? from : from + nl + 1;
  return page;
}

bool killed_by_oom_killer(int pid) {
  int fd = open("/dev/kmsg", O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return false;
  std::string needle = fmt::format("Killed process {} ", pid);
  char buf[8192];
  bool found = false;
  for (int i = 0; i < 100000; ++i) {
    ssize_t n = read(fd, buf, sizeof buf - 1);
    if (n < 0) {
      if (errno == EPIPE) continue;  // overwritten records: go on
      break;                         // EAGAIN: the end
    }
    buf[n] = 0;
    if (std::strstr(buf, needle.c_str())) found = true;
  }
  close(fd);
  return found;
}

}  // namespace vramd
