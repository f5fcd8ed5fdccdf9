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
  for (const auto& [pid, fd] : statm_fds_) ::close(fd);
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
  if (auto it = statm_fds_.find(pid); it != statm_fds_.end()) {
    ::close(it->second);
    statm_fds_.erase(it);
  }
}

std::optional<std::string> LinuxHostScanner::read_stat_line(int pid) {
  std::ifstream in(procs_.root() + "/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!in || !std::getline(in, line) || line.empty()) return std::nullopt;
  return line;
}

std::optional<Bytes> LinuxHostScanner::read_kept_rss(int pid) {
  auto it = statm_fds_.find(pid);
  if (it == statm_fds_.end()) return std::nullopt;
  char buf[256];
  ssize_t n = ::pread(it->second, buf, sizeof buf - 1, 0);
  // Gone (ESRCH), even if its pid is taken again: read afresh.
  if (n <= 0) return std::nullopt;
  // "size resident shared text lib data dt", in pages.
  std::string_view text(buf, static_cast<size_t>(n));
  size_t sp = text.find(' ');
  unsigned long long pages = 0;
  if (sp == std::string_view::npos) return std::nullopt;
  auto [ptr, ec] = std::from_chars(text.data() + sp + 1, text.data() + text.size(), pages);
  if (ec != std::errc()) return std::nullopt;
  return static_cast<Bytes>(pages) * static_cast<Bytes>(sysconf(_SC_PAGESIZE));
}

void LinuxHostScanner::keep_statm(int pid) {
  // A fixture root's files may be rewritten under the same name: kept for /proc only.
  if (procs_.root() != "/proc" || statm_fds_.size() >= kKeptStatFiles || statm_fds_.count(pid))
    return;
  std::string path = procs_.root() + "/" + std::to_string(pid) + "/statm";
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd >= 0) statm_fds_.emplace(pid, fd);
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
  }
  std::optional<std::string> line = read_stat_line(pid);
  if (!line) {
    forget(pid);
    return std::nullopt;
  }
  auto stat = parse_stat(*line);
  if (!stat) return std::nullopt;
  if (it != cache_.end() && it->second.start_ticks == stat->start_ticks) {
    ProcessInfo& p = it->second;
    p.ppid = stat->ppid;
    if (stat->rss_pages) p.rss = *stat->rss_pages * static_cast<Bytes>(sysconf(_SC_PAGESIZE));
    if (p.cgroup.kind == CgroupIdentity::Kind::container && p.cgroup.container_name.empty())
      docker_.fill(p.cgroup);  // the engine was down before; DockerNames limits its retries
    keep_statm(pid);
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
  keep_statm(pid);
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
    for (auto it = statm_fds_.begin(); it != statm_fds_.end();) {
      if (seen.count(it->first)) {
        ++it;
      } else {
        ::close(it->second);
        it = statm_fds_.erase(it);
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
