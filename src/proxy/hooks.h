// The narrow interface between the proxy and the rest of vramd: request start and end (activity),
// a wake request, and a snapshot of the models each service serves. Bytes of proxied traffic
// never cross it. All calls happen on the proxy's executor.
#pragma once

// GCC 12 needs <utility> before Boost's awaitable.hpp.
#include <utility>

#include <boost/asio/awaitable.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace vramd {

// Whether a service may take the request now.
struct WakeResult {
  bool ok = true;
  // Why not (503): "needs 12.0 GiB, comfyui holds 16.0 GiB and is busy".
  std::string reason;
  // Who holds the GPU memory in the way, when known ("comfyui").
  std::string holder;
  std::chrono::seconds retry_after{10};

  static WakeResult ready() { return {}; }
  static WakeResult refused(std::string reason, std::string holder = {}) {
    return WakeResult{false, std::move(reason), std::move(holder)};
  }
};

// One model name a service answers to (from its probe, or from `models` in its config).
struct ModelEntry {
  std::string model;
  std::string service;
  // Its service serves Ollama's own API (/api/chat, /api/generate, /api/tags): only such
  // entries are listed by GET /api/tags and routed from Ollama's paths.
  bool ollama_api = false;
};

// Every model the services serve, as one list that does not change: while the services' models
// stay the same the hooks hand out the same list (the same pointer), and the proxy keeps the route
// table it built from it; another pointer means another table.
using ModelList = std::shared_ptr<const std::vector<ModelEntry>>;

// Called with a line saying why a held request still waits ("needs 12.0 GiB, comfyui holds
// 16.0 GiB, unloading"); a held streaming request receives it as an SSE comment.
using WakeProgress = std::function<void(std::string)>;

class ProxyHooks {
 public:
  virtual ~ProxyHooks() = default;
  // A request for `service` began / ended: while any is in flight the service is busy (never
  // unloaded, never evicted); the end of the last one makes it idle.
  virtual void request_started(const std::string& service) = 0;
  virtual void request_ended(const std::string& service) = 0;
  // True when `service` can take a request for `model` now, without a wake (the fast path).
  virtual bool is_ready(const std::string& service, const std::string& model) = 0;
  // Makes `service` ready for `model` (wake, load, start, after admission by the budget).
  // Returns when it is, or with the reason it cannot be. The proxy applies wake_timeout itself.
  virtual boost::asio::awaitable<WakeResult> ensure_ready(std::string service, std::string model,
                                                          WakeProgress progress) = 0;
  // Every held request waiting on the wake of `service` for `model` went away (client gone,
  // wake_timeout passed): the wake is not needed any more.
  virtual void abandon_wake(const std::string& service, const std::string& model) = 0;
  // Every model every service serves, now (ModelList: the same pointer while nothing changed).
  virtual ModelList models() = 0;
};

// Hooks for a proxy without a daemon: everything is ready, no activity is recorded, the models
// are the configured ones only.
class NullProxyHooks : public ProxyHooks {
 public:
  void request_started(const std::string&) override {}
  void request_ended(const std::string&) override {}
  bool is_ready(const std::string&, const std::string&) override { return true; }
  boost::asio::awaitable<WakeResult> ensure_ready(std::string, std::string, WakeProgress) override {
    co_return WakeResult::ready();
  }
  void abandon_wake(const std::string&, const std::string&) override {}
  ModelList models() override {
    static const ModelList kNone = std::make_shared<const std::vector<ModelEntry>>();
    return kNone;
  }
};

}  // namespace vramd
