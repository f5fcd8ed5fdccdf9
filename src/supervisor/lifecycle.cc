#include "supervisor/lifecycle.h"

#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <csignal>

#include <fmt/format.h>

#include "host/docker.h"

namespace vramd {

namespace {

// `systemctl ACTION UNIT`, waited for up to a minute. Runs on a worker thread.
std::pair<bool, std::string> run_systemctl(const std::string& action, const std::string& unit) {
  pid_t pid = fork();
  if (pid < 0) return {false, "fork failed"};
  if (pid == 0) {
    if (syscall(SYS_close_range, 3u, ~0u, 0u) != 0)  // none of vramd's sockets and files
      for (int fd = 3; fd < 65536; ++fd) close(fd);
    execlp("systemctl", "systemctl", action.c_str(), unit.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  for (int i = 0; i < 600; ++i) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return {true, fmt::format("systemctl {} {}", action, unit)};
      return {false, fmt::format("systemctl {} {} exited with {}", action, unit,
                                 WIFEXITED(status) ? WEXITSTATUS(status) : -1)};
    }
    usleep(100'000);
  }
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  return {false, fmt::format("systemctl {} {} did not finish in 60 s", action, unit)};
}

class LocalLifecycle final : public LifecycleBackend {
 public:
  explicit LocalLifecycle(std::string docker_socket) : socket_(std::move(docker_socket)) {}

  LifecycleDone run(const Lifecycle& lc) override {
    LifecycleDone done{lc.service, lc.action, false, ""};
    std::string action = to_string(lc.action);
    if (lc.via == Control::unit) {
      auto [ok, message] = run_systemctl(action, lc.target);
      done.ok = ok;
      done.message = message;
    } else {
      // The engine answers a stop or restart once the container has stopped (and started
      // again): after at most stop_timeout, when it kills it. 304: nothing to do.
      auto t = std::chrono::duration_cast<std::chrono::seconds>(lc.stop_timeout).count();
      std::string target = fmt::format("/v1.41/containers/{}/{}", lc.target, action);
      if (lc.action != Command::start) target += fmt::format("?t={}", t);
      auto r = http_request_unix(socket_, "POST", target, std::chrono::seconds(60 + t));
      done.ok = r && (r->status / 100 == 2 || r->status == 304);
      done.changed = !(r && r->status == 304);
      if (!r)
        done.message = r.error();
      else if (r->status == 304)
        done.message = fmt::format("container {} is already {}", lc.target,
                                   lc.action == Command::stop ? "stopped" : "running");
      else if (r->status / 100 == 2)
        done.message = lc.action == Command::start
                           ? fmt::format("docker start {}: done", lc.target)
                           : fmt::format("docker {} {} (t={}): done", action, lc.target, t);
      else
        done.message = fmt::format("docker {} {}: HTTP {} {}", action, lc.target, r->status,
                                   r->body.substr(0, 200));
    }
    return done;
  }

 private:
  std::string socket_;
};

}  // namespace

std::unique_ptr<LifecycleBackend> make_lifecycle_backend(std::string docker_socket) {
  return std::make_unique<LocalLifecycle>(std::move(docker_socket));
}

}  // namespace vramd
