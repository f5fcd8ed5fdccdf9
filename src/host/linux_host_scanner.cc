#include "host/linux_host_scanner.h"

#include <cctype>
#include <charconv>
#include <fstream>
#include <sstream>

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

HostSnapshot LinuxHostScanner::scan(const HostScanRequest& request) {
  HostSnapshot snap;
  snap.processes = procs_.read_all();  // sorted by pid
  for (ProcessInfo& p : snap.processes) {
    const CgroupIdentity& cg = p.cgroup;
    // Docker and Podman answer on the socket; containerd and CRI-O containers are not there.
    bool engine_known = cg.runtime == "docker" || cg.runtime == "podman" || cg.runtime.empty();
    if (cg.kind == CgroupIdentity::Kind::container && engine_known) docker_.fill(p.cgroup);
  }
  snap.listeners = find_listeners(procs_.root(), request.ports);
  for (const auto& [service, path] : request.pid_files) {
    if (auto pid = read_pid_file(path)) snap.pid_files.emplace_back(service, *pid);
  }
  MemInfo mem = procs_.read_meminfo();
  snap.mem_total = mem.total;
  snap.mem_available = mem.available;
  return snap;
}

}  // namespace vramd
