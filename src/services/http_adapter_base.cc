#include "services/http_adapter_base.h"

#include "core/service_kinds.h"

#include <algorithm>

#include <boost/beast/http/status.hpp>

namespace vramd {

HttpAdapter::HttpAdapter(ServiceConfig config, boost::asio::any_io_executor executor,
                         std::string api_key, Duration default_unload_timeout)
    : config_(std::move(config)),
      executor_(std::move(executor)),
      api_key_(std::move(api_key)),
      default_unload_timeout_(default_unload_timeout) {}

Duration HttpAdapter::unload_call_timeout() const {
  return std::min<Duration>(unload_timeout(), std::chrono::minutes(1));
}

boost::asio::awaitable<Result<HttpReply>> HttpAdapter::call(std::string_view method,
                                                            std::string_view path, std::string body,
                                                            Deadline deadline) {
  Duration left = deadline.left();
  if (left.count() <= 0) co_return make_error("timed out before the request was sent");
  HttpOptions options;
  options.total_timeout = left;
  options.connect_timeout = std::min(config_.connect_timeout, left);
  options.bearer_token = api_key_;
  // A server that serves a fixed number of connections, one thread each for the connection's
  // life, idle time included (llama-server), is asked on a connection closed after the call: a
  // kept one would hold one of its threads between probes, beside the proxy's (docs/proxy.md).
  const ServiceKind* kind = find_service_kind(config_.kind);
  if (!kind || !kind->fixed_http_threads) options.connections = &connections_;
  co_return co_await http_call(executor_, method, resolve_url(config_.url, path), std::move(body),
                               std::move(options));
}

std::string HttpAdapter::describe(std::string_view method, std::string_view path,
                                  const Result<HttpReply>& reply) {
  std::string out = std::string(method) + " " + std::string(path);
  if (!reply) return out + ": " + reply.error();
  out += " → " + std::to_string(reply->status);
  if (!ok_status(reply->status)) {
    std::string_view reason =
        boost::beast::http::obsolete_reason(boost::beast::http::int_to_status(reply->status));
    if (!reason.empty() && reason != "<unknown-status>") out += " " + std::string(reason);
  }
  return out;
}

void HttpAdapter::add_error(ServiceProbe& probe, const std::string& error) {
  if (!probe.error.empty()) probe.error += "; ";
  probe.error += error;
}

boost::asio::awaitable<std::optional<std::string>> HttpAdapter::probe_text(std::string_view path,
                                                                           Deadline deadline,
                                                                           ServiceProbe& probe) {
  Result<HttpReply> r = co_await call("GET", path, {}, deadline);
  if (!r) {
    add_error(probe, describe("GET", path, r));
    co_return std::nullopt;
  }
  probe.reachable = true;
  if (!ok_status(r->status)) {
    add_error(probe, describe("GET", path, r));
    co_return std::nullopt;
  }
  co_return std::move(r->body);
}

boost::asio::awaitable<std::optional<nlohmann::json>> HttpAdapter::probe_json(std::string_view path,
                                                                              Deadline deadline,
                                                                              ServiceProbe& probe) {
  std::optional<std::string> body = co_await probe_text(path, deadline, probe);
  if (!body) co_return std::nullopt;
  nlohmann::json j = nlohmann::json::parse(*body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    add_error(probe, "GET " + std::string(path) + ": the answer is not JSON");
    co_return std::nullopt;
  }
  co_return j;
}

boost::asio::awaitable<std::optional<nlohmann::json>> HttpAdapter::optional_json(
    std::string_view path, Deadline deadline) {
  Result<HttpReply> r = co_await call("GET", path, {}, deadline);
  if (!r || !ok_status(r->status)) co_return std::nullopt;
  nlohmann::json j = nlohmann::json::parse(r->body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) co_return std::nullopt;
  co_return j;
}

boost::asio::awaitable<UnloadCall> HttpAdapter::request(std::string_view method,
                                                        std::string_view path, std::string body) {
  Result<HttpReply> r = co_await call(method, path, std::move(body), unload_deadline());
  UnloadCall out;
  out.result =
      r && ok_status(r->status) ? UnloadCall::Result::requested : UnloadCall::Result::failed;
  out.message = describe(method, path, r);
  co_return out;
}

boost::asio::awaitable<UnloadCall> HttpAdapter::request_each(
    std::string_view method, const std::vector<std::string>& models,
    std::string (*path_for)(const std::string&), std::string (*body_for)(const std::string&),
    std::vector<unsigned> also_ok) {
  UnloadCall out;
  if (models.empty()) {
    out.result = UnloadCall::Result::requested;
    out.message = "no model loaded: nothing to call";
    co_return out;
  }
  Deadline deadline = unload_deadline();
  bool all_ok = true;
  for (const std::string& m : models) {
    std::string path = path_for(m);
    Result<HttpReply> r = co_await call(method, path, body_for(m), deadline);
    bool ok = r && (ok_status(r->status) ||
                    std::find(also_ok.begin(), also_ok.end(), r->status) != also_ok.end());
    all_ok = all_ok && ok;
    if (!out.message.empty()) out.message += "; ";
    out.message += describe(method, path, r);
    if (r && !ok_status(r->status) && ok) out.message += " (not loaded)";
  }
  out.result = all_ok ? UnloadCall::Result::requested : UnloadCall::Result::failed;
  co_return out;
}

boost::asio::awaitable<HealthCheck> HttpAdapter::health_get(std::string_view path) {
  Result<HttpReply> r = co_await call("GET", path, {}, probe_deadline());
  HealthCheck out;
  out.healthy = r && ok_status(r->status);
  out.message = describe("GET", path, r);
  co_return out;
}

std::string url_encode(std::string_view s) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (char c : s) {
    unsigned char u = static_cast<unsigned char>(c);
    if (std::isalnum(u) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += c;
    } else {
      out += '%';
      out += hex[u >> 4];
      out += hex[u & 15];
    }
  }
  return out;
}

}  // namespace vramd
