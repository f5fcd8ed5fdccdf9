// A private Docker Engine for the container tests: its own dockerd (own socket, data and exec
// roots under the build folder, vfs storage, no bridge, no iptables), or with
// VRAMD_TEST_ENGINE=podman Podman's Docker-compatible `podman system service` (its own config,
// storage and socket there too), one locally made image
// (busybox and the fake GPU servers, `docker import`ed, never pulled), and everything torn down
// after. Started once per run of vramd_docker_tests (tests/docker/main.cc).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace vramd::testing {

struct DockerRun {
  int code = -1;
  std::string out;  // stdout and stderr together
};

class DockerEngine {
 public:
  // The image every test runs: /bin/busybox (sh, sleep, echo, ...) and /fake-gpu-server with the
  // libraries it links.
  static constexpr char kImage[] = "vramd-test:fakes";

  // Starts dockerd and imports the image. On failure, `why()` says what went wrong and nothing
  // is left behind.
  bool start();
  // Removes every container, kills dockerd by its pid, unmounts and removes its directories.
  void stop();
  const std::string& why() const { return why_; }
  // After a failed start: whether it failed for what this machine lacks (not root, a package
  // not installed), which skips the tests, rather than an engine that is there and broke.
  bool unavailable() const { return unavailable_; }

  const std::string& socket() const { return socket_; }
  // `docker -H unix://SOCKET ARGS...` (Debian's client), stdout and stderr together.
  DockerRun cli(const std::vector<std::string>& args) const;
  // GET /v1.41/containers/NAME/json through the Engine API; an empty object when it fails.
  nlohmann::json inspect(const std::string& name) const;
  // Removes (forcefully) every container of the engine: tests start from none.
  void remove_all_containers() const;
  // Imports a rootfs of static busybox and `binaries` with the libraries each links (at their
  // paths on this machine) as `image`. An error message, or "" when it worked.
  std::string import_rootfs(const std::string& image, const std::vector<std::string>& binaries) const;
  // The engine runs Podman's service, not dockerd (VRAMD_TEST_ENGINE=podman).
  bool podman() const { return podman_; }
  // The engine's own directory (under the build folder).
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;     // under the build folder, short (unix socket paths are 108 bytes at most)
  std::string socket_;
  int pid_ = -1;        // dockerd (or `podman system service`), our child
  bool podman_ = false;  // VRAMD_TEST_ENGINE=podman: Podman's Docker-compatible service
  std::string why_;
  bool unavailable_ = false;
};

// The engine of this run (started by main before any test).
DockerEngine& docker_engine();

}  // namespace vramd::testing
