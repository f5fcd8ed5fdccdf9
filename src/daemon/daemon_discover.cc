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
  if (!cfg || adapters_.count(name)) return;
  auto adapter = make_adapter(*cfg, io_.get_executor());
  if (!adapter) {
    spdlog::warn("service {}: {}", name, adapter.error());
    return;
  }
  adapters_[name] = std::move(*adapter);
  // Its port (or pid file) is read from the next sample.
  sampling_.set_request(arbiter_.scan_request());
  asio::co_spawn(io_, probe_loop(name), asio::detached);
}

}  // namespace vramd
