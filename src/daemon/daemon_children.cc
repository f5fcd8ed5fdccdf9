// The daemon's side of supervision: spawning, signalling, pidfd watches, health checks, crash
// records, re-adoption and log rotation. Part of class Daemon (daemon.h); the decisions are the
// Arbiter's (core/arbiter_supervisor.cc).
// GCC 12 needs <utility> before Boost's awaitable.hpp.
#include <utility>

#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <filesystem>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "core/owners.h"
#include "daemon/children.h"
#include "daemon/daemon.h"
#include "host/proc_table.h"
#include "supervisor/crash_rules.h"

namespace vramd {

namespace asio = boost::asio;
using asio::use_awaitable;

namespace {
constexpr uint64_t kLogMaxBytes = 10 * 1024 * 1024;
constexpr size_t kCrashLogLines = 200;
}  // namespace

std::string Daemon::log_path(const std::string& service) const {
  return (std::filesystem::path(arbiter_.config().daemon.state_dir) / "logs" / (service + ".log")).string();
}

std::string Daemon::pid_file(const std::string& service) const {
  return (std::filesystem::path(arbiter_.config().daemon.state_dir) / "run" / (service + ".pid")).string();
}

void Daemon::spawn_child(const std::string& service) {
  const ServiceConfig* found = arbiter_.config().find_service(service);
  if (!found) return;
  // Its port must be free, or held by something vramd runs.
  std::vector<int> ours;
  for (const auto& st : arbiter_.services())
    if (st.managed && st.managed->pid) ours.push_back(*st.managed->pid);
  // The port check walks every process's fds and a reclaim waits for the port: the worker does
  // both, and the spawn, then the loop watches the child and tells the Arbiter.
  asio::post(worker_, [this, cfg = *found, ours, log = log_path(service), pids = pid_file(service)] {
    Result<Spawned> spawned = make_error("");
    if (auto taken = port_taken(url_port(cfg.url), ours)) {
      bool reclaimed = false;
      if (cfg.reclaim_port) {
        // Only a process of our own user that the service's match recognises.
        auto proc = read_process("/proc", taken->first);
        OwnerResolver resolver({cfg});
        HostSnapshot host;
        if (proc) host.processes.push_back(*proc);
        auto owners = resolver.resolve(host, {});
        bool recognised = owners.count(taken->first) && owners[taken->first].owner.name == cfg.name &&
                          !cfg.match.empty();
        if (proc && proc->uid == geteuid() && recognised) {
          spdlog::info("{}: ending {} on port {} (reclaim_port)", cfg.name, taken->second, url_port(cfg.url));
          ::kill(taken->first, SIGTERM);
          for (int i = 0; i < 50 && port_taken(url_port(cfg.url), ours); ++i) usleep(100'000);
          reclaimed = !port_taken(url_port(cfg.url), ours);
        }
      }
      if (!reclaimed)
        spawned = make_error(fmt::format("port {} is taken by {}, which vramd did not start{}",
                                         url_port(cfg.url), taken->second,
                                         cfg.reclaim_port ? " (reclaim_port: not the same user or not "
                                                            "recognised by match)"
                                                          : "; stop it, or set reclaim_port = true"));
    }
    if (spawned.error().empty()) spawned = spawn_service(cfg, log);
    if (spawned)
      if (auto w = write_pid_file(pids, *spawned); !w) spdlog::warn("{}", w.error());
    asio::post(io_, [this, name = cfg.name, spawned] {
      if (stopping_) return;
      if (!spawned) {
        feed(ChildStarted{name, false, 0, 0, spawned.error()});
        return;
      }
      watch_child(name, spawned->pid, true);  // a pidfd of an unreaped child works even if it exited
      feed(ChildStarted{name, true, spawned->pid, spawned->start_ticks, "", false});
    });
  });
}

void Daemon::watch_child(const std::string& service, int pid, bool ours) {
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
    child_watches_.erase(service);
    if (!stopping_) feed(e);
  };
  if (fd < 0) {
    asio::post(io_, report);  // already gone
    return;
  }
  auto sd = std::make_shared<asio::posix::stream_descriptor>(io_, fd);
  child_watches_[service] = sd;
  sd->async_wait(asio::posix::stream_descriptor::wait_read,
                 [sd, report](const boost::system::error_code& ec) {
                   if (!ec) report();
                 });
}

void Daemon::signal_child(const SignalService& s) {
  // The whole process group (the child is a session leader): workers it started go too.
  if (::kill(-s.pid, s.signal) != 0) ::kill(s.pid, s.signal);
}

void Daemon::check_health(const std::string& service) {
  auto it = adapters_.find(service);
  if (it == adapters_.end()) return;
  Adapter* adapter = it->second.get();
  auto check = [this, adapter, service]() -> asio::awaitable<void> {
    HealthCheck h = co_await adapter->health();
    if (!stopping_) feed(HealthChecked{service, h.healthy, h.message});
  };
  asio::co_spawn(io_, std::move(check), asio::detached);
}

void Daemon::record_crash(RecordCrash crash) {
  std::string log = log_path(crash.service);
  std::vector<CrashRule> rules;
  for (const auto& r : arbiter_.config().crash_rules)
    rules.push_back({r.signature, r.title, r.pattern, r.requires_pattern, r.explanation, r.suggestion});
  // Reading the log and the kernel's and diagnosing: the worker; storing: the store thread.
  asio::post(worker_, [this, crash, log, rules] {
    CrashInput in;
    // Only what this run printed: an older run's error must not be blamed for this crash.
    std::vector<std::string> run = boot_lines(log, 1'000'000);
    if (run.empty()) run = log_tail(log, kCrashLogLines);
    in.boot_log.assign(run.begin(), run.begin() + static_cast<long>(std::min<size_t>(run.size(), 2000)));
    in.log_tail.assign(run.end() - static_cast<long>(std::min(run.size(), kCrashLogLines)), run.end());
    in.exit_code = crash.exit_code;
    in.signal = crash.signal;
    in.oom_killed = crash.signal == SIGKILL && killed_by_oom_killer(crash.pid);
    in.gpu_holders = crash.gpu_holders;
    CrashDiagnosis d = diagnose_crash(in, rules);
    CrashRecord rec;
    rec.service = crash.service;
    rec.at = crash.at;
    rec.pid = crash.pid;
    rec.exit_code = crash.exit_code;
    rec.signal = crash.signal;
    rec.reason = crash.reason;
    rec.signature = d.signature;
    rec.title = d.title;
    rec.explanation = d.explanation;
    rec.suggestion = d.suggestion;
    rec.evidence = d.evidence;
    rec.log_tail = std::move(in.log_tail);
    rec.gpu_holders = crash.gpu_holders;
    asio::post(store_thread_, [this, store = crash_store_, rec] {
      if (auto r = store->add(rec); !r) spdlog::warn("{}", r.error());
      asio::post(io_, [this, rec] {
        if (stopping_) return;
        metrics_.crash(rec.service, rec.signature);
        std::string msg = fmt::format("{} crashed: {}", rec.service, rec.title);
        if (!rec.suggestion.empty()) msg += fmt::format(". Suggested: {}", rec.suggestion);
        apply({make_event(now(), "service.diagnosis", std::nullopt, rec.service, msg)});
      });
    });
  });
}

void Daemon::adopt_children() {
  for (const auto& svc : arbiter_.config().services) {
    if (svc.start.empty()) continue;
    auto live = read_live_pid_file(pid_file(svc.name));
    if (!live) {
      std::error_code ec;
      std::filesystem::remove(pid_file(svc.name), ec);
      continue;
    }
    spdlog::info("{}: pid {} still runs; adopting it", svc.name, live->pid);
    watch_child(svc.name, live->pid, false);
    feed(ChildStarted{svc.name, true, live->pid, live->start_ticks, "", true});
  }
}

void Daemon::rotate_logs() {
  std::vector<std::string> logs;
  for (const auto& svc : arbiter_.config().services)
    if (!svc.start.empty()) logs.push_back(log_path(svc.name));
  asio::post(worker_, [logs] {
    for (const auto& l : logs) rotate_log(l, kLogMaxBytes);
  });
}

uint64_t Daemon::service_command(const std::string& service, Command action, bool force) {
  uint64_t id = next_command_++;
  command_waiters_[id] = std::make_unique<Waiter<CommandFinished>>(io_);
  feed(ServiceCommand{service, action, id, force});
  return id;
}

asio::awaitable<CommandFinished> Daemon::wait_command(uint64_t request_id, Duration max) {
  CommandFinished out{request_id, false, ""};
  auto it = command_waiters_.find(request_id);
  if (it == command_waiters_.end()) co_return out;
  Waiter<CommandFinished>* w = it->second.get();
  if (!w->result && max.count() > 0) {
    w->timer.expires_after(max);
    boost::system::error_code ec;
    co_await w->timer.async_wait(asio::redirect_error(use_awaitable, ec));
  }
  if (w->result) {
    out = *w->result;
  } else {
    out.message = max.count() > 0 ? fmt::format("not finished within {}", format_duration(max)) : "";
  }
  command_waiters_.erase(request_id);
  co_return out;
}

asio::awaitable<Result<std::vector<CrashRecord>>> Daemon::crashes(std::string service, size_t limit) {
  auto op = run_on(store_thread_, [store = crash_store_, service = std::move(service), limit] {
    return store->list(service, limit);
  });
  co_return co_await std::move(op);
}

asio::awaitable<LogPage> Daemon::read_log(std::string path, size_t lines, std::optional<uint64_t> after) {
  auto op = run_on(worker_, [path = std::move(path), lines, after] { return read_log_page(path, lines, after); });
  co_return co_await std::move(op);
}

}  // namespace vramd
