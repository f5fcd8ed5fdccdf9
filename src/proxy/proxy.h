// The request path (docs/proxy.md): per-service reverse proxies and the OpenAI-compatible front
// door. It streams bytes between clients and services and tells vramd only that requests start
// and end, and that a service must wake (ProxyHooks).
#pragma once

#include <utility>

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstddef>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/result.h"
#include "core/units.h"
#include "proxy/hooks.h"
#include "proxy/proxy_metrics.h"
#include "proxy/request_log.h"

namespace vramd {

struct ProxyServiceOptions {
  std::string name;
  std::string url;                  // the service's base URL, "http://127.0.0.1:8188"
  std::string listen;               // its own proxy, "127.0.0.1:8189"; empty: front door only
  std::string api_key;              // sent upstream as "Authorization: Bearer"
  std::vector<std::string> models;  // configured model names (the probe adds more)
  bool ollama_api = false;          // it serves Ollama's own API (/api/chat, /api/tags)
  Duration connect_timeout = std::chrono::seconds(2);
  Duration first_byte_timeout = std::chrono::minutes(5);  // also the longest gap in a body
  Duration wake_timeout = std::chrono::minutes(2);
  int max_concurrent = 0;  // 0: no limit
  int max_queue = 0;       // requests waiting for a slot before 429
  // Connections to the service at most, idle kept-alive ones included (0: no limit): a server
  // that serves a fixed number at once (llama-server) makes a connection beyond them wait
  // unserved, so requests wait for a connection in vramd instead (docs/proxy.md).
  int max_connections = 0;
  // The service's own keep-alive timeout (0: none): idle connections are dropped before it.
  Duration keep_alive_timeout = std::chrono::seconds(5);
};

struct ProxyOptions {
  std::string listen;                          // the front door; empty: none
  std::vector<std::string> api_keys;           // empty: no keys (then loopback only)
  std::map<std::string, std::string> aliases;  // other name -> a served model
  Duration websocket_idle = std::chrono::seconds(10);
  Duration heartbeat = std::chrono::seconds(5);  // SSE comments while a stream is held
  std::size_t max_body =
      std::size_t{64} * 1024 * 1024;  // front door: a body is read whole to find its model
  std::vector<ProxyServiceOptions> services;
  // host:port pairs a service URL may not name (vramd's own API).
  std::vector<std::string> forbidden_upstreams;
  // Where each request's times go (docs/history.md); null: not recorded. Outlives the proxy.
  RequestLog* request_log = nullptr;
};

class Proxy {
 public:
  Proxy(boost::asio::io_context& io, ProxyOptions options, ProxyHooks& hooks);
  ~Proxy();
  Proxy(const Proxy&) = delete;
  Proxy& operator=(const Proxy&) = delete;

  // Opens the front door and every service's proxy. Error (nothing left open) when an address is
  // beyond loopback without api_keys, cannot be bound, or a service URL names vramd's own API.
  Status start();
  void close();

  // The bound ports (useful with port 0): the front door's, and a service proxy's (0 if none).
  int front_door_port() const;
  int service_port(const std::string& service) const;

  // A service found while vramd runs (discovery): the front door routes its models from now on.
  // Error when its URL is one the proxy never forwards to (start()'s checks); nothing changes.
  Status add_service(ProxyServiceOptions service);
  // A service's max_connections from now on (0: no limit); more room lets waiting requests on.
  void set_max_connections(const std::string& service, int max_connections);

  const ProxyMetrics& metrics() const;
  // The models the front door routes, for the dashboard and `vramd status`.
  std::vector<ModelEntry> models() const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

// Reads `[proxy] api_keys_file`: one key a line; blank lines and `#` comments skipped. Error when
// it cannot be read or holds no key (a key file that grants nothing is a mistake).
Result<std::vector<std::string>> read_api_keys_file(const std::string& path);

// Checks a proxy listen address: loopback, or beyond it only with keys. Used by the config too.
Status check_proxy_listen(const std::string& where, const std::string& host_port, bool have_keys);

}  // namespace vramd
