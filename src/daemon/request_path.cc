// The daemon's side of the request path: see request_path.h.
#include "daemon/request_path.h"

#include <boost/asio/post.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdlib>
#include <thread>

#include "core/service_kinds.h"

namespace vramd {

namespace asio = boost::asio;

bool proxied(const ServiceConfig& svc) {
  const ServiceKind* kind = find_service_kind(svc.kind);
  return kind && kind->needs_url && !svc.url.empty();
}

// llama-server's HTTP threads by default (`--threads-http -1`: max(slots + 2, CPUs - 1), each
// connection holding one for its life) less one, left for vramd's probes and other clients.
int llama_connections(int slots) {
  int cpus = static_cast<int>(std::thread::hardware_concurrency());
  return std::max(std::max(slots, 1) + 2, cpus - 1) - 1;
}

ProxyServiceOptions service_options(const ServiceConfig& svc) {
  ProxyServiceOptions s;
  s.name = svc.name;
  s.url = svc.url;
  s.listen = svc.proxy.listen;
  s.api_key = svc.api_key;
  if (s.api_key.empty() && !svc.api_key_env.empty())
    if (const char* v = std::getenv(svc.api_key_env.c_str())) s.api_key = v;
  s.models = svc.models;
  const ServiceKind* kind = find_service_kind(svc.kind);
  s.ollama_api = kind && kind->ollama_api;
  s.connect_timeout = svc.connect_timeout;
  s.first_byte_timeout = svc.proxy.first_byte_timeout;
  s.wake_timeout = svc.proxy.wake_timeout.value_or(svc.start_timeout);
  s.max_concurrent = svc.proxy.max_concurrent;
  s.max_queue = svc.proxy.max_queue;
  s.keep_alive_timeout =
      svc.proxy.keep_alive_timeout.value_or(kind ? kind->keep_alive_timeout : s.keep_alive_timeout);
  s.max_connections = svc.proxy.max_connections > 0 ? svc.proxy.max_connections
                      : kind && kind->fixed_http_threads ? llama_connections(1)
                                                         : 0;
  return s;
}

ProxyOptions proxy_options(const Config& config) {
  ProxyOptions o;
  o.listen = config.proxy.listen;
  o.api_keys = config.proxy.api_keys;
  o.aliases = config.proxy.aliases;
  o.websocket_idle = config.proxy.websocket_idle;
  o.forbidden_upstreams.push_back(config.daemon.listen);
  for (const auto& svc : config.services)
    if (proxied(svc)) o.services.push_back(service_options(svc));
  return o;
}

bool wants_proxy(const Config& config) {
  if (!config.proxy.listen.empty()) return true;
  for (const auto& svc : config.services)
    if (!svc.proxy.listen.empty()) return true;
  return false;
}

Status RequestPath::start(const Config& config, RequestLog* log) {
  if (!wants_proxy(config)) return Ok{};
  ProxyOptions options = proxy_options(config);
  options.request_log = log;
  if (!config.proxy.api_keys_file.empty()) {
    auto keys = read_api_keys_file(config.proxy.api_keys_file);
    if (!keys) return make_error(keys.error());
    options.api_keys.insert(options.api_keys.end(), keys->begin(), keys->end());
  }
  for (const auto& svc : config.services) {
    const ServiceKind* kind = find_service_kind(svc.kind);
    if (proxied(svc) && kind && kind->fixed_http_threads && svc.proxy.max_connections == 0)
      sized_by_slots_.insert(svc.name);
  }
  proxy_ = std::make_unique<Proxy>(io_, std::move(options), *this);
  return proxy_->start();
}

void RequestPath::service_added(const ServiceConfig& svc) {
  if (!proxy_ || !proxied(svc)) return;
  if (Status s = proxy_->add_service(service_options(svc)); !s)
    spdlog::warn("proxy: {}", s.error());
  const ServiceKind* kind = find_service_kind(svc.kind);
  if (kind && kind->fixed_http_threads && svc.proxy.max_connections == 0)
    sized_by_slots_.insert(svc.name);
}

void RequestPath::heard_slots(const std::string& service, int slots) {
  if (proxy_ && sized_by_slots_.count(service))
    proxy_->set_max_connections(service, llama_connections(slots));
}

void RequestPath::stop() {
  stopping_ = true;
  wakes_.stop();
}

void RequestPath::close() {
  if (proxy_) proxy_->close();
}

// The first request's start and the last one's end reach the core at once (busy, and the
// activity that ends it); counts in between are sent once per turn of the loop, however many
// requests started and ended in it (under load, one event instead of two per request).
void RequestPath::request_started(const std::string& service) {
  in_flight_changed(service, ++in_flight_[service]);
}

void RequestPath::request_ended(const std::string& service) {
  int& n = in_flight_[service];
  n = std::max(0, n - 1);
  in_flight_changed(service, n);
}

void RequestPath::in_flight_changed(const std::string& service, int now_in_flight) {
  if (now_in_flight <= 1) {  // 0 -> 1 or 1 -> 0 (or 2 -> 1: sent at once, it is cheap enough)
    in_flight_dirty_.erase(service);
    hooks_.feed(RequestsInFlight{service, now_in_flight});
    return;
  }
  if (!in_flight_dirty_.insert(service).second || flush_posted_) return;
  flush_posted_ = true;
  asio::post(io_, [this] {
    flush_posted_ = false;
    if (stopping_) return;
    std::set<std::string> dirty;
    dirty.swap(in_flight_dirty_);
    for (const auto& service : dirty) hooks_.feed(RequestsInFlight{service, in_flight_[service]});
  });
}

ModelList RequestPath::models() {
  size_t i = 0;
  bool same = models_ != nullptr;
  hooks_.models(
      [&](const std::string& service, bool ollama_api, const std::vector<std::string>& models) {
        for (const auto& m : models) {
          same = same && i < models_->size() && (*models_)[i].model == m &&
                 (*models_)[i].service == service && (*models_)[i].ollama_api == ollama_api;
          ++i;
        }
      });
  if (same && i == models_->size()) return models_;
  auto fresh = std::make_shared<std::vector<ModelEntry>>();
  fresh->reserve(i);
  hooks_.models(
      [&](const std::string& service, bool ollama_api, const std::vector<std::string>& models) {
        for (const auto& m : models) fresh->push_back({m, service, ollama_api});
      });
  models_ = std::move(fresh);
  return models_;
}

int RequestPath::in_flight(const std::string& service) const {
  auto it = in_flight_.find(service);
  return it == in_flight_.end() ? 0 : it->second;
}

bool RequestPath::is_ready(const std::string& service, const std::string& model) {
  return hooks_.ready(service, model);
}

// The wake is the core's (core/wakes.h): it is asked for, and its answer awaited. Progress
// reaches the held request as the core tells it (WakeProgressed).
asio::awaitable<WakeResult> RequestPath::ensure_ready(std::string service, std::string model,
                                                      WakeProgress progress) {
  if (stopping_) co_return WakeResult::refused("vramd is stopping");
  uint64_t id = wakes_.next_id();
  Waiting& w = wakes_.add(id);  // until the core answers (or vramd stops)
  w.service = service;
  w.model = model;
  w.progress = std::move(progress);
  hooks_.feed(WakeRequested{id, service, model, hooks_.can_wake(service)});
  std::optional<WakeFinished> done = co_await wakes_.wait(id);
  if (!done) co_return WakeResult::refused("vramd is stopping");
  if (done->outcome == WakeOutcome::ready) co_return WakeResult::ready();
  co_return WakeResult::refused(done->message, done->holder);
}

void RequestPath::wake_progressed(const WakeProgressed& wp) {
  if (Waiting* w = wakes_.pending(wp.id); w && w->progress) w->progress(wp.text);
}

void RequestPath::abandon_wake(const std::string& service, const std::string& model) {
  std::vector<uint64_t> cancelled;  // fed after the walk: feeding may answer (and so change) them
  wakes_.for_each_pending([&](uint64_t id, const Waiting& w) {
    if (w.service == service && w.model == model) cancelled.push_back(id);
  });
  for (uint64_t id : cancelled) hooks_.feed(WakeCancelled{id});
}

nlohmann::json RequestPath::describe(const Config& cfg) const {
  using nlohmann::json;
  if (!proxy_) return {{"enabled", false}};
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
    services.push_back({{"name", svc.name},
                        {"url", port ? json(url(svc.proxy.listen, port)) : json(nullptr)},
                        {"requests_total", metrics.requests_total(svc.name)},
                        {"server_errors_total", metrics.server_errors_total(svc.name)},
                        {"upstream_errors_total", metrics.upstream_errors(svc.name)},
                        {"held_total", metrics.held_count(svc.name)},
                        {"in_flight", in_flight(svc.name)}});
  }
  return {{"enabled", true},
          {"front_door", front},
          {"models", models},
          {"aliases", cfg.proxy.aliases},
          {"services", services}};
}

}  // namespace vramd
