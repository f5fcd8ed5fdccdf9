// Discovery at run time (`[daemon] discover`, issue 27: one part of the Daemon with its own
// members and tests). Every `discover_interval`, the GPU processes that no configured service,
// lease or baseline owns are looked at as `vramd discover` does (their parents, the ports they
// listen on, each kind's fingerprint there); each server found is handed on as a ServiceConfig,
// which the Daemon feeds to the core as ServiceDiscovered. The host is read on the sampler
// thread; the fingerprint GETs run on the loop (short timeouts, GET only).
#pragma once

// GCC 12 needs <utility> before Boost's awaitable.hpp.
#include <utility>

#include <functional>
#include <map>
#include <vector>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include "core/config.h"
#include "core/ledger.h"
#include "services/discovery.h"

namespace vramd {

class Arbiter;
class SampleLoop;

// What a pass looks at and what it adds: no I/O, tested alone.
class DiscoveryPicker {
 public:
  // A GPU process is looked at this many times (a server may hold memory before it listens),
  // then left as it is until it ends.
  static constexpr int kTries = 3;

  // The GPU processes this pass looks at (their bytes and GPUs), from the last status: those
  // no service, lease or baseline owns, each at most kTries passes. Counts this pass's tries;
  // a pid that left the GPUs is forgotten (a new process with its pid is new).
  DiscoveryInput pick(const StatusSnapshot& status);
  // The servers found that no configured service has the port of, named apart from the
  // configured services and from each other ("ollama", then "ollama-2", ...).
  static std::vector<ServiceConfig> new_services(const DiscoveryResult& result,
                                                 const Config& config);

 private:
  std::map<int, int> tries_;  // GPU pid -> passes that looked at it
};

class DiscoveryLoop {
 public:
  using Found = std::function<void(ServiceConfig)>;
  // REQUIRES: `arbiter` and `sampling` outlive it.
  DiscoveryLoop(boost::asio::io_context& io, const Arbiter& arbiter, SampleLoop& sampling,
                Found found);

  // Until stop(): a first look a second after the start, once a sample has named the GPUs'
  // owners, then every discover_interval.
  boost::asio::awaitable<void> run();
  void stop();

 private:
  boost::asio::awaitable<void> once();

  boost::asio::io_context& io_;
  const Arbiter& arbiter_;
  SampleLoop& sampling_;
  Found found_;
  boost::asio::steady_timer timer_;
  DiscoveryPicker picker_;
  bool stopping_ = false;
};

}  // namespace vramd
