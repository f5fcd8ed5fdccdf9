// A service the core added at run time (found by daemon/discovery_loop.h, fed as
// ServiceDiscovered) gets its adapter and its probe loop. Part of class Daemon.
// GCC 12 needs <utility> before Boost's awaitable.hpp.
#include <utility>

#include <spdlog/spdlog.h>
#include <boost/asio/detached.hpp>

#include "daemon/daemon.h"

namespace vramd {

namespace asio = boost::asio;

void Daemon::watch_service(const std::string& name) {
  const ServiceConfig* cfg = arbiter_.config().find_service(name);
  if (!cfg || calls_.has(name)) return;
  if (auto s = calls_.add(*cfg); !s) {
    spdlog::warn("service {}: {}", name, s.error());
    return;
  }
  // Its port (or pid file) is read from the next sample.
  sampling_.set_request(arbiter_.scan_request());
  calls_.watch(name, arbiter_.config().daemon.probe_interval);
  requests_.service_added(*cfg);  // its models are routed by the front door too
}

}  // namespace vramd
