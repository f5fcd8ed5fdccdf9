#include "docker/docker_engine.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "host/docker.h"
#include "integration/test_util.h"

namespace vramd::testing {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace {

// Runs `cmd` through sh; its exit status and output (stdout and stderr together).
DockerRun shell(const std::string& cmd) {
  DockerRun r;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

std::string quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string find_program(const std::vector<std::string>& candidates) {
  for (const auto& c : candidates)
    if (c.find('/') != std::string::npos ? ::access(c.c_str(), X_OK) == 0
                                         : shell("command -v " + c).code == 0)
      return c;
  return "";
}

std::string docker_client() { return find_program({"/usr/bin/docker", "docker"}); }

// Copies `file` into `root` at the same path (and the target of a symlink beside it).
bool copy_into(const fs::path& root, const fs::path& file) {
  std::error_code ec;
  fs::path real = fs::canonical(file, ec);
  if (ec) return false;
  for (const fs::path& p : {file, real}) {
    fs::path dest = root / p.relative_path();
    fs::create_directories(dest.parent_path(), ec);
    fs::copy_file(real, dest, fs::copy_options::overwrite_existing, ec);
    if (ec) return false;
  }
  return true;
}

// The libraries `binary` loads, by `ldd`.
std::vector<std::string> libraries_of(const std::string& binary) {
  std::vector<std::string> out;
  std::istringstream in(shell("ldd " + quote(binary)).out);
  for (std::string line; std::getline(in, line);) {
    std::istringstream words(line);
    std::vector<std::string> w;
    for (std::string x; words >> x;) w.push_back(x);
    for (const auto& x : w)
      if (x.starts_with('/')) {
        out.push_back(x);
        break;
      }
  }
  return out;
}

// Mount points under `dir` (dockerd leaves its netns bind mount when killed), deepest first.
std::vector<std::string> mounts_under(const std::string& dir) {
  std::vector<std::string> out;
  std::ifstream in("/proc/self/mounts");
  for (std::string line; std::getline(in, line);) {
    std::istringstream words(line);
    std::string source, target;
    words >> source >> target;
    if (target.starts_with(dir + "/")) out.push_back(target);
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.size() > b.size(); });
  return out;
}

}  // namespace

DockerEngine& docker_engine() {
  static DockerEngine engine;
  return engine;
}

bool DockerEngine::start() {
  const char* engine = std::getenv("VRAMD_TEST_ENGINE");
  podman_ = engine && std::string(engine) == "podman";
  const char* daemon_name = podman_ ? "podman" : "dockerd";
  if (::geteuid() != 0) {
    why_ = fmt::format("{} needs root here (a rootless engine is not set up by the tests)",
                       daemon_name);
    unavailable_ = true;
    return false;
  }
  std::string dockerd = podman_ ? find_program({"/usr/bin/podman", "podman"})
                                : find_program({"/usr/sbin/dockerd", "/usr/bin/dockerd", "dockerd"});
  if (dockerd.empty()) {
    why_ = podman_ ? "no podman (Debian package podman; `make deps` installs it)"
                   : "no dockerd (Debian package docker.io; `make deps` installs it)";
    unavailable_ = true;
    return false;
  }
  if (docker_client().empty()) {
    why_ = "no docker client (Debian package docker.io)";
    unavailable_ = true;
    return false;
  }
  std::string busybox = find_program({"/bin/busybox", "/usr/bin/busybox"});
  if (busybox.empty() || shell("ldd " + busybox).out.find("not a dynamic") == std::string::npos) {
    why_ = "no static busybox (Debian package busybox-static)";
    unavailable_ = true;
    return false;
  }
  // What an earlier run left when it was killed before its teardown: engines whose dockerd is
  // gone (its own pid file names it), their mounts and directories.
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(build_dir(), ec)) {
    if (!entry.path().filename().string().starts_with("dk-")) continue;
    std::ifstream pid_file(entry.path() / "dockerd.pid");
    int old = 0;
    if (pid_file >> old && old > 1 && ::kill(old, 0) == 0) continue;  // still running: not ours
    for (const auto& m : mounts_under(entry.path().string())) ::umount2(m.c_str(), MNT_DETACH);
    fs::remove_all(entry.path(), ec);
  }
  // Short: the engine's socket and containerd's, under it, must fit in 108 bytes.
  std::string base = build_dir() + "/dk-XXXXXX";
  if (base.size() > 60) base = "/tmp/vramd-dk-XXXXXX";
  std::vector<char> tmpl(base.begin(), base.end());
  tmpl.push_back('\0');
  if (!mkdtemp(tmpl.data())) {
    why_ = "cannot make " + base;
    return false;
  }
  dir_ = tmpl.data();
  socket_ = dir_ + (podman_ ? "/podman.sock" : "/docker.sock");
  if (podman_) {
    // Podman's own config, private: storage under dir_ (vfs), no systemd (cgroupfs, events to a
    // file), runc, and limits a container may set without CAP_SYS_RESOURCE (podman's default
    // RLIMIT_NPROC/NOFILE of 1048576 is refused by the runtime where the tests run without it).
    std::ofstream(dir_ + "/containers.conf")
        << "[containers]\ndefault_ulimits = [\"nofile=1024:1024\", \"nproc=4096:4096\"]\n"
           "netns = \"none\"\n[engine]\nruntime = \"runc\"\ncgroup_manager = \"cgroupfs\"\n"
           "events_logger = \"file\"\n";
    std::ofstream(dir_ + "/storage.conf") << fmt::format(
        "[storage]\ndriver = \"vfs\"\ngraphroot = \"{0}/data\"\nrunroot = \"{0}/exec\"\n", dir_);
    std::ofstream(dir_ + "/dockerd.pid");  // written below, once forked
  }

  pid_ = fork();
  if (pid_ == 0) {
    setsid();  // a Ctrl-C of the test run reaches us, and we end dockerd ourselves
    prctl(PR_SET_PDEATHSIG, SIGTERM);  // and if we die first (a crash, kill -9), so does it
    FILE* log = fopen((dir_ + "/dockerd.log").c_str(), "w");
    if (log) {
      dup2(fileno(log), 1);
      dup2(fileno(log), 2);
    }
    if (podman_) {
      setenv("CONTAINERS_CONF", (dir_ + "/containers.conf").c_str(), 1);
      setenv("CONTAINERS_STORAGE_CONF", (dir_ + "/storage.conf").c_str(), 1);
      std::ofstream(dir_ + "/dockerd.pid") << getpid();
      std::vector<std::string> argv = {dockerd, "system", "service", "--time=0",
                                       "unix://" + socket_};
      std::vector<char*> args;
      for (auto& a : argv) args.push_back(a.data());
      args.push_back(nullptr);
      execv(dockerd.c_str(), args.data());
      _exit(127);
    }
    std::vector<std::string> argv = {dockerd,
                                     "--data-root", dir_ + "/data",
                                     "--exec-root", dir_ + "/exec",
                                     "-H", "unix://" + socket_,
                                     "--pidfile", dir_ + "/dockerd.pid",
                                     "--storage-driver=vfs", "--iptables=false",
                                     "--ip6tables=false", "--bridge=none",
                                     "--log-level=warn"};
    std::vector<char*> args;
    for (auto& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    execv(dockerd.c_str(), args.data());
    _exit(127);
  }
  bool up = eventually(
      [&] {
        int status = 0;
        if (waitpid(pid_, &status, WNOHANG) == pid_) {
          pid_ = -1;
          return true;  // it ended: checked below
        }
        auto r = http_request_unix(socket_, "GET", "/_ping", 1s);
        return r && r->status == 200;
      },
      30s);
  if (!up || pid_ < 0) {
    std::ifstream log(dir_ + "/dockerd.log");
    std::string text((std::istreambuf_iterator<char>(log)), {});
    why_ = fmt::format("{} did not start: {}", daemon_name,
                       text.substr(text.size() > 2000 ? text.size() - 2000 : 0));
    stop();
    return false;
  }

  // The image: busybox with its applets, and the fake servers with what they link.
  if (std::string error = import_rootfs(kImage, {build_dir() + "/fake-gpu-server"}); !error.empty()) {
    why_ = error;
    stop();
    return false;
  }
  return true;
}

std::string DockerEngine::import_rootfs(const std::string& image,
                                       const std::vector<std::string>& binaries) const {
  static int n = 0;
  fs::path root = fmt::format("{}/rootfs-{}", dir_, n++);
  std::error_code ec;
  fs::create_directories(root / "bin", ec);
  fs::create_directories(root / "tmp", ec);
  fs::create_directories(root / "opt", ec);
  fs::copy_file(find_program({"/bin/busybox", "/usr/bin/busybox"}), root / "bin/busybox", ec);
  if (ec) return "cannot copy busybox into the test image: " + ec.message();
  for (const char* applet : {"sh", "echo", "sleep", "cat", "ls", "kill", "true", "false", "env",
                             "[", "test", "touch"})
    fs::create_symlink("busybox", root / "bin" / applet, ec);
  for (const auto& binary : binaries) {
    fs::copy_file(binary, root / "opt" / fs::path(binary).filename(), ec);
    if (ec) return "cannot copy " + binary + " into the test image: " + ec.message();
    for (const auto& lib : libraries_of(binary))
      if (!copy_into(root, lib)) return "cannot copy " + lib + " into the test image";
  }
  auto imported = shell(fmt::format("tar -C {} -c . | {} -H unix://{} import - {}",
                                    quote(root.string()), docker_client(), socket_, image));
  fs::remove_all(root, ec);  // the engine has its own copy
  if (imported.code != 0) return "docker import failed: " + imported.out;
  return "";
}

DockerRun DockerEngine::cli(const std::vector<std::string>& args) const {
  std::string cmd = docker_client() + " -H unix://" + socket_;
  for (const auto& a : args) cmd += " " + quote(a);
  return shell(cmd);
}

nlohmann::json DockerEngine::inspect(const std::string& name) const {
  auto r = http_request_unix(socket_, "GET", "/v1.41/containers/" + name + "/json", 5s);
  if (!r || r->status != 200) return nlohmann::json::object();
  return nlohmann::json::parse(r->body, nullptr, false);
}

void DockerEngine::remove_all_containers() const {
  if (pid_ < 0) return;
  auto ids = cli({"ps", "-aq"});
  std::istringstream in(ids.out);
  std::vector<std::string> args = {"rm", "-f", "-v"};
  for (std::string id; in >> id;) args.push_back(id);
  if (args.size() > 3) cli(args);
}

void DockerEngine::stop() {
  if (pid_ > 0) {
    remove_all_containers();
    ::kill(pid_, SIGTERM);
    bool ended = eventually([&] { return waitpid(pid_, nullptr, WNOHANG) == pid_; }, 20s);
    if (!ended) {
      ::kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    pid_ = -1;
  }
  if (dir_.empty()) return;
  // Its containerd is its child; dockerd ends it. A netns bind mount may stay: unmount it.
  for (const auto& m : mounts_under(dir_)) ::umount2(m.c_str(), MNT_DETACH);
  std::error_code ec;
  fs::remove_all(dir_, ec);
  dir_.clear();
}

}  // namespace vramd::testing
