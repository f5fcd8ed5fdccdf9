// The daemon's side of the request path (src/proxy): requests in flight become the service's
// activity in the core, and a request for a service that is stopped, asleep or unloaded is held
// while the core makes it ready (core/wakes.h: WakeRequested in, CallWake and WakeFinished out;
// this file only carries them). Part of class Daemon.
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

namespace {

// A service the request path reaches: one of a kind with an HTTP API, and its url. Not one found
// by discovery: the proxy's routes are set at start, and a discovered service is only watched.
bool proxied(const ServiceConfig& svc) {
  const ServiceKind* kind = find_service_kind(svc.kind);
  return kind && kind->needs_url && !svc.url.empty() && !svc.discovered;
}

}  // namespace

ProxyOptions proxy_options(const Config& config) {
  ProxyOptions o;
  o.listen = config.proxy.listen;
  o.api_keys = config.proxy.api_keys;
  o.aliases = config.proxy.aliases;
  o.websocket_idle = config.proxy.websocket_idle;
  o.forbidden_upstreams.push_back(config.daemon.listen);
  for (const auto& svc : config.services) {
    if (!proxied(svc)) continue;
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

// The first request's start and the last one's end reach the core at once (busy, and the
// activity that ends it); counts in between are sent once per turn of the loop, however many
// requests started and ended in it (under load, one event instead of two per request).
void Daemon::request_started(const std::string& service) {
  in_flight_changed(service, ++in_flight_[service]);
}

void Daemon::request_ended(const std::string& service) {
  int& n = in_flight_[service];
  n = std::max(0, n - 1);
  in_flight_changed(service, n);
}

void Daemon::in_flight_changed(const std::string& service, int now_in_flight) {
  if (now_in_flight <= 1) {  // 0 -> 1 or 1 -> 0 (or 2 -> 1: sent at once, it is cheap enough)
    in_flight_dirty_.erase(service);
    feed(RequestsInFlight{service, now_in_flight});
    return;
  }
  if (!in_flight_dirty_.insert(service).second || in_flight_flush_posted_) return;
  in_flight_flush_posted_ = true;
  asio::post(io_, [this] {
    in_flight_flush_posted_ = false;
    if (stopping_) return;
    std::set<std::string> dirty;
    dirty.swap(in_flight_dirty_);
    for (const auto& service : dirty) feed(RequestsInFlight{service, in_flight_[service]});
  });
}

bool Daemon::can_wake(const std::string& service) const {
  auto adapter = adapters_.find(service);
  return adapter != adapters_.end() && adapter->second->can_wake();
}

bool Daemon::is_ready(const std::string& service, const std::string& model) {
  return arbiter_.ready_for(service, model, can_wake(service));
}

// The wake is the core's (core/wakes.h): it is asked for, and its answer awaited. Progress
// reaches the held request as the core tells it (WakeProgressed).
asio::awaitable<WakeResult> Daemon::ensure_ready(std::string service, std::string model,
                                                 WakeProgress progress) {
  uint64_t id = next_wake_++;
  WakeWaiter& w = wake_waiters_.add(id);  // until the core answers (or vramd stops)
  w.service = service;
  w.model = model;
  w.progress = std::move(progress);
  feed(WakeRequested{id, service, model, can_wake(service)});
  std::optional<WakeFinished> done = co_await wake_waiters_.wait(id);
  if (!done) co_return WakeResult::refused("vramd is stopping");
  if (done->outcome == WakeOutcome::ready) co_return WakeResult::ready();
  co_return WakeResult::refused(done->message, done->holder);
}

void Daemon::abandon_wake(const std::string& service, const std::string& model) {
  std::vector<uint64_t> cancelled;  // fed after the walk: feeding may answer (and so change) them
  wake_waiters_.for_each_pending([&](uint64_t id, const WakeWaiter& w) {
    if (w.service == service && w.model == model) cancelled.push_back(id);
  });
  for (uint64_t id : cancelled) feed(WakeCancelled{id});
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

nlohmann::json Daemon::request_path() const {
  using nlohmann::json;
  if (!proxy_) return {{"enabled", false}};
  const Config& cfg = arbiter_.config();
  auto url = [](const std::string& listen, int port) {
    std::string host = listen.substr(0, listen.rfind(':'));
    return fmt::format("http://{}:{}", host.empty() ? "127.0.0.1" : host, port);
  };
  json front = nullptr;
  if (!cfg.proxy.listen.empty())
    front = {{"listen", cfg.proxy.listen},
             {"url", url(cfg.proxy.listen, proxy_->front_door_port()) + "/v1"},
             {"keys", !cfg.proxy.api_keys.empty() || !cfg.proxy.api_keys_file.empty()}};
  json models = json::array();
  for (const auto& m : proxy_->models()) models.push_back({{"model", m.model}, {"service", m.service}});
  json services = json::array();
  const ProxyMetrics& metrics = proxy_->metrics();
  for (const auto& svc : cfg.services) {
    if (!proxied(svc)) continue;
    int port = proxy_->service_port(svc.name);
    auto it = in_flight_.find(svc.name);
    services.push_back(
        {{"name", svc.name},
         {"url", port ? json(url(svc.proxy.listen, port)) : json(nullptr)},
         {"requests_total", metrics.requests_total(svc.name)},
         {"server_errors_total", metrics.server_errors_total(svc.name)},
         {"upstream_errors_total", metrics.upstream_errors(svc.name)},
         {"held_total", metrics.held_count(svc.name)},
         {"in_flight", it == in_flight_.end() ? 0 : it->second}});
  }
  return {{"enabled", true},
          {"front_door", front},
          {"models", models},
          {"aliases", cfg.proxy.aliases},
          {"services", services}};
}

std::vector<ModelEntry> Daemon::models() {
  std::vector<ModelEntry> out;
  for (const auto& st : arbiter_.services()) {
    const ServiceConfig* cfg = arbiter_.config().find_service(st.name);
    if (!cfg || !proxied(*cfg)) continue;  // the front door routes only to what it reaches
    for (const auto& m : st.models) out.push_back({m, st.name});
  }
  return out;
}

}  // namespace vramd
