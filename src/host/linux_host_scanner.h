// The real HostScanner: the process table, cgroups and container names, listening ports, pid
// files and memory, read from a proc root and the Docker (or Podman) socket.
#pragma once

#include <string>

#include "host/docker.h"
#include "host/host_scanner.h"
#include "host/proc_table.h"

namespace vramd {

class LinuxHostScanner : public HostScanner {
 public:
  explicit LinuxHostScanner(std::string proc_root = "/proc",
                            std::string docker_socket = "/var/run/docker.sock");
  LinuxHostScanner(std::string proc_root, DockerNames::Options docker);

  // Blocking: reads the whole process table; may ask the Docker socket (2 s at most).
  HostSnapshot scan(const HostScanRequest& request) override;

 private:
  ProcTable procs_;
  DockerNames docker_;
};

// The first integer in a pid file ("1234\n"); nullopt when unreadable or not a positive pid.
std::optional<int> read_pid_file(const std::string& path);

}  // namespace vramd
