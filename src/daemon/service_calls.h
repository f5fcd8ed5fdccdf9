// The services' HTTP side, as one part (issue 27): each service's adapter (services/adapter.h)
// and its probe loop (ProbeScheduler), and the calls the core asks of a server (CallUnload,
// CallWake, CheckHealth), each a coroutine on the loop whose answer goes back through `feed`.
// It decides nothing: when to probe, unload, wake or check is the core's.
#pragma once

#include <utility>  // (before Boost.Asio's awaitable.hpp, which uses std::exchange)

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "core/actions.h"
#include "core/config.h"
#include "core/events.h"
#include "core/result.h"
#include "daemon/probe_scheduler.h"
#include "services/adapter.h"

namespace vramd {

class ServiceCalls {
 public:
  struct Hooks {
    // On the loop: ProbeDone, UnloadCallDone, WakeCallDone, HealthChecked.
    std::function<void(const Event&)> feed;
    // An unload call returned (after its UnloadCallDone): the daemon samples at once.
    std::function<void()> unload_returned;
  };
  // Makes an adapter: the real one (make_adapter) unless a test hands in its own.
  using MakeAdapter = std::function<Result<std::unique_ptr<Adapter>>(const ServiceConfig&)>;
  ServiceCalls(boost::asio::io_context& io, Hooks hooks, MakeAdapter make = {});

  // `svc`'s adapter; an error (its config's) when none can be made. A second add of a name
  // already known changes nothing.
  Status add(const ServiceConfig& svc);
  bool has(const std::string& service) const { return adapters_.count(service) > 0; }
  // Starts `service`'s probe loop (every `interval`, or when the core moves it: schedule).
  // REQUIRES: has(service).
  void watch(const std::string& service, Duration interval);
  void schedule(const std::string& service, Duration after) { probes_.schedule(service, after); }
  // Whether its adapter has a call that loads it again (false for an unknown service).
  bool can_wake(const std::string& service) const;

  // The core's calls; an unknown service's answer is a failure ("no adapter").
  void unload(CallUnload call);
  void wake(CallWake call);
  void check_health(const std::string& service);

  // Ends the probe loops; answers still out reach no one.
  void stop();

 private:
  // The adapter's unload (or wake) at `depth`, and how long it took; "no adapter" for an
  // unknown service.
  boost::asio::awaitable<std::pair<UnloadCall, Duration>> timed_call(std::string service, bool wake,
                                                                      SleepDepth depth);
  boost::asio::awaitable<void> call_unload(CallUnload call);
  boost::asio::awaitable<void> call_wake(CallWake call);
  boost::asio::awaitable<void> probe_loop(std::string service, Duration interval);

  boost::asio::io_context& io_;
  Hooks hooks_;
  MakeAdapter make_;
  std::map<std::string, std::unique_ptr<Adapter>> adapters_;
  ProbeScheduler probes_{io_};
  bool stopping_ = false;
};

}  // namespace vramd
