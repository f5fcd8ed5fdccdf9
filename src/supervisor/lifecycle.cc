#include "supervisor/lifecycle.h"

#include <fmt/format.h>

#include "host/docker.h"

namespace vramd {

namespace {

class LocalLifecycle final : public LifecycleBackend {
 public:
  LocalLifecycle(std::string docker_socket, SystemdTools tools)
      : socket_(std::move(docker_socket)), tools_(std::move(tools)) {}

  LifecycleDone run(const Lifecycle& lc) override {
    LifecycleDone done{lc.service, lc.action, false, ""};
    std::string action = to_string(lc.action);
    if (lc.via == Control::unit) {
      // systemd kills it after its own TimeoutStopSec=: systemctl's wait is bounded by that.
      auto limit = std::chrono::duration_cast<std::chrono::milliseconds>(lc.stop_timeout) +
                   std::chrono::seconds(90);
      if (lc.action == Command::stop) {
        auto before = show_unit(tools_, lc.target, std::chrono::seconds(10));
        if (before && !before->active() && before->active_state != "activating" &&
            before->active_state != "deactivating") {
          done.ok = true;
          done.changed = false;
          done.message = fmt::format("unit {} is already {}", lc.target, before->active_state);
          return done;
        }
      }
      auto r = systemctl_action(tools_, action, lc.target, limit);
      done.ok = r.ok();
      done.message = r ? *r + ": done" : r.error();
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
  SystemdTools tools_;
};

}  // namespace

std::unique_ptr<LifecycleBackend> make_lifecycle_backend(std::string docker_socket,
                                                         SystemdTools tools) {
  return std::make_unique<LocalLifecycle>(std::move(docker_socket), std::move(tools));
}

}  // namespace vramd
