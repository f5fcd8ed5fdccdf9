// The real HostScanner: the process table, cgroups and container names, listening ports, pid
// files and memory, read from a proc root and the Docker (or Podman) socket.
#pragma once

#include <chrono>
#include <functional>
#include <set>
#include <string>
#include <unordered_map>

#include "host/docker.h"
#include "host/host_scanner.h"
#include "host/ports.h"
#include "host/proc_table.h"

namespace vramd {

class LinuxHostScanner : public HostScanner {
 public:
  explicit LinuxHostScanner(std::string proc_root = "/proc",
                            std::string docker_socket = "/var/run/docker.sock");
  LinuxHostScanner(std::string proc_root, DockerNames::Options docker);

  // Blocking: reads the processes asked for (or all); may ask the Docker socket (2 s at most).
  // What does not change while a process runs one program (comm, cmdline, user, cgroup,
  // container name) is read once per (pid, start ticks, command line). After that a scan reads
  // only /proc/PID/statm (its resident size) and /proc/PID/cmdline, through descriptors kept
  // open: a pread each, no path lookup, and far cheaper for the kernel than stat; statm fails
  // once that process is gone, even when its pid is reused, and a command line that differs
  // from the one read means the process exec'd another program (same pid, same start ticks: a
  // launcher that execs its server, a child seen between fork and exec), which is then read
  // afresh. Its parent is not read again: a parent changes only when it exits, and then the
  // walk reads the child's stat afresh. Descriptors are kept for /proc only, for at most
  // kKeptStatFiles processes; elsewhere (fixture roots) stat is read by path each scan, and a
  // comm other than the one read means an exec.
  static constexpr size_t kKeptStatFiles = 256;
  HostSnapshot scan(const HostScanRequest& request) override;

  ~LinuxHostScanner() override;
  LinuxHostScanner(const LinuxHostScanner&) = delete;
  LinuxHostScanner& operator=(const LinuxHostScanner&) = delete;

  size_t cached_processes() const { return cache_.size(); }
  size_t kept_stat_files() const { return kept_.size(); }

  // Where listening sockets come from. automatic: NETLINK_SOCK_DIAG when the proc root is
  // "/proc" (the same network namespace), else ROOT/net/tcp{,6}; and those files whenever
  // netlink fails. proc_files: always the files (the old way, kept for the bench and tests).
  enum class ListenerSource { automatic, proc_files };
  void set_listener_source(ListenerSource s) { listener_source_ = s; }
  // What the last scan with ports used: "netlink", "proc", "kept" (the last answer, see
  // kListenersRecheck) or "" (no port asked for yet).
  const std::string& last_listener_source() const { return last_source_; }
  // Why netlink was not used by the last scan that tried it ("" when it worked).
  const std::string& netlink_error() const { return netlink_error_; }
  const ListenerCache& listener_cache() const { return listener_cache_; }

  // Listening sockets are asked of the kernel (a dump of its LISTEN table) only when the answer
  // may have changed: the wanted ports changed, a process not in the last dump's candidates
  // appeared (a new GPU process, or a pid reused), or the last dump is older than
  // kListenersRecheck while a wanted port has no owner among the candidates (a server that binds
  // its port after loading, as vLLM does, is found within that) or kListenersRefresh otherwise
  // (a socket moved between two processes that both live on). In between, the last answer is
  // kept, less owners that are no longer candidates. bench/RESULTS.md, serve_cost.
  static constexpr std::chrono::seconds kListenersRecheck{5};
  static constexpr std::chrono::seconds kListenersRefresh{30};
  // Dumps (netlink or ROOT/net/tcp{,6}) so far.
  unsigned long long listener_dumps() const { return listener_dumps_; }
  // The clock deciding kListenersRecheck and kListenersRefresh (tests step it).
  using Clock = std::function<std::chrono::steady_clock::time_point()>;
  void set_clock(Clock clock) { clock_ = std::move(clock); }

 private:
  // `fresh`: read its stat even when a kept statm descriptor says it lives on.
  std::optional<ProcessInfo> read_cached(int pid, bool fresh = false);
  std::optional<std::string> read_stat_line(int pid);  // nullopt when gone
  // Through the kept statm; nullopt: none kept, gone, or its command line changed (an exec).
  std::optional<Bytes> read_kept_rss(int pid);
  // Opens statm and cmdline for `p` (read just now) when its command line still reads as `p`'s.
  void keep_files(const ProcessInfo& p);
  MemInfo read_meminfo();
  void forget(int pid);
  std::vector<std::pair<int, int>> listeners_for(const HostScanRequest& request,
                                                 const std::vector<ProcessInfo>& processes);

  ProcTable procs_;
  DockerNames docker_;
  std::unordered_map<int, ProcessInfo> cache_;
  struct KeptFiles {
    int statm = -1;       // open /proc/PID/statm
    int cmdline = -1;     // open /proc/PID/cmdline
    std::string argv;     // what cmdline read when kept (its first kArgvCompared bytes)
  };
  static constexpr size_t kArgvCompared = 4096;
  std::unordered_map<int, KeptFiles> kept_;  // by pid
  int meminfo_fd_ = -1;                      // open /proc/meminfo
  ListenerSource listener_source_ = ListenerSource::automatic;
  ListenerCache listener_cache_;
  std::string last_source_;
  std::string netlink_error_;
  // The last dump's question and answer (listeners_for).
  struct LastListeners {
    std::vector<int> ports;                              // sorted, unique
    std::set<std::pair<int, unsigned long long>> procs;  // candidates: (pid, start ticks)
    std::vector<std::pair<int, int>> found;              // (port, pid)
    bool all_owned = false;  // every wanted port had an owner among the candidates
    std::chrono::steady_clock::time_point at;
  };
  std::optional<LastListeners> last_listeners_;
  unsigned long long listener_dumps_ = 0;
  Clock clock_ = [] { return std::chrono::steady_clock::now(); };
};

// The first integer in a pid file ("1234\n"); nullopt when unreadable or not a positive pid.
std::optional<int> read_pid_file(const std::string& path);

}  // namespace vramd
