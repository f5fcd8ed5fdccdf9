// The daemon's side of the request path (src/proxy): requests in flight become the service's
// activity in the core, and a request for a service that is stopped, asleep or unloaded is held
// while vramd makes it ready: a start (through start admission) for a service vramd runs, else
// room admitted like a lease (vram_estimate) and the adapter's wake. Part of class Daemon.
// GCC 12 needs <utility> before Boost's awaitable.hpp.
#include <utility>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "core/eviction.h"
#include "core/service_kinds.h"
#include "daemon/daemon.h"

namespace vramd {

namespace asio = boost::asio;

ProxyOptions proxy_options(const Config& config) {
  ProxyOptions o;
  o.listen = config.proxy.listen;
  o.api_keys = config.proxy.api_keys;
  o.aliases = config.proxy.aliases;
  o.websocket_idle = config.proxy.websocket_idle;
  o.forbidden_upstreams.push_back(config.daemon.listen);
  for (const auto& svc : config.services) {
    const ServiceKind* kind = find_service_kind(svc.kind);
    if (!kind || !kind->needs_url || svc.url.empty()) continue;
    ProxyServiceOptions s;
    s.name = svc.name;
    s.url = svc.url;
    s.listen = svc.proxy.listen;
    s.api_key = svc.api_key;
    if (s.api_key.empty() && !svc.api_key_env.empty())
      if (const char* v = std::getenv(svc.api_key_env.c_str())) s.api_key = v;
    s.models = svc.models;
    s.connect_timeout = svc.connect_timeout;
    s.first_byte_timeout = svc.proxy.first_byte_timeout;
    s.wake_timeout = svc.proxy.wake_timeout.value_or(svc.start_timeout);
    s.max_concurrent = svc.proxy.max_concurrent;
    s.max_queue = svc.proxy.max_queue;
    o.services.push_back(std::move(s));
  }
  return o;
}

bool wants_proxy(const Config& config) {
  if (!config.proxy.listen.empty()) return true;
  for (const auto& svc : config.services)
    if (!svc.proxy.listen.empty()) return true;
  return false;
}

void Daemon::request_started(const std::string& service) {
  feed(RequestsInFlight{service, ++in_flight_[service]});
}

void Daemon::request_ended(const std::string& service) {
  int& n = in_flight_[service];
  n = std::max(0, n - 1);
  feed(RequestsInFlight{service, n});
}

namespace {

// Unloaded by vramd and not loaded since: its next request needs a wake first (where the kind
// has one; ComfyUI and Ollama load on the request itself).
bool unloaded(const ServiceStatus& st) {
  return st.last_unload && st.last_unload->outcome == UnloadOutcome::freed &&
         st.bytes < kWorthUnloading;
}

}  // namespace

bool Daemon::is_ready(const std::string& service, const std::string& /*model*/) {
  const ServiceStatus* st = arbiter_.service(service);
  if (!st) return true;  // the proxy answers for unknown names itself
  if (st->managed && st->managed->state != ManagedPhase::running) return false;
  if (st->state == ServiceState::unloading) return false;
  auto adapter = adapters_.find(service);
  bool wakes = adapter != adapters_.end() && adapter->second->can_wake();
  return !(wakes && unloaded(*st));
}

asio::awaitable<WakeResult> Daemon::ensure_ready(std::string service, std::string model,
                                                 WakeProgress progress) {
  const ServiceConfig* cfg = arbiter_.config().find_service(service);
  if (!cfg) co_return WakeResult::refused(fmt::format("no service named '{}'", service));
  const ServiceStatus* st = arbiter_.service(service);
  Duration limit = cfg->proxy.wake_timeout.value_or(cfg->start_timeout);

  // A service vramd runs: start it (start admission evicts idle holders to make room).
  if (st && st->managed && st->managed->state != ManagedPhase::running) {
    progress(fmt::format("starting {}", service));
    uint64_t id = service_command(service, Command::start, false);
    auto wait = wait_command(id, limit);  // named: GCC 12 and temporaries in co_await
    CommandFinished done = co_await std::move(wait);
    if (done.ok) co_return WakeResult::ready();
    const ServiceStatus* now = arbiter_.service(service);
    std::string why =
        now && now->managed && !now->managed->reason.empty() ? now->managed->reason : done.message;
    co_return WakeResult::refused(fmt::format("{} is not up: {}", service, why));
  }
  auto adapter = adapters_.find(service);
  if (adapter == adapters_.end() || !adapter->second->can_wake() || !st || !unloaded(*st))
    co_return WakeResult::ready();  // it loads on the request itself

  // A wake needs its memory back: admitted by the budget like a lease (idle others evicted).
  std::optional<uint64_t> lease;
  if (cfg->vram_estimate) {
    LeaseRequest r;
    r.vram = *cfg->vram_estimate;
    r.gpu = st->last_gpu;
    r.holder = "vramd proxy";
    r.label = "wake " + service;
    r.service = service;
    r.command = model;
    auto id = request_lease(std::move(r));
    if (!id) co_return WakeResult::refused(id.error());
    lease = *id;
    auto deadline = std::chrono::steady_clock::now() + limit;
    for (;;) {
      const Lease* l = arbiter_.lease(*lease);
      if (!l || l->state != LeaseState::queued) break;
      progress(fmt::format("waiting for GPU room: {}", l->reason.text));
      if (std::chrono::steady_clock::now() >= deadline) break;
      auto wait = wait_lease(*lease, std::chrono::seconds(2));
      co_await std::move(wait);
    }
    const Lease* l = arbiter_.lease(*lease);
    if (!l || l->state != LeaseState::granted) {
      std::string why = l ? l->reason.text : "the lease ended";
      std::string holder = l && !l->reason.blockers.empty() ? l->reason.blockers[0].owner : "";
      release_lease(*lease, std::nullopt);
      co_return WakeResult::refused(why, holder);
    }
  }
  progress(fmt::format("waking {}", service));
  auto op = adapter->second->wake();
  UnloadCall call = co_await std::move(op);
  if (lease) release_lease(*lease, std::nullopt);  // its memory is the service's own again
  apply({make_event(
      clock_(), call.result == UnloadCall::Result::failed ? "service.wake_failed" : "service.woken",
      std::nullopt, service,
      fmt::format("wake {} for {}: {}", service, model.empty() ? "a request" : model,
                  call.message))});
  if (call.result == UnloadCall::Result::failed)
    co_return WakeResult::refused(fmt::format("wake {} failed: {}", service, call.message));
  co_return WakeResult::ready();
}

std::vector<ModelEntry> Daemon::models() {
  std::vector<ModelEntry> out;
  for (const auto& st : arbiter_.services())
    for (const auto& m : st.models) out.push_back({m, st.name});
  return out;
}

}  // namespace vramd
