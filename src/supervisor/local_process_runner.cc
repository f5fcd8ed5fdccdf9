// The real ProcessRunner: fork/exec in a session of its own, a pidfd per child watched on the
// event loop, pid files for adoption after a restart of vramd, signals to the process group.
// GCC 12 needs <utility> before Boost's awaitable.hpp.
#include <utility>

#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <csignal>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <filesystem>
#include <map>

#include "core/owners.h"
#include "host/proc_table.h"
#include "supervisor/children.h"
#include "supervisor/process_runner.h"

namespace vramd {

namespace asio = boost::asio;

namespace {

constexpr uint64_t kLogMaxBytes = uint64_t{10} * 1024 * 1024;

class LocalProcessRunner final : public ProcessRunner {
 public:
  LocalProcessRunner(asio::io_context& io, asio::thread_pool& worker, std::string state_dir)
      : io_(io), worker_(worker), state_dir_(std::move(state_dir)) {}

  void set_sink(Sink sink) override { sink_ = std::move(sink); }

  std::string log_path(const std::string& service) const override {
    return (std::filesystem::path(state_dir_) / "logs" / (service + ".log")).string();
  }

  void spawn(const ServiceConfig& svc, std::vector<int> ours) override {
    // The port check walks every process's fds and a reclaim waits for the port: the worker
    // does both, and the spawn; then the loop watches the child and reports.
    asio::post(worker_, [this, cfg = svc, ours, log = log_path(svc.name),
                         pids = pid_file(svc.name)] {
      Result<Spawned> spawned = make_error("");
      if (auto taken = port_taken(url_port(cfg.url), ours)) {
        if (!reclaim(cfg, *taken, ours))
          spawned = make_error(fmt::format(
              "port {} is taken by {}, which vramd did not start{}", url_port(cfg.url),
              taken->second,
              cfg.reclaim_port ? " (reclaim_port: not the same user or not recognised by match)"
                               : "; stop it, or set reclaim_port = true"));
      }
      if (spawned.error().empty()) spawned = spawn_service(cfg, log);
      if (spawned)
        if (auto w = write_pid_file(pids, *spawned); !w) spdlog::warn("{}", w.error());
      asio::post(io_, [this, name = cfg.name, spawned] {
        if (closed_) return;
        if (!spawned) {
          sink_.started(ChildStarted{name, false, 0, 0, spawned.error()});
          return;
        }
        watch(name, spawned->pid, true);  // a pidfd of an unreaped child works even if it exited
        sink_.started(ChildStarted{name, true, spawned->pid, spawned->start_ticks, "", false});
      });
    });
  }

  void adopt(const std::deque<ServiceConfig>& services) override {
    for (const auto& svc : services) {
      if (svc.start.empty()) continue;
      auto live = read_live_pid_file(pid_file(svc.name));
      if (!live) {
        std::error_code ec;
        std::filesystem::remove(pid_file(svc.name), ec);
        continue;
      }
      spdlog::info("{}: pid {} still runs; adopting it", svc.name, live->pid);
      watch(svc.name, live->pid, false);
      sink_.started(ChildStarted{svc.name, true, live->pid, live->start_ticks, "", true});
    }
  }

  void signal(int pid, int signal) override {
    // The whole process group (the child is a session leader): workers it started go too.
    if (::kill(-pid, signal) != 0) ::kill(pid, signal);
  }

  void rotate_logs(const std::deque<ServiceConfig>& services) override {
    std::vector<std::string> logs;
    for (const auto& svc : services)
      if (!svc.start.empty()) logs.push_back(log_path(svc.name));
    asio::post(worker_, [logs] {
      for (const auto& l : logs) rotate_log(l, kLogMaxBytes);
    });
  }

  void close() override {
    closed_ = true;
    for (auto& [name, w] : watches_) w->cancel();
  }

 private:
  std::string pid_file(const std::string& service) const {
    return (std::filesystem::path(state_dir_) / "run" / (service + ".pid")).string();
  }

  // reclaim_port: only a process of our own user that the service's match recognises.
  static bool reclaim(const ServiceConfig& cfg, const std::pair<int, std::string>& taken,
                      const std::vector<int>& ours) {
    if (!cfg.reclaim_port) return false;
    auto proc = read_process("/proc", taken.first);
    OwnerResolver resolver({cfg});
    HostSnapshot host;
    if (proc) host.processes.push_back(*proc);
    auto owners = resolver.resolve(host, {});
    bool recognised = owners.count(taken.first) && owners[taken.first].owner.name == cfg.name &&
                      !cfg.match.empty();
    if (!proc || proc->uid != geteuid() || !recognised) return false;
    spdlog::info("{}: ending {} on port {} (reclaim_port)", cfg.name, taken.second,
                 url_port(cfg.url));
    ::kill(taken.first, SIGTERM);
    for (int i = 0; i < 50 && port_taken(url_port(cfg.url), ours); ++i) usleep(100'000);
    return !port_taken(url_port(cfg.url), ours);
  }

  void watch(const std::string& service, int pid, bool ours) {
    int fd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
    auto report = [this, service, pid, ours] {
      ChildExited e{service, pid, std::nullopt, std::nullopt};
      int status = 0;
      if (ours && waitpid(pid, &status, 0) == pid) {
        if (WIFEXITED(status)) e.exit_code = WEXITSTATUS(status);
        if (WIFSIGNALED(status)) e.signal = WTERMSIG(status);
      }
      std::error_code ec;
      std::filesystem::remove(pid_file(service), ec);
      watches_.erase(service);
      if (!closed_) sink_.exited(e);
    };
    if (fd < 0) {
      asio::post(io_, report);  // already gone
      return;
    }
    auto sd = std::make_shared<asio::posix::stream_descriptor>(io_, fd);
    watches_[service] = sd;
    sd->async_wait(asio::posix::stream_descriptor::wait_read,
                   [sd, report](const boost::system::error_code& ec) {
                     if (!ec) report();
                   });
  }

  asio::io_context& io_;
  asio::thread_pool& worker_;
  std::string state_dir_;
  Sink sink_;
  bool closed_ = false;
  std::map<std::string, std::shared_ptr<asio::posix::stream_descriptor>> watches_;
};

}  // namespace

std::unique_ptr<ProcessRunner> make_local_process_runner(asio::io_context& io,
                                                         asio::thread_pool& worker,
                                                         std::string state_dir) {
  return std::make_unique<LocalProcessRunner>(io, worker, std::move(state_dir));
}

}  // namespace vramd
