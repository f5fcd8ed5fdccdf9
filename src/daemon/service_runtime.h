// The services' side of the host, as one part: the children vramd runs (supervisor/
// process_runner.h), the containers and units it watches (their engines' words, on threads of
// their own) and the lifecycle calls to them, their logs, and the crash diagnosis (the log read,
// the kernel asked, the rules applied) on a worker thread of its own, which also checks that
// lease holders still run. It decides nothing: every
// start, stop and restart is the core's (core/supervision.h); what it sees goes back as events.
#pragma once

#include <utility>  // (before Boost.Asio's awaitable.hpp, which uses std::exchange)

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/thread_pool.hpp>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "core/config.h"
#include "core/events.h"
#include "host/cuda_checkpoint.h"
#include "store/crash_store.h"
#include "supervisor/children.h"
#include "supervisor/container_watch.h"
#include "supervisor/crash_rules.h"
#include "supervisor/lifecycle.h"
#include "supervisor/process_runner.h"
#include "supervisor/unit_watch.h"

namespace vramd {

// How the daemon reaches systemd ([daemon] systemctl, journalctl, systemd_user).
inline SystemdTools systemd_tools(const Config& c) {
  return SystemdTools{c.daemon.systemctl, c.daemon.journalctl, c.daemon.systemd_user};
}

// What a probe of NVIDIA's cuda-checkpoint (`tool`) found, as the core keeps it.
SuspendOffer suspend_offer_of(const std::string& tool, const Result<CudaCheckpoint>& probed);

class ServiceRuntime {
 public:
  struct Hooks {
    // On the loop: ChildStarted, ChildExited, ContainerChanged, LifecycleDone, SuspendProbed,
    // HolderExited.
    std::function<void(const Event&)> feed;
    // On the loop: a backend ("docker", "systemd", "lifecycle") answers again, or not.
    std::function<void(const std::string& backend, bool ok, const std::string& why)> health;
  };
  // runner / lifecycle: nullptr gets the real ones (fork/exec and pidfd; the Docker Engine API
  // and systemctl).
  ServiceRuntime(boost::asio::io_context& io, const Config& config,
                 std::unique_ptr<ProcessRunner> runner, std::unique_ptr<LifecycleBackend> lifecycle,
                 Hooks hooks);
  ~ServiceRuntime();  // joins the worker
  void join();        // waits for the worker's queue to run out (the daemon's end)

  // Adopts the children a previous vramd left running and starts the watches it needs.
  void start();
  void stop_watches();  // joins their threads; nothing more reaches the loop
  void close();         // the runner's watches of its children

  ProcessRunner& runner() { return *runner_; }
  boost::asio::thread_pool& worker() { return worker_; }  // blocking calls off the loop

  // A start, stop or restart of a container or unit; its LifecycleDone through `feed`. A call
  // out for longer than `stall_after` is told as a failing "lifecycle" backend meanwhile.
  void run_lifecycle(const Lifecycle& lc, Duration stall_after);
  // Reads the crashed run's output (log file, container or journal) and the kernel's word, and
  // diagnoses it with `rules`; `done` gets the record, on the worker thread.
  void diagnose(const RecordCrash& crash, std::vector<CrashRule> rules, std::string version,
                std::string args_fp, std::function<void(CrashRecord)> done);

  // Whether [gpu] cuda_checkpoint can suspend here: its --help run once on the worker (from
  // start()), told to the core as SuspendProbed.
  void probe_suspend();
  // Suspends a preemptible lease's processes with the probed utility, one after the other; one
  // that fails puts back those done before it. Its LeaseSuspendDone through `feed`. Resumes
  // them likewise (LeaseResumeDone). On the worker, as the probe: they never run at once.
  void suspend_lease(const SuspendLease& s);
  void resume_lease(const ResumeLease& r);
  // Reads each pid's CUDA state (`--get-state`) after a restart; SuspensionChecked.
  void check_suspension(const CheckSuspension& c);
  // A service put to sleep at `suspend`: its processes suspended, all or none, as a lease's
  // (UnloadCallDone: requested, or failed with the utility's words); its wake restores them
  // (WakeCallDone). On the worker too.
  void suspend_service(const CallUnload& c);
  void resume_service(const CallWake& c);

  // Lease holders (lease id, pid, start ticks): each whose process is gone, or whose pid another
  // process has taken, is fed as HolderExited. /proc is read on the worker; one check at a time
  // (a call while one runs is dropped: the next one asks again).
  void check_holders(std::vector<std::tuple<uint64_t, int, uint64_t>> holders);

  std::string log_path(const std::string& service) const { return runner_->log_path(service); }
  boost::asio::awaitable<LogPage> read_log(std::string path, size_t lines,
                                           std::optional<uint64_t> after);
  boost::asio::awaitable<Result<LogPage>> read_container_log(std::string container, size_t lines,
                                                             std::optional<uint64_t> after);
  boost::asio::awaitable<Result<LogPage>> read_unit_log(std::string unit, size_t lines,
                                                        std::optional<uint64_t> after);

 private:
  // A crashed run's output up to its exit, or one line saying why not.
  static std::vector<std::string> container_crash_log(const std::string& socket,
                                                      const RecordCrash& crash);
  static std::vector<std::string> unit_crash_log(const SystemdTools& tools,
                                                 const RecordCrash& crash);
  // A watch's thread hands its changes and its health to the loop through these.
  std::function<void(ContainerChanged)> post_change();
  std::function<void(bool, const std::string&)> post_health(std::string backend);

  boost::asio::io_context& io_;
  const Config& config_;
  Hooks hooks_;
  boost::asio::thread_pool worker_{1};  // restarts, lifecycle calls, logs, crash diagnoses
  std::unique_ptr<ProcessRunner> runner_;
  std::unique_ptr<LifecycleBackend> lifecycle_;
  std::unique_ptr<ContainerWatch> container_watch_;  // when any service is a container
  std::unique_ptr<UnitWatch> unit_watch_;            // when any service is a unit
  // The utility, probed on first use if probe_suspend() has not run yet (a resume that a
  // restored suspended lease asks for can come first); the probe's error when there is none.
  // Worker thread only.
  Result<const CudaCheckpoint*> checkpoint_tool();
  // On the worker: `op` runs with the utility and says what failed ("" nothing; the reason there
  // is no utility otherwise); `done(error, took)` is the event fed back on the loop.
  void checkpoint_op(std::function<std::string(const CudaCheckpoint&)> op,
                     std::function<Event(const std::string& error, Duration took)> done);
  std::optional<CudaCheckpoint> checkpoint_;  // the probed utility (worker thread only)
  bool holder_check_running_ = false;
  bool stopping_ = false;
};

}  // namespace vramd
