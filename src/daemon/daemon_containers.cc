// Containers (match.container without `start`): the engine's word on them reaches the Arbiter
// from a thread of its own (supervisor/container_watch.h); a crash's log comes from the engine.
#include <algorithm>

#include <boost/asio/post.hpp>
#include <fmt/format.h>

#include "daemon/daemon.h"
#include "host/docker_engine.h"
#include "supervisor/crash_rules.h"

namespace vramd {

namespace asio = boost::asio;

// A watch's thread hands its changes and its health to the loop through these (the core is
// touched on the loop only).
std::function<void(ContainerChanged)> Daemon::post_watch_change() {
  return [this](ContainerChanged e) {
    asio::post(io_, [this, e = std::move(e)] {
      if (!stopping_) feed(e);
    });
  };
}

std::function<void(bool, const std::string&)> Daemon::post_backend_health(std::string backend) {
  return [this, backend = std::move(backend)](bool ok, const std::string& why) {
    asio::post(io_, [this, backend, ok, why] {
      if (stopping_) return;
      if (ok)
        sink_.works(backend);
      else
        sink_.failed(backend, why);
    });
  };
}

void Daemon::start_container_watch() {
  const Config& cfg = arbiter_.config();
  std::vector<ContainerWatch::Watched> watched;
  for (const auto& svc : cfg.services)
    if (svc.start.empty() && !svc.match.container.empty())
      watched.push_back({svc.name, svc.match.container});
  if (watched.empty()) return;
  container_watch_ =
      std::make_unique<ContainerWatch>(cfg.daemon.docker_socket, std::move(watched),
                                       post_watch_change(), post_backend_health("docker"));
}

asio::awaitable<Result<LogPage>> Daemon::read_container_log(std::string container, size_t lines,
                                                          std::optional<uint64_t> after) {
  // On the worker: a slow engine holds up no request but those for its logs.
  auto op = run_on(worker_, [socket = arbiter_.config().daemon.docker_socket,
                             container = std::move(container), lines, after]() -> Result<LogPage> {
    auto got = container_log_since(socket, container, lines, after.value_or(0),
                                   std::chrono::seconds(10));
    if (!got) return make_error(got.error());
    LogPage page;
    page.offset = after.value_or(0);
    for (auto& l : *got) {
      page.offset = std::max(page.offset, l.ns);
      page.lines.push_back(std::move(l.text));
    }
    return page;
  });
  co_return co_await std::move(op);
}

std::vector<std::string> Daemon::container_crash_log(const std::string& socket,
                                                     const RecordCrash& crash) {
  // Up to the moment of the exit: a run that Docker has started since is not this crash's.
  auto seconds =
      std::chrono::duration_cast<std::chrono::seconds>(crash.at.time_since_epoch()).count();
  // As many lines as the diagnosis reads of a run (its boot log); the record keeps the last 200.
  constexpr size_t kLines = 2000;
  auto lines = container_log_lines(socket, crash.container, kLines, seconds + 1,
                                   std::chrono::seconds(10));
  if (!lines) return {fmt::format("(vramd could not read the logs of container {}: {})",
                                  crash.container, lines.error())};
  return std::move(*lines);
}

}  // namespace vramd
