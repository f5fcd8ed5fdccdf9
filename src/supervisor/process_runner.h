// ProcessRunner: how the shell runs the processes of services vramd manages (`start`): spawn
// (own session and process group, port check and reclaim), pidfd watch, adoption after a restart
// of vramd, signals to the process group, logs and their rotation. The daemon is handed one;
// the core decides when (core/supervision.h), the runner does it and reports back.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/thread_pool.hpp>

#include "core/config.h"
#include "core/events.h"

namespace vramd {

class ProcessRunner {
 public:
  // Where reports go: called on the event loop.
  struct Sink {
    std::function<void(ChildStarted)> started;
    std::function<void(ChildExited)> exited;
  };
  virtual ~ProcessRunner() = default;
  virtual void set_sink(Sink sink) = 0;

  // Starts `svc`: its port must be free or held by one of `ours` (reclaim_port ends a squatter
  // of the same user that `match` recognises). Reports ChildStarted, then ChildExited.
  virtual void spawn(const ServiceConfig& svc, std::vector<int> ours) = 0;
  // Children an earlier vramd started that still run (pid file, same start time): watched and
  // reported as adopted.
  virtual void adopt(const std::deque<ServiceConfig>& services) = 0;
  // The signal to the child's whole process group (it is a session leader).
  virtual void signal(int pid, int signal) = 0;
  // Copy-truncate rotation of every managed service's log (at 10 MiB).
  virtual void rotate_logs(const std::deque<ServiceConfig>& services) = 0;
  virtual std::string log_path(const std::string& service) const = 0;
  // Stops watching (vramd stops; the children go on unless on_shutdown = "stop").
  virtual void close() = 0;
};

// The real one: fork/exec, pidfd, /proc. Blocking calls run on `worker`; reports on `io`.
std::unique_ptr<ProcessRunner> make_local_process_runner(boost::asio::io_context& io,
                                                         boost::asio::thread_pool& worker,
                                                         std::string state_dir);

}  // namespace vramd
