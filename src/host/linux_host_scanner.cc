#include "host/linux_host_scanner.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstring>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "host/ports.h"

namespace vramd {

LinuxHostScanner::LinuxHostScanner(std::string proc_root, std::string docker_socket)
    : procs_(std::move(proc_root)), docker_([&] {
        DockerNames::Options o;
        o.socket_path = std::move(docker_socket);
        return o;
      }()) {}

LinuxHostScanner::LinuxHostScanner(std::string proc_root, DockerNames::Options docker)
    : procs_(std::move(proc_root)), docker_(std::move(docker)) {}

std::optional<int> read_pid_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t start = 0;
  while (start < text.size() && std::isspace(static_cast<unsigned char>(text[start]))) ++start;
  int pid = 0;
  auto [ptr, ec] = std::from_chars(text.data() + start, text.data() + text.size(), pid);
  if (ec != std::errc() || ptr == text.data() + start || pid <= 0) return std::nullopt;
  return pid;
}

LinuxHostScanner::~LinuxHostScanner() {
  for (const auto& [pid, files] : kept_) {
    ::close(files.statm);
    ::close(files.cmdline);
  }
  if (meminfo_fd_ >= 0) ::close(meminfo_fd_);
}

MemInfo LinuxHostScanner::read_meminfo() {
  // On /proc through a kept descriptor (a pread each sample); a fixture's file by path.
  if (procs_.root() != "/proc") return procs_.read_meminfo();
  if (meminfo_fd_ < 0) meminfo_fd_ = ::open("/proc/meminfo", O_RDONLY | O_CLOEXEC);
  char buf[8192];
  ssize_t n = meminfo_fd_ >= 0 ? ::pread(meminfo_fd_, buf, sizeof buf, 0) : -1;
  if (n <= 0) return procs_.read_meminfo();
  return parse_meminfo(std::string(buf, static_cast<size_t>(n)));
}

void LinuxHostScanner::forget(int pid) {
  cache_.erase(pid);
  if (auto it = kept_.find(pid); it != kept_.end()) {
    ::close(it->second.statm);
    ::close(it->second.cmdline);
    kept_.erase(it);
  }
}

namespace {

// The first LinuxHostScanner::kArgvCompared bytes /proc/PID/cmdline reads through `fd`; nullopt
// when it does not read (the process is gone).
std::optional<std::string> pread_argv(int fd, size_t limit) {
  std::string buf(limit, '\0');
  ssize_t n = ::pread(fd, buf.data(), buf.size(), 0);
  if (n < 0) return std::nullopt;
  buf.resize(static_cast<size_t>(n));
  return buf;
}

// argv as ProcTable joins it: trailing NULs dropped, the others read as spaces.
std::string joined_argv(std::string argv) {
  while (!argv.empty() && argv.back() == '\0') argv.pop_back();
  std::replace(argv.begin(), argv.end(), '\0', ' ');
  return argv;
}

}  // namespace

std::optional<std::string> LinuxHostScanner::read_stat_line(int pid) {
  std::ifstream in(procs_.root() + "/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!in || !std::getline(in, line) || line.empty()) return std::nullopt;
  return line;
}

std::optional<Bytes> LinuxHostScanner::read_kept_rss(int pid) {
  auto it = kept_.find(pid);
  if (it == kept_.end()) return std::nullopt;
  char buf[256];
  ssize_t n = ::pread(it->second.statm, buf, sizeof buf - 1, 0);
  // Gone (ESRCH), even if its pid is taken again: read afresh.
  if (n <= 0) return std::nullopt;
  // "size resident shared text lib data dt", in pages.
  std::string_view text(buf, static_cast<size_t>(n));
  size_t sp = text.find(' ');
  unsigned long long pages = 0;
  if (sp == std::string_view::npos) return std::nullopt;
  auto [ptr, ec] = std::from_chars(text.data() + sp + 1, text.data() + text.size(), pages);
  if (ec != std::errc()) return std::nullopt;
  // The same process may run another program now: exec keeps its pid and start ticks.
  char argv[kArgvCompared];
  ssize_t m = ::pread(it->second.cmdline, argv, sizeof argv, 0);
  if (m < 0 || std::string_view(argv, static_cast<size_t>(m)) != it->second.argv) {
    forget(pid);  // read afresh
    return std::nullopt;
  }
  return static_cast<Bytes>(pages) * static_cast<Bytes>(sysconf(_SC_PAGESIZE));
}

void LinuxHostScanner::keep_files(const ProcessInfo& p) {
  // A fixture root's files may be rewritten under the same name: kept for /proc only.
  if (procs_.root() != "/proc" || kept_.size() >= kKeptStatFiles || kept_.count(p.pid)) return;
  std::string dir = procs_.root() + "/" + std::to_string(p.pid);
  KeptFiles files;
  files.statm = ::open((dir + "/statm").c_str(), O_RDONLY | O_CLOEXEC);
  files.cmdline = ::open((dir + "/cmdline").c_str(), O_RDONLY | O_CLOEXEC);
  std::optional<std::string> argv;
  if (files.cmdline >= 0) argv = pread_argv(files.cmdline, kArgvCompared);
  // Kept only when what cmdline reads now is what `p` was read with: an exec in between would
  // otherwise pass for the program read before it.
  bool same = argv && (argv->size() == kArgvCompared ? p.cmdline.starts_with(joined_argv(*argv))
                                                     : joined_argv(*argv) == p.cmdline);
  if (files.statm < 0 || !same) {
    if (files.statm >= 0) ::close(files.statm);
    if (files.cmdline >= 0) ::close(files.cmdline);
    return;
  }
  files.argv = std::move(*argv);
  kept_.emplace(p.pid, std::move(files));
}

std::optional<ProcessInfo> LinuxHostScanner::read_cached(int pid, bool fresh) {
  auto it = cache_.find(pid);
  // The fast path: a process read before, whose kept statm descriptor still reads (so it is the
  // same process): its resident size from statm, the rest as it was. Its parent changes only
  // when that parent exits, which the walk sees (scan, `fresh`).
  if (!fresh && it != cache_.end()) {
    if (auto rss = read_kept_rss(pid)) {
      it->second.rss = *rss;
      return it->second;
    }
    it = cache_.find(pid);  // an exec was seen: forgotten
  }
  std::optional<std::string> line = read_stat_line(pid);
  if (!line) {
    forget(pid);
    return std::nullopt;
  }
  auto stat = parse_stat(*line);
  if (!stat) return std::nullopt;
  // The same process when its start ticks and its comm are those read (another comm: it exec'd).
  if (it != cache_.end() && it->second.start_ticks == stat->start_ticks &&
      it->second.comm == stat->comm) {
    ProcessInfo& p = it->second;
    p.ppid = stat->ppid;
    if (stat->rss_pages) p.rss = *stat->rss_pages * static_cast<Bytes>(sysconf(_SC_PAGESIZE));
    if (p.cgroup.kind == CgroupIdentity::Kind::container && p.cgroup.container_name.empty())
      docker_.fill(p.cgroup);  // the engine was down before; DockerNames limits its retries
    keep_files(p);
    return p;
  }
  forget(pid);  // a new process, or the pid was reused
  auto full = procs_.read(pid);
  if (!full) return std::nullopt;
  const CgroupIdentity& cg = full->cgroup;
  // Docker and Podman answer on the socket; containerd and CRI-O containers are not there.
  bool engine_known = cg.runtime == "docker" || cg.runtime == "podman" || cg.runtime.empty();
  if (cg.kind == CgroupIdentity::Kind::container && engine_known) docker_.fill(full->cgroup);
  cache_[pid] = *full;
  keep_files(*full);
  return full;
}

std::vector<std::pair<int, int>> LinuxHostScanner::listeners_for(
    const HostScanRequest& request, const std::vector<ProcessInfo>& processes) {
  std::vector<int> ports = request.ports;
  std::sort(ports.begin(), ports.end());
  ports.erase(std::unique(ports.begin(), ports.end()), ports.end());
  std::set<std::pair<int, unsigned long long>> procs;
  std::set<int> alive;
  for (const auto& p : processes) {
    procs.emplace(p.pid, p.start_ticks);
    alive.insert(p.pid);
  }
  auto now = clock_();
  if (last_listeners_ && last_listeners_->ports == ports &&
      std::includes(last_listeners_->procs.begin(), last_listeners_->procs.end(), procs.begin(),
                    procs.end()) &&
      now - last_listeners_->at <
          (last_listeners_->all_owned ? kListenersRefresh : kListenersRecheck)) {
    std::vector<std::pair<int, int>> kept;
    for (const auto& [port, pid] : last_listeners_->found)
      if (alive.count(pid)) kept.emplace_back(port, pid);
    last_source_ = "kept";
    return kept;
  }
  ++listener_dumps_;
  std::optional<std::vector<TcpListener>> sockets;
  if (listener_source_ == ListenerSource::automatic && procs_.root() == "/proc") {
    netlink_error_.clear();
    sockets = netlink_tcp_listeners(&netlink_error_);
    if (sockets) last_source_ = "netlink";
  }
  if (!sockets) {
    sockets = proc_tcp_listeners(procs_.root());
    last_source_ = "proc";
  }
  std::vector<int> candidates(alive.begin(), alive.end());
  auto found = match_listeners(procs_.root(), ports, *sockets,
                               request.all_processes ? nullptr : &candidates, &listener_cache_);
  std::set<int> owned;
  for (const auto& [port, pid] : found) owned.insert(port);
  last_listeners_ = LastListeners{std::move(ports), std::move(procs), found, false, now};
  last_listeners_->all_owned = owned.size() == last_listeners_->ports.size();
  return found;
}

HostSnapshot LinuxHostScanner::scan(const HostScanRequest& request) {
  HostSnapshot snap;
  // An unreadable proc root reads as "no processes", which is not what the host has.
  if (::access(procs_.root().c_str(), R_OK | X_OK) != 0) {
    snap.error = fmt::format("cannot read {}: {}", procs_.root(), std::strerror(errno));
    return snap;
  }
  if (request.all_processes) {
    snap.processes = procs_.read_all();  // sorted by pid
    for (ProcessInfo& p : snap.processes) {
      const CgroupIdentity& cg = p.cgroup;
      bool engine_known = cg.runtime == "docker" || cg.runtime == "podman" || cg.runtime.empty();
      if (cg.kind == CgroupIdentity::Kind::container && engine_known) docker_.fill(p.cgroup);
    }
  } else {
    // The wanted pids and their ancestors: a GPU process belongs to whatever its parents match.
    std::unordered_map<int, bool> seen;
    for (int pid : request.pids) {
      std::optional<ProcessInfo> child;  // the process whose parent `pid` is
      for (int depth = 0; pid > 0 && depth < 64 && !seen.count(pid); ++depth) {
        auto p = read_cached(pid);
        if (!p && child) {
          // Its parent is gone: the child was reparented (to init or a subreaper). Read the
          // child's parent afresh and go on from there.
          auto again = read_cached(child->pid, /*fresh=*/true);
          if (again && again->ppid != pid) {
            snap.processes.back() = *again;
            pid = again->ppid;
            child = std::move(again);
            continue;
          }
        }
        seen[pid] = true;
        if (!p) break;
        pid = p->ppid;
        snap.processes.push_back(*p);
        child = std::move(p);
      }
    }
    std::sort(snap.processes.begin(), snap.processes.end(),
              [](const ProcessInfo& a, const ProcessInfo& b) { return a.pid < b.pid; });
    std::erase_if(cache_, [&](const auto& entry) { return !seen.count(entry.first); });
    for (auto it = kept_.begin(); it != kept_.end();) {
      if (seen.count(it->first)) {
        ++it;
      } else {
        ::close(it->second.statm);
        ::close(it->second.cmdline);
        it = kept_.erase(it);
      }
    }
  }
  if (!request.ports.empty()) {
    snap.listeners = listeners_for(request, snap.processes);
  } else {
    listener_cache_ = {};
    last_listeners_.reset();
    last_source_.clear();
  }
  for (const auto& [service, path] : request.pid_files) {
    if (auto pid = read_pid_file(path)) snap.pid_files.emplace_back(service, *pid);
  }
  MemInfo mem = read_meminfo();
  snap.mem_total = mem.total;
  snap.mem_available = mem.available;
  return snap;
}

}  // namespace vramd
