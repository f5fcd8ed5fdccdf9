// The daemon's probe loops: one per service, so that a hung server delays only its own probes.
// Each probes, hands the answer on, then waits until its next probe is due: `interval` after
// the answer, unless the core moved it (ScheduleProbe, its pace: core/probe_pacing.h).
#pragma once

#include <utility>  // (before Boost.Asio's awaitable.hpp, which uses std::exchange)

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include <chrono>
#include <functional>
#include <map>
#include <string>

#include "core/units.h"
#include "services/adapter.h"

namespace vramd {

class ProbeScheduler {
 public:
  using Probe = std::function<boost::asio::awaitable<ServiceProbe>()>;
  using Answered = std::function<void(ServiceProbe)>;

  explicit ProbeScheduler(boost::asio::io_context& io) : io_(io) {}

  // Runs `service`'s loop until stop(): probe, `answered` (on the loop), wait. Call it, then
  // co_await what it returns: GCC 12 mishandles temporaries inside a co_await expression.
  boost::asio::awaitable<void> run(std::string service, Probe probe, Answered answered,
                                   Duration interval);
  // `service`'s next probe is due `after` from now (a loop waiting waits again, for the new
  // time); ignored for a service without a loop.
  void schedule(const std::string& service, Duration after);
  // Ends every loop (a probe in flight is answered to no one).
  void stop();

 private:
  struct Due {
    explicit Due(boost::asio::io_context& io) : timer(io) {}
    boost::asio::steady_timer timer;
    std::chrono::steady_clock::time_point at;
  };
  boost::asio::io_context& io_;
  std::map<std::string, Due> due_;
  bool stopping_ = false;
};

}  // namespace vramd
