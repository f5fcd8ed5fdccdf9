// The real HostScanner: the process table, cgroups and container names, listening ports, pid
// files and memory, read from a proc root and the Docker (or Podman) socket.
#pragma once

#include <string>
#include <unordered_map>

#include "host/docker.h"
#include "host/host_scanner.h"
#include "host/proc_table.h"

namespace vramd {

class LinuxHostScanner : public HostScanner {
 public:
  explicit LinuxHostScanner(std::string proc_root = "/proc",
                            std::string docker_socket = "/var/run/docker.sock");
  LinuxHostScanner(std::string proc_root, DockerNames::Options docker);

  // Blocking: reads the processes asked for (or all); may ask the Docker socket (2 s at most).
  // What does not change in a process's life (comm, cmdline, user, cgroup, container name) is
  // read once per (pid, start ticks); each scan reads only /proc/PID/stat.
  HostSnapshot scan(const HostScanRequest& request) override;

  size_t cached_processes() const { return cache_.size(); }

 private:
  std::optional<ProcessInfo> read_cached(int pid);

  ProcTable procs_;
  DockerNames docker_;
  std::unordered_map<int, ProcessInfo> cache_;
};

// The first integer in a pid file ("1234\n"); nullopt when unreadable or not a positive pid.
std::optional<int> read_pid_file(const std::string& path);

}  // namespace vramd
