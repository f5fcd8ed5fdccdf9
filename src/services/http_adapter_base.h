// What the HTTP adapters share: calls bounded by the service's timeouts and its API key, and the
// probe conventions (docs/adapters.md "Errors"):
// - no answer at all (refused, timeout, reset) → reachable = false, error set;
// - an answer with an error status or a body of the wrong shape → reachable = true, error set,
//   busy left unknown (nullopt), so the core never takes it for idle.
#pragma once

#include <utility>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <chrono>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "services/adapter.h"
#include "services/http_client.h"

namespace vramd {

// A point in time by which a group of calls (one probe) must be done.
struct Deadline {
  std::chrono::steady_clock::time_point at;
  static Deadline after(Duration d) { return {std::chrono::steady_clock::now() + d}; }
  Duration left() const {
    auto d = std::chrono::duration_cast<Duration>(at - std::chrono::steady_clock::now());
    return d.count() > 0 ? d : Duration(0);
  }
};

class HttpAdapter : public Adapter {
 public:
  HttpAdapter(ServiceConfig config, boost::asio::any_io_executor executor, std::string api_key,
              Duration default_unload_timeout = std::chrono::seconds(20));
  std::string kind() const override { return config_.kind; }
  Duration unload_timeout() const override {
    return config_.unload_timeout.value_or(default_unload_timeout_);
  }

 protected:
  // One request to `path` (relative to the service URL, or absolute), done by `deadline`.
  boost::asio::awaitable<Result<HttpReply>> call(std::string_view method, std::string_view path,
                                                 std::string body, Deadline deadline);
  Deadline probe_deadline() const { return Deadline::after(config_.probe_timeout); }
  Deadline unload_deadline() const { return Deadline::after(unload_call_timeout()); }
  // How long one unload/wake request may take: the unload timeout, bounded to a minute.
  Duration unload_call_timeout() const;

  // GET `path` as JSON within `deadline`, recording into `probe` (see the header comment).
  // nullopt when there is no usable JSON.
  boost::asio::awaitable<std::optional<nlohmann::json>> probe_json(std::string_view path,
                                                                   Deadline deadline,
                                                                   ServiceProbe& probe);
  // GET `path` as JSON where the answer is extra (a version, a history): nullopt when it fails,
  // and nothing recorded as the probe's error.
  boost::asio::awaitable<std::optional<nlohmann::json>> optional_json(std::string_view path,
                                                                      Deadline deadline);
  // GET `path` as text (2xx only), recording into `probe` as probe_json does.
  boost::asio::awaitable<std::optional<std::string>> probe_text(std::string_view path,
                                                                Deadline deadline,
                                                                ServiceProbe& probe);
  // A request whose 2xx means "requested": the UnloadCall for it.
  boost::asio::awaitable<UnloadCall> request(std::string_view method, std::string_view path,
                                             std::string body = {});
  // One request per model (unload or reload several): requested when every answer is 2xx, or a
  // status in `also_ok` (speaches' 404 "not loaded"). The message lists each call.
  boost::asio::awaitable<UnloadCall> request_each(std::string_view method,
                                                  const std::vector<std::string>& models,
                                                  std::string (*path_for)(const std::string&),
                                                  std::string (*body_for)(const std::string&),
                                                  std::vector<unsigned> also_ok = {});
  // GET `path`; healthy on 2xx.
  boost::asio::awaitable<HealthCheck> health_get(std::string_view path);

  // "POST /free → 200", "POST /free → 404 Not Found", "POST /free: connect: Connection refused".
  static std::string describe(std::string_view method, std::string_view path,
                              const Result<HttpReply>& reply);
  static bool ok_status(unsigned status) { return status >= 200 && status < 300; }
  static void add_error(ServiceProbe& probe, const std::string& error);

  const ServiceConfig config_;
  boost::asio::any_io_executor executor_;

 private:
  std::string api_key_;  // never logged
  Duration default_unload_timeout_;
  HttpConnections connections_;  // its GETs (probes, health) reuse a kept-alive connection
};

// Percent-encodes a path segment (model names contain '/' and ':').
std::string url_encode(std::string_view s);

}  // namespace vramd
