#include "daemon/service_runtime.h"

#include <csignal>

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "daemon/run_on.h"
#include "host/docker_engine.h"
#include "host/proc_table.h"
#include "host/systemd.h"

namespace vramd {

namespace asio = boost::asio;

namespace {
constexpr size_t kCrashLogLines = 200;
// As many lines as the diagnosis reads of a run (its boot log); the record keeps the last 200.
constexpr size_t kCrashBootLines = 2000;
}  // namespace

ServiceRuntime::ServiceRuntime(asio::io_context& io, const Config& config,
                               std::unique_ptr<ProcessRunner> runner,
                               std::unique_ptr<LifecycleBackend> lifecycle, Hooks hooks)
    : io_(io),
      config_(config),
      hooks_(std::move(hooks)),
      runner_(runner ? std::move(runner)
                     : make_local_process_runner(io, worker_, config.daemon.state_dir)),
      lifecycle_(lifecycle ? std::move(lifecycle)
                           : make_lifecycle_backend(config.daemon.docker_socket,
                                                    systemd_tools(config))) {
  runner_->set_sink({[this](ChildStarted e) { hooks_.feed(e); },
                     [this](ChildExited e) { hooks_.feed(e); }});
}

ServiceRuntime::~ServiceRuntime() { join(); }

void ServiceRuntime::join() { worker_.join(); }

void ServiceRuntime::start() {
  runner_->adopt(config_.services);
  std::vector<ContainerWatch::Watched> containers;
  std::vector<UnitWatch::Watched> units;
  for (const auto& svc : config_.services) {
    if (!svc.start.empty()) continue;  // vramd runs it: the runner watches it
    if (!svc.match.container.empty())
      containers.push_back({svc.name, svc.match.container});
    else if (!svc.match.unit.empty())
      units.push_back({svc.name, svc.match.unit});
  }
  if (!containers.empty())
    container_watch_ = std::make_unique<ContainerWatch>(
        config_.daemon.docker_socket, std::move(containers), post_change(), post_health("docker"));
  if (!units.empty())
    unit_watch_ = std::make_unique<UnitWatch>(systemd_tools(config_), std::move(units),
                                              post_change(), post_health("systemd"));
  probe_suspend();
}

SuspendOffer suspend_offer_of(const std::string& tool, const Result<CudaCheckpoint>& probed) {
  SuspendOffer offer;
  offer.tool = tool;
  if (!probed) {
    offer.why = probed.error();
    return offer;
  }
  offer.offered = true;
  offer.form = probed->form() == CheckpointForm::toggle ? "toggle" : "action";
  offer.version = probed->version();
  return offer;
}

void ServiceRuntime::probe_suspend() {
  // Its --help runs the utility (up to its call timeout): off the loop, once.
  asio::post(worker_, [this, tool = config_.gpu.cuda_checkpoint] {
    Result<CudaCheckpoint> probed = CudaCheckpoint::probe(tool);
    SuspendOffer offer = suspend_offer_of(tool, probed);
    if (probed) checkpoint_ = *probed;
    asio::post(io_, [this, offer = std::move(offer)] {
      if (!stopping_) hooks_.feed(SuspendProbed{offer});
    });
  });
}

Result<const CudaCheckpoint*> ServiceRuntime::checkpoint_tool() {
  if (!checkpoint_) {
    Result<CudaCheckpoint> probed = CudaCheckpoint::probe(config_.gpu.cuda_checkpoint);
    if (!probed) return Error{probed.error()};
    checkpoint_ = *probed;
  }
  return &*checkpoint_;
}

namespace {

// Suspends each pid in turn, all or none: the ones done before one that fails run again. "" when
// all were suspended, else what failed (and what could not be put back).
std::string suspend_all(const CudaCheckpoint& tool, const std::vector<int>& pids,
                        Duration lock_timeout) {
  std::vector<int> suspended;
  for (int pid : pids) {
    Status st = tool.suspend(pid, lock_timeout);
    if (!st) {
      std::string error = fmt::format("pid {}: {}", pid, st.error());
      for (int back : suspended)
        if (Status r = tool.resume(back); !r)
          error += fmt::format("; pid {} could not be put back: {}", back, r.error());
      return error;
    }
    suspended.push_back(pid);
  }
  return "";
}

// Resumes each pid: one that fails leaves the others running. "" when all run.
std::string resume_all(const CudaCheckpoint& tool, const std::vector<int>& pids) {
  std::string error;
  for (int pid : pids)
    if (Status st = tool.resume(pid); !st)
      error += fmt::format("{}pid {}: {}", error.empty() ? "" : "; ", pid, st.error());
  return error;
}

// A service's processes are given this long to reach a point where they may be locked.
constexpr Duration kServiceLockTimeout = std::chrono::seconds(10);

}  // namespace

void ServiceRuntime::checkpoint_op(
    std::function<std::string(const CudaCheckpoint&)> op,
    std::function<Event(const std::string& error, Duration took)> done) {
  asio::post(worker_, [this, op = std::move(op), done = std::move(done)] {
    auto began = std::chrono::steady_clock::now();
    Result<const CudaCheckpoint*> tool = checkpoint_tool();
    std::string error = tool ? op(**tool) : tool.error();
    Event e = done(error, std::chrono::duration_cast<Duration>(std::chrono::steady_clock::now() -
                                                               began));
    asio::post(io_, [this, e = std::move(e)] {
      if (!stopping_) hooks_.feed(e);
    });
  });
}

void ServiceRuntime::suspend_lease(const SuspendLease& s) {
  checkpoint_op(
      [s](const CudaCheckpoint& tool) { return suspend_all(tool, s.pids, s.lock_timeout); },
      [id = s.id](const std::string& error, Duration took) -> Event {
        return LeaseSuspendDone{id, error.empty(), error, took};
      });
}

void ServiceRuntime::resume_lease(const ResumeLease& r) {
  checkpoint_op([r](const CudaCheckpoint& tool) { return resume_all(tool, r.pids); },
                [id = r.id](const std::string& error, Duration took) -> Event {
                  return LeaseResumeDone{id, error.empty(), error, took};
                });
}

void ServiceRuntime::suspend_service(const CallUnload& c) {
  checkpoint_op(
      [c](const CudaCheckpoint& tool) {
        if (c.pids.empty()) return std::string("none of its processes holds GPU memory");
        return suspend_all(tool, c.pids, kServiceLockTimeout);
      },
      [c](const std::string& error, Duration took) -> Event {
        UnloadCall answer{
            UnloadCall::Result::requested,
            fmt::format("cuda-checkpoint: pids {} suspended", fmt::join(c.pids, ", "))};
        if (!error.empty()) answer = {UnloadCall::Result::failed, error};
        return UnloadCallDone{c.service, c.unload_id, answer, took};
      });
}

void ServiceRuntime::resume_service(const CallWake& c) {
  checkpoint_op([c](const CudaCheckpoint& tool) { return resume_all(tool, c.pids); },
                [c](const std::string& error, Duration took) -> Event {
                  UnloadCall answer{UnloadCall::Result::requested,
                                    fmt::format("cuda-checkpoint: pids {} restored",
                                                fmt::join(c.pids, ", "))};
                  if (!error.empty()) answer = {UnloadCall::Result::failed, error};
                  return WakeCallDone{c.service, c.wake_id, answer, took};
                });
}

void ServiceRuntime::check_suspension(const CheckSuspension& c) {
  asio::post(worker_, [this, c] {
    SuspensionChecked checked{c.lease, c.service, {}, {}, {}, ""};
    auto fail = [&](const std::string& words) {
      checked.error += (checked.error.empty() ? "" : "; ") + words;
    };
    Result<const CudaCheckpoint*> tool = checkpoint_tool();
    if (!tool) {
      fail(tool.error());
    } else {
      for (int pid : c.pids) {
        Result<CudaProcessState> st = (*tool)->state(pid);
        if (!st) {
          fail(fmt::format("pid {}: {}", pid, st.error()));
          continue;
        }
        switch (*st) {
          case CudaProcessState::checkpointed: checked.checkpointed.push_back(pid); break;
          case CudaProcessState::running: checked.running.push_back(pid); break;
          case CudaProcessState::locked: checked.locked.push_back(pid); break;
          case CudaProcessState::failed:
            fail(fmt::format("pid {}: its CUDA state is failed", pid));
            break;
        }
      }
    }
    asio::post(io_, [this, checked = std::move(checked)] {
      if (!stopping_) hooks_.feed(checked);
    });
  });
}

void ServiceRuntime::check_holders(std::vector<std::tuple<uint64_t, int, uint64_t>> holders) {
  if (holders.empty() || holder_check_running_) return;
  holder_check_running_ = true;
  asio::post(worker_, [this, holders = std::move(holders)] {
    std::vector<uint64_t> gone;
    for (const auto& [id, pid, ticks] : holders)
      if (!process_alive("/proc", pid, ticks)) gone.push_back(id);
    asio::post(io_, [this, gone = std::move(gone)] {
      holder_check_running_ = false;
      if (stopping_) return;
      for (uint64_t id : gone) hooks_.feed(HolderExited{id});
    });
  });
}

void ServiceRuntime::stop_watches() {
  stopping_ = true;
  container_watch_.reset();  // joins its thread
  unit_watch_.reset();
}

void ServiceRuntime::close() { runner_->close(); }

std::function<void(ContainerChanged)> ServiceRuntime::post_change() {
  return [this](ContainerChanged e) {
    asio::post(io_, [this, e = std::move(e)] {
      if (!stopping_) hooks_.feed(e);
    });
  };
}

std::function<void(bool, const std::string&)> ServiceRuntime::post_health(std::string backend) {
  return [this, backend = std::move(backend)](bool ok, const std::string& why) {
    asio::post(io_, [this, backend, ok, why] {
      if (!stopping_) hooks_.health(backend, ok, why);
    });
  };
}

void ServiceRuntime::run_lifecycle(const Lifecycle& lc, Duration stall_after) {
  // A call still out after `stall_after` (a hung Docker socket: its timeout is a minute) is
  // shown as a failing backend until it returns.
  auto stalled = std::make_shared<asio::steady_timer>(io_, stall_after);
  stalled->async_wait([this, lc, stall_after](const boost::system::error_code& ec) {
    if (!ec && !stopping_)
      hooks_.health("lifecycle", false,
                    fmt::format("{} {} ({}) has not answered in {}", to_string(lc.action),
                                lc.target, to_string(lc.via), format_duration(stall_after)));
  });
  asio::post(worker_, [this, lc, stalled, backend = lifecycle_.get()] {
    LifecycleDone done = backend->run(lc);
    asio::post(io_, [this, done, stalled] {
      stalled->cancel();
      if (stopping_) return;
      hooks_.health("lifecycle", true, "");
      hooks_.feed(done);
    });
  });
}

void ServiceRuntime::diagnose(const RecordCrash& crash, std::vector<CrashRule> rules,
                              std::string version, std::string args_fp,
                              std::function<void(CrashRecord)> done) {
  asio::post(worker_, [crash, log = log_path(crash.service), rules = std::move(rules),
                       version = std::move(version), args_fp = std::move(args_fp),
                       done = std::move(done), socket = config_.daemon.docker_socket,
                       tools = systemd_tools(config_)] {
    CrashInput in;
    // Only what this run printed: an older run's error must not be blamed for this crash.
    bool ours = crash.container.empty() && crash.unit.empty();
    std::vector<std::string> run = !crash.container.empty() ? container_crash_log(socket, crash)
                                   : !crash.unit.empty()    ? unit_crash_log(tools, crash)
                                                            : boot_lines(log, 1'000'000);
    if (run.empty() && ours) run = log_tail(log, kCrashLogLines);
    in.boot_log.assign(run.begin(),
                       run.begin() + static_cast<long>(std::min(run.size(), kCrashBootLines)));
    in.log_tail.assign(run.end() - static_cast<long>(std::min(run.size(), kCrashLogLines)), run.end());
    in.exit_code = crash.exit_code;
    in.signal = crash.signal;
    in.oom_killed = crash.oom || (crash.signal == SIGKILL && killed_by_oom_killer(crash.pid));
    in.gpu_holders = crash.gpu_holders;
    CrashDiagnosis d = diagnose_crash(in, rules);
    CrashRecord rec;
    rec.service = crash.service;
    rec.at = crash.at;
    rec.pid = crash.pid;
    rec.exit_code = crash.exit_code;
    rec.signal = crash.signal;
    rec.reason = crash.reason;
    rec.version = version;
    rec.args_fp = args_fp;
    rec.signature = d.signature;
    rec.title = d.title;
    rec.explanation = d.explanation;
    rec.suggestion = d.suggestion;
    rec.evidence = d.evidence;
    rec.log_tail = std::move(in.log_tail);
    rec.gpu_holders = crash.gpu_holders;
    done(std::move(rec));
  });
}

asio::awaitable<LogPage> ServiceRuntime::read_log(std::string path, size_t lines,
                                                  std::optional<uint64_t> after) {
  auto op = run_on(worker_, [path = std::move(path), lines, after] {
    return read_log_page(path, lines, after);
  });
  co_return co_await std::move(op);
}

asio::awaitable<Result<LogPage>> ServiceRuntime::read_container_log(std::string container,
                                                                    size_t lines,
                                                                    std::optional<uint64_t> after) {
  // On the worker: a slow engine holds up no request but those for its logs.
  auto op = run_on(worker_, [socket = config_.daemon.docker_socket,
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

asio::awaitable<Result<LogPage>> ServiceRuntime::read_unit_log(std::string unit, size_t lines,
                                                               std::optional<uint64_t> after) {
  // On the worker: a slow journal holds up no request but those for its logs.
  auto op = run_on(worker_, [tools = systemd_tools(config_), unit = std::move(unit), lines,
                             after]() -> Result<LogPage> {
    auto got = journal_lines(tools, unit, lines, after.value_or(0), std::chrono::seconds(10));
    if (!got) return make_error(got.error());
    LogPage page;
    page.offset = after.value_or(0);
    for (auto& l : *got) {
      page.offset = std::max(page.offset, l.realtime_us);
      page.lines.push_back(std::move(l.message));
    }
    return page;
  });
  co_return co_await std::move(op);
}

std::vector<std::string> ServiceRuntime::container_crash_log(const std::string& socket,
                                                             const RecordCrash& crash) {
  // Up to the moment of the exit: a run that Docker has started since is not this crash's.
  auto seconds =
      std::chrono::duration_cast<std::chrono::seconds>(crash.at.time_since_epoch()).count();
  auto lines = container_log_lines(socket, crash.container, kCrashBootLines, seconds + 1,
                                   std::chrono::seconds(10));
  if (!lines) return {fmt::format("(vramd could not read the logs of container {}: {})",
                                  crash.container, lines.error())};
  return std::move(*lines);
}

std::vector<std::string> ServiceRuntime::unit_crash_log(const SystemdTools& tools,
                                                        const RecordCrash& crash) {
  // Up to the moment of the exit: a run that systemd has started since is not this crash's.
  auto seconds =
      std::chrono::duration_cast<std::chrono::seconds>(crash.at.time_since_epoch()).count();
  auto lines = journal_messages(tools, crash.unit, kCrashBootLines, seconds + 1,
                                std::chrono::seconds(10));
  if (!lines) return {fmt::format("(vramd could not read the journal of unit {}: {})", crash.unit,
                                  lines.error())};
  return std::move(*lines);
}

}  // namespace vramd
