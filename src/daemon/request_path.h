// The daemon's side of the request path (src/proxy): the proxy itself, the requests in flight
// per service (the service's activity in the core), and the held requests' wakes (core/wakes.h:
// WakeRequested in, WakeFinished and WakeProgressed out; this part only carries them). It
// decides nothing: whether a service is ready, and every wake, are the core's.
#pragma once

#include <utility>  // (before Boost.Asio's awaitable.hpp, which uses std::exchange)

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>

#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "core/actions.h"
#include "core/config.h"
#include "core/events.h"
#include "daemon/waiters.h"
#include "proxy/hooks.h"
#include "proxy/proxy.h"

namespace vramd {

// The request path's options from the config (docs/proxy.md), and whether any proxy is asked for.
// A service the request path reaches: one of a kind with an HTTP API, and its url. One found by
// discovery too (its models are routed; routing is not managing: it is still never unloaded,
// stopped or evicted until the config names it).
bool proxied(const ServiceConfig& svc);
ProxyServiceOptions service_options(const ServiceConfig& svc);
ProxyOptions proxy_options(const Config& config);
// llama-server's default HTTP threads for `slots` slots on this machine, less one (docs/proxy.md).
int llama_connections(int slots);
bool wants_proxy(const Config& config);

class RequestPath : public ProxyHooks {
 public:
  struct Hooks {
    std::function<void(const Event&)> feed;  // an event to the core, on the loop
    // Whether `service` takes a request for `model` now (the core's answer), and whether its
    // adapter can wake it.
    std::function<bool(const std::string& service, const std::string& model)> ready;
    std::function<bool(const std::string& service)> can_wake;
    // Calls `each` with every proxied service, whether it serves Ollama's API
    // (ModelEntry::ollama_api), and the models it serves, in config order, copying nothing (a
    // service may be named more than once: its probed models, then its configured ones).
    using EachModels = std::function<void(const std::string& service, bool ollama_api,
                                          const std::vector<std::string>& models)>;
    std::function<void(const EachModels& each)> models;
  };
  RequestPath(boost::asio::io_context& io, Hooks hooks) : io_(io), hooks_(std::move(hooks)) {}

  // Opens the proxy's listeners (only when the config asks for one).
  Status start(const Config& config, RequestLog* log);
  // Ends the waits for wakes ("vramd is stopping"); the counts already sent stay sent.
  void stop();
  void close();  // the proxy's listeners and connections

  // The core's answers to a wake.
  void wake_finished(const WakeFinished& wf) { wakes_.answer(wf.id, wf); }
  void wake_progressed(const WakeProgressed& wp);

  // A service discovery found while vramd runs: the front door routes its models from now on.
  void service_added(const ServiceConfig& svc);
  // A probe said how many requests `service` serves at once (llama.cpp's total_slots): where
  // the config sets no max_connections, the proxy's limit follows its HTTP threads.
  void heard_slots(const std::string& service, int slots);

  int front_door_port() const { return proxy_ ? proxy_->front_door_port() : 0; }
  int service_port(const std::string& s) const { return proxy_ ? proxy_->service_port(s) : 0; }
  std::string metrics_text() const { return proxy_ ? proxy_->metrics().render() : std::string(); }
  int in_flight(const std::string& service) const;
  nlohmann::json describe(const Config& config) const;  // /v1/status's request_path

  // ProxyHooks
  void request_started(const std::string& service) override;
  void request_ended(const std::string& service) override;
  bool is_ready(const std::string& service, const std::string& model) override;
  boost::asio::awaitable<WakeResult> ensure_ready(std::string service, std::string model,
                                                  WakeProgress progress) override;
  void abandon_wake(const std::string& service, const std::string& model) override;
  // The same list while no service's models changed (a walk that compares, allocating
  // nothing); another list when one did.
  ModelList models() override;

 private:
  void in_flight_changed(const std::string& service, int now_in_flight);

  boost::asio::io_context& io_;
  Hooks hooks_;
  std::unique_ptr<Proxy> proxy_;
  std::set<std::string> sized_by_slots_;  // services whose max_connections follows their slots
  ModelList models_;                        // the last list handed out
  std::map<std::string, int> in_flight_;   // requests through the proxy, per service
  std::set<std::string> in_flight_dirty_;  // counts not yet sent to the core
  bool flush_posted_ = false;
  bool stopping_ = false;
  struct Waiting {  // a held request's wake, until the core answers it
    std::string service, model;
    WakeProgress progress;
  };
  Waiters<WakeFinished, Waiting> wakes_{io_};
};

}  // namespace vramd
