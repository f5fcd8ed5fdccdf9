// The daemon's side of the request path (src/proxy): requests in flight become the service's
// activity in the core, and a request for a service that is stopped, asleep or unloaded is held
// while vramd makes it ready. What to do is the core's choice (core/wake.h): a start (through
// start admission) for a service vramd runs, else room admitted like a lease for what its loads
// were measured to take, and the adapter's wake. Part of class Daemon.
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

namespace {

constexpr auto kUnloadPoll = std::chrono::milliseconds(250);

// "; evicted comfyui, ollama" for the wake's event, "" when nothing had to give way.
std::string evicted_text(const Lease* l) {
  if (!l || l->evicted.empty()) return "";
  return fmt::format("; evicted {}", fmt::join(l->evicted, ", "));
}

std::string seconds_text(std::chrono::steady_clock::duration d) {
  return fmt::format("{:.1f} s", std::chrono::duration<double>(d).count());
}

}  // namespace

bool Daemon::can_wake(const std::string& service) const {
  auto adapter = adapters_.find(service);
  return adapter != adapters_.end() && adapter->second->can_wake();
}

bool Daemon::is_ready(const std::string& service, const std::string& model) {
  const ServiceStatus* st = arbiter_.service(service);
  const ServiceConfig* cfg = arbiter_.config().find_service(service);
  if (!st || !cfg) return true;  // the proxy answers for unknown names itself
  return plan_wake(*st, *cfg, can_wake(service), model).step == WakeStep::ready;
}

asio::awaitable<WakeResult> Daemon::ensure_ready(std::string service, std::string model,
                                                 WakeProgress progress) {
  const ServiceConfig* cfg = arbiter_.config().find_service(service);
  if (!cfg) co_return WakeResult::refused(fmt::format("no service named '{}'", service));
  Duration limit = cfg->proxy.wake_timeout.value_or(cfg->start_timeout);
  auto t0 = std::chrono::steady_clock::now();
  auto deadline = t0 + limit;
  // What to do is the core's choice (core/wake.h); an unload under way is waited out first.
  WakePlan plan;
  asio::steady_timer poll(io_);
  for (;;) {
    const ServiceStatus* st = arbiter_.service(service);
    if (!st) co_return WakeResult::ready();
    plan = plan_wake(*st, *cfg, can_wake(service), model);
    if (plan.step != WakeStep::wait) break;
    if (std::chrono::steady_clock::now() >= deadline || stopping_)
      co_return WakeResult::refused(fmt::format("{} is still being unloaded", service), service);
    progress(fmt::format("waiting for the unload of {} to finish", service));
    poll.expires_after(kUnloadPoll);
    boost::system::error_code ec;
    co_await poll.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
  if (plan.step == WakeStep::start) {
    auto left = std::chrono::duration_cast<Duration>(deadline - std::chrono::steady_clock::now());
    auto op = start_for_request(service, model, left, progress);
    co_return co_await std::move(op);
  }
  if (plan.step == WakeStep::wake || plan.step == WakeStep::admit) {
    auto op = wake_for_request(service, model, plan, deadline, progress);
    co_return co_await std::move(op);
  }
  co_return WakeResult::ready();  // it loads on the request itself
}

asio::awaitable<WakeResult> Daemon::start_for_request(std::string service, std::string model,
                                                      Duration limit, WakeProgress progress) {
  // A service vramd runs: start it (start admission evicts idle holders to make room).
  auto t0 = std::chrono::steady_clock::now();
  progress(fmt::format("starting {}", service));
  uint64_t id = service_command(service, Command::start, false);
  std::optional<uint64_t> start_lease;
  if (const ServiceStatus* st = arbiter_.service(service); st && st->managed)
    start_lease = st->managed->start_lease;
  auto wait = wait_command(id, limit);  // named: GCC 12 and temporaries in co_await
  CommandFinished done = co_await std::move(wait);
  const Lease* l = start_lease && *start_lease ? arbiter_.lease(*start_lease) : nullptr;
  if (done.ok) {
    apply({make_event(clock_(), "service.woken", std::nullopt, service,
                      fmt::format("started {} for {} in {}{}", service,
                                  model.empty() ? "a request" : model,
                                  seconds_text(std::chrono::steady_clock::now() - t0),
                                  evicted_text(l)))});
    co_return WakeResult::ready();
  }
  const ServiceStatus* now = arbiter_.service(service);
  std::string why =
      now && now->managed && !now->managed->reason.empty() ? now->managed->reason : done.message;
  co_return WakeResult::refused(fmt::format("{} is not up: {}", service, why));
}

asio::awaitable<WakeResult> Daemon::wake_for_request(std::string service, std::string model,
                                                     WakePlan plan,
                                                     std::chrono::steady_clock::time_point deadline,
                                                     WakeProgress progress) {
  auto t0 = std::chrono::steady_clock::now();
  const ServiceStatus* st = arbiter_.service(service);
  // Its memory comes back (a wake) or is taken (a load on the request): admitted by the budget
  // like a lease (idle others evicted), for what the core learned it takes (plan.room).
  std::optional<uint64_t> lease;
  std::string evicted;
  if (plan.room) {
    LeaseRequest r;
    r.vram = plan.room->bytes;
    r.gpu = st ? st->last_gpu : std::nullopt;
    r.holder = "vramd proxy";
    r.label = (plan.step == WakeStep::wake ? "wake " : "load ") + service;
    r.service = service;
    r.command = model;
    auto id = request_lease(std::move(r));
    if (!id) co_return WakeResult::refused(id.error());
    lease = *id;
    progress(fmt::format("needs {} ({})", format_size(plan.room->bytes), plan.room->source));
    for (;;) {
      const Lease* l = arbiter_.lease(*lease);
      if (!l || l->state != LeaseState::queued) break;
      progress(fmt::format("waiting for GPU room: {}", l->reason.text));
      if (std::chrono::steady_clock::now() >= deadline || stopping_) break;
      lease_heartbeat(*lease);  // a wait longer than lease_heartbeat must not expire it
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
    evicted = evicted_text(l);
  }
  UnloadCall call{UnloadCall::Result::requested, "loads on the request"};
  if (plan.step == WakeStep::wake) {
    progress(fmt::format("waking {}", service));
    auto adapter = adapters_.find(service);
    call = {UnloadCall::Result::failed, "no adapter"};
    if (adapter != adapters_.end()) {
      auto op = adapter->second->wake();
      call = co_await std::move(op);
    }
    sample_gate_.list_processes();  // the load's processes show at the next sample
  }
  bool failed = call.result == UnloadCall::Result::failed;
  // The lease holds the room until the load shows on the GPU, not just until the call returned:
  // else the next admission pass would hand out the bytes the load is about to take.
  if (lease) {
    if (failed)
      release_lease(*lease, std::nullopt);
    else
      asio::co_spawn(io_, release_when_loaded(*lease, service, plan.room->bytes), asio::detached);
  }
  std::string room = plan.room ? fmt::format(", room for {} ({})", format_size(plan.room->bytes),
                                             plan.room->source)
                               : std::string();
  const char* type = failed ? "service.wake_failed"
                     : plan.step == WakeStep::wake ? "service.woken"
                                                   : "service.load_admitted";
  apply({make_event(clock_(), type, std::nullopt, service,
                    fmt::format("{} {} for {} in {}{}{}: {}",
                                plan.step == WakeStep::wake ? "wake" : "admitted the load of",
                                service, model.empty() ? "a request" : model,
                                seconds_text(std::chrono::steady_clock::now() - t0), room,
                                evicted, call.message))});
  if (failed) co_return WakeResult::refused(fmt::format("wake {} failed: {}", service, call.message));
  co_return WakeResult::ready();
}

asio::awaitable<void> Daemon::release_when_loaded(uint64_t lease, std::string service, Bytes room) {
  // Until the service holds most of the room, or its load stopped growing, or two reload costs passed
  // (at least 30 s, at most 5 min); heartbeats meanwhile. The lease counts the service's bytes as
  // its own (request.service), so nothing is counted twice while both exist.
  const ServiceStatus* st = arbiter_.service(service);
  Duration reload = st ? st->reload_cost : Duration(std::chrono::seconds(30));
  auto limit = std::clamp<Duration>(2 * reload, std::chrono::seconds(30), std::chrono::minutes(5));
  auto until = std::chrono::steady_clock::now() + limit;
  asio::steady_timer timer(io_);
  Bytes last = 0;
  int steady = 0;  // polls in a row at a loaded, unchanged size: a load smaller than its room
  while (!stopping_ && std::chrono::steady_clock::now() < until) {
    const ServiceStatus* now = arbiter_.service(service);
    if (!now || !arbiter_.lease(lease)) break;
    if (now->bytes >= room - room / 10) break;
    steady = now->bytes >= kWorthUnloading && now->bytes == last ? steady + 1 : 0;
    last = now->bytes;
    if (steady >= 8) break;  // 2 s of samples without growth
    lease_heartbeat(lease);
    timer.expires_after(kUnloadPoll);
    boost::system::error_code ec;
    co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
  if (!stopping_) release_lease(lease, std::nullopt);
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
