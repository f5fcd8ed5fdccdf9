#include "cli/daemon_call.h"

#include <fmt/format.h>
#include <iostream>

#include "cli/commands.h"

namespace vramd {

using nlohmann::json;

std::string api_message(const json& body) {
  if (!body.is_object()) return "";
  if (auto e = body.find("error"); e != body.end()) {
    if (e->is_object()) {
      auto m = e->find("message");
      if (m != e->end() && m->is_string()) return m->get<std::string>();
    } else if (e->is_string()) {
      return e->get<std::string>();
    }
  }
  if (auto m = body.find("message"); m != body.end() && m->is_string())
    return m->get<std::string>();
  return "";
}

std::optional<DaemonClient> DaemonClient::from_options(const CommonOptions& opts) {
  auto config = load_cli_config(opts);
  if (!config) {
    std::cerr << config.error() << "\n";
    return std::nullopt;
  }
  return from_config(opts, *config);
}

DaemonClient DaemonClient::from_config(const CommonOptions& opts, const Config& config) {
  return DaemonClient(daemon_address(opts, config), client_token(config.daemon));
}

DaemonCall DaemonClient::request(const std::string& method, const std::string& target,
                                 const std::string& body, int timeout_ms) const {
  DaemonCall c;
  auto reply = http_request(addr_, method, target, body, timeout_ms, token_);
  if (!reply) {
    c.code = kExitUnreachable;
    c.error = fmt::format("the daemon is not reachable at {}: {}", addr_.url, reply.error());
    return c;
  }
  c.status = reply->status;
  c.body = json::parse(reply->body, nullptr, false);
  if (c.body.is_discarded()) {
    c.body = nullptr;
    c.code = kExitFailure;
    c.error =
        fmt::format("the daemon answered HTTP {} with a body that is not JSON", reply->status);
    return c;
  }
  if (reply->status / 100 == 2) {
    c.code = kExitOk;
    return c;
  }
  c.code = kExitFailure;
  c.error = api_message(c.body);
  if (c.error.empty())
    c.error = fmt::format("the daemon answered HTTP {}: {}", reply->status, reply->body);
  return c;
}

void print_call_error(const DaemonCall& c, std::string_view who) {
  if (c.ok()) return;
  // Transport and garbage are about the daemon, not the command: always "vramd: ...".
  bool api_error = c.reached() && !c.body.is_null();
  std::cerr << (api_error ? who : std::string_view("vramd")) << ": " << c.error << "\n";
}

std::optional<json> DaemonClient::call(const std::string& method, const std::string& target,
                                       int& code, const std::string& body, int timeout_ms,
                                       std::string_view who) const {
  DaemonCall c = request(method, target, body, timeout_ms);
  code = c.code;
  if (!c.ok()) {
    print_call_error(c, who);
    return std::nullopt;
  }
  return std::move(c.body);
}

}  // namespace vramd
