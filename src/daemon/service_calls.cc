#include "daemon/service_calls.h"

#include <chrono>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>

namespace vramd {

namespace asio = boost::asio;

ServiceCalls::ServiceCalls(asio::io_context& io, Hooks hooks, MakeAdapter make)
    : io_(io), hooks_(std::move(hooks)), make_(std::move(make)) {
  if (!make_)
    make_ = [this](const ServiceConfig& svc) { return make_adapter(svc, io_.get_executor()); };
}

Status ServiceCalls::add(const ServiceConfig& svc) {
  if (adapters_.count(svc.name)) return Ok{};
  auto adapter = make_(svc);
  if (!adapter) return make_error(adapter.error());
  adapters_[svc.name] = std::move(*adapter);
  return Ok{};
}

void ServiceCalls::watch(const std::string& service, Duration interval) {
  asio::co_spawn(io_, probe_loop(service, interval), asio::detached);
}

bool ServiceCalls::can_wake(const std::string& service) const {
  auto it = adapters_.find(service);
  return it != adapters_.end() && it->second->can_wake();
}

void ServiceCalls::unload(CallUnload call) {
  asio::co_spawn(io_, call_unload(std::move(call)), asio::detached);
}

void ServiceCalls::wake(CallWake call) {
  asio::co_spawn(io_, call_wake(std::move(call)), asio::detached);
}

void ServiceCalls::check_health(const std::string& service) {
  auto it = adapters_.find(service);
  if (it == adapters_.end()) return;
  Adapter* adapter = it->second.get();
  auto check = [this, adapter, service]() -> asio::awaitable<void> {
    HealthCheck h = co_await adapter->health();
    if (!stopping_) hooks_.feed(HealthChecked{service, h.healthy, h.message});
  };
  asio::co_spawn(io_, std::move(check), asio::detached);
}

void ServiceCalls::stop() {
  stopping_ = true;
  probes_.stop();
}

asio::awaitable<std::pair<UnloadCall, Duration>> ServiceCalls::timed_call(std::string service,
                                                                       bool wake,
                                                                       SleepDepth depth) {
  UnloadCall answer{UnloadCall::Result::failed, "no adapter"};
  auto t0 = std::chrono::steady_clock::now();
  if (auto it = adapters_.find(service); it != adapters_.end()) {
    auto op = wake ? it->second->wake(depth) : it->second->unload(depth);
    answer = co_await std::move(op);
  }
  co_return std::pair{std::move(answer),
                      std::chrono::duration_cast<Duration>(std::chrono::steady_clock::now() - t0)};
}

asio::awaitable<void> ServiceCalls::call_unload(CallUnload call) {
  auto op = timed_call(call.service, /*wake=*/false, call.depth);
  auto [answer, took] = co_await std::move(op);
  if (stopping_) co_return;
  hooks_.feed(UnloadCallDone{call.service, call.unload_id, std::move(answer), took});
  if (hooks_.unload_returned) hooks_.unload_returned();
}

asio::awaitable<void> ServiceCalls::call_wake(CallWake call) {
  auto op = timed_call(call.service, /*wake=*/true, call.depth);
  auto [answer, took] = co_await std::move(op);
  if (stopping_) co_return;
  hooks_.feed(WakeCallDone{call.service, call.wake_id, std::move(answer), took});
}

asio::awaitable<void> ServiceCalls::probe_loop(std::string service, Duration interval) {
  Adapter& adapter = *adapters_.at(service);
  ProbeScheduler::Probe probe = [&adapter] { return adapter.probe(); };
  ProbeScheduler::Answered answered = [this, service, &adapter](ServiceProbe p) {
    p.can_wake = adapter.can_wake();  // llama.cpp's is known once its router is detected
    hooks_.feed(ProbeDone{service, std::move(p)});
  };
  // Named, then awaited: GCC 12 destroys temporaries of a co_await's full expression twice
  // (ASan: "free on address which was not malloc()-ed"), as elsewhere in the daemon.
  auto loop = probes_.run(service, std::move(probe), std::move(answered), interval);
  co_await std::move(loop);
}

}  // namespace vramd
