// What the request path (daemon/request_path.h) asks of the Daemon: whether a service's adapter
// can wake it, the wake calls the core makes (CallWake), and the models each proxied service
// serves. Part of class Daemon.
// GCC 12 needs <utility> before Boost's awaitable.hpp.
#include <utility>

#include <boost/asio/detached.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "core/eviction.h"
#include "core/service_kinds.h"
#include "core/wake.h"
#include "daemon/daemon.h"

namespace vramd {

namespace asio = boost::asio;

bool Daemon::can_wake(const std::string& service) const {
  auto adapter = adapters_.find(service);
  return adapter != adapters_.end() && adapter->second->can_wake();
}

asio::awaitable<void> Daemon::call_wake(CallWake call) {
  auto it = adapters_.find(call.service);
  WakeCallDone done{call.service, call.wake_id, {UnloadCall::Result::failed, "no adapter"}, {}};
  auto t0 = std::chrono::steady_clock::now();
  if (it != adapters_.end()) {
    auto op = it->second->wake(call.depth);
    done.call = co_await std::move(op);
  }
  done.took = std::chrono::duration_cast<Duration>(std::chrono::steady_clock::now() - t0);
  if (stopping_) co_return;
  feed(done);
}

void Daemon::each_models(const RequestPath::Hooks::EachModels& each) const {
  for (const auto& cfg : arbiter_.config().services) {
    if (!proxied(cfg)) continue;  // the front door routes only to what it reaches
    if (const ServiceStatus* st = arbiter_.service_policy_status(cfg.name)) each(cfg.name, st->models);
  }
}

}  // namespace vramd
