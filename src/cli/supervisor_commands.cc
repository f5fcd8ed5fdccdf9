// `vramd start|stop|restart`, `vramd logs`, `vramd doctor`: the supervisor from the CLI.
#include <unistd.h>

#include <fmt/format.h>
#include <iostream>

#include <nlohmann/json.hpp>

#include "cli/commands.h"

namespace vramd {

using nlohmann::json;

namespace {

struct Reply {
  int code = kExitOk;
  unsigned status = 0;
  json body;
};

// One call to the daemon; prints why when it cannot reach it.
std::optional<Reply> api(const CommonOptions& opts, const std::string& method, const std::string& target,
                         int timeout_ms) {
  auto config = load_cli_config(opts);
  if (!config) {
    std::cerr << config.error() << "\n";
    return Reply{kExitFailure, 0, nullptr};
  }
  DaemonAddress addr = daemon_address(opts, *config);
  auto r = http_request(addr, method, target, "", timeout_ms, config->daemon.token);
  if (!r) {
    std::cerr << "vramd: the daemon is not reachable at " << addr.url << ": " << r.error() << "\n";
    return Reply{kExitUnreachable, 0, nullptr};
  }
  json body = json::parse(r->body, nullptr, false);
  if (body.is_discarded()) {
    std::cerr << "vramd: the daemon answered HTTP " << r->status << " with a body that is not JSON\n";
    return Reply{kExitFailure, r->status, nullptr};
  }
  return Reply{r->status / 100 == 2 ? kExitOk : kExitFailure, r->status, body};
}

std::string message_of(const json& body) {
  if (body.contains("error") && body["error"].is_object()) return body["error"].value("message", "");
  return body.value("message", "");
}

}  // namespace

int cmd_lifecycle(const CommonOptions& opts, const std::string& action, const std::string& service,
                  bool wait) {
  auto r = api(opts, "POST", fmt::format("/v1/services/{}/{}{}", service, action, wait ? "?wait=true" : ""),
               wait ? 16 * 60 * 1000 : 15000);
  if (!r->body.is_object()) return r->code;
  if (r->code != kExitOk) {
    std::cerr << "vramd " << action << ": " << message_of(r->body) << "\n";
    return r->code;
  }
  if (r->status == 202)
    std::cout << fmt::format("{}: {} under way (state: {}); vramd services or vramd events -f to follow\n",
                             service, action, r->body["state"].is_string() ? r->body["state"].get<std::string>() : "?");
  else
    std::cout << service << ": " << message_of(r->body) << "\n";
  return kExitOk;
}

int cmd_logs(const CommonOptions& opts, const std::string& service, bool follow, size_t lines) {
  auto r = api(opts, "GET", fmt::format("/v1/services/{}/logs?lines={}", service, lines), 10000);
  if (!r->body.is_object()) return r->code;
  if (r->code != kExitOk) {
    std::cerr << "vramd logs: " << message_of(r->body) << "\n";
    return r->code;
  }
  for (const auto& l : r->body["lines"]) std::cout << l.get<std::string>() << "\n";
  std::cout << std::flush;
  uint64_t offset = r->body.value("offset", uint64_t{0});
  while (follow) {
    usleep(500'000);
    auto next = api(opts, "GET", fmt::format("/v1/services/{}/logs?after={}", service, offset), 10000);
    if (!next->body.is_object() || next->code != kExitOk) return next->code == kExitOk ? kExitFailure : next->code;
    for (const auto& l : next->body["lines"]) std::cout << l.get<std::string>() << "\n";
    std::cout << std::flush;
    offset = next->body.value("offset", offset);
  }
  return kExitOk;
}

int cmd_doctor(const CommonOptions& opts, const std::string& service, bool as_json) {
  auto r = api(opts, "GET", service.empty() ? "/v1/doctor" : "/v1/doctor?service=" + service, 10000);
  if (!r->body.is_object()) return r->code;
  if (r->code != kExitOk) {
    std::cerr << "vramd doctor: " << message_of(r->body) << "\n";
    return r->code;
  }
  if (as_json) {
    std::cout << r->body.dump(2) << "\n";
    return kExitOk;
  }
  bool any = false;
  for (const auto& s : r->body["services"]) {
    std::string state = s.contains("state") ? fmt::format(" ({})", s["state"].get<std::string>()) : "";
    std::cout << s["service"].get<std::string>() << state;
    if (s.contains("reason") && s["reason"].is_string()) std::cout << ": " << s["reason"].get<std::string>();
    std::cout << "\n";
    if (s["crashes"].empty()) {
      std::cout << "  no crashes recorded\n";
      continue;
    }
    any = true;
    for (const auto& c : s["crashes"]) {
      std::cout << fmt::format("  {} x{}  [{}]  first {}, last {}\n", c["title"].get<std::string>(),
                               c["count"].get<int>(), c["signature"].get<std::string>(),
                               c["first_seen"].get<std::string>(), c["last_seen"].get<std::string>());
      if (!c["explanation"].get<std::string>().empty())
        std::cout << "    why: " << c["explanation"].get<std::string>() << "\n";
      if (!c["suggestion"].get<std::string>().empty())
        std::cout << "    fix: " << c["suggestion"].get<std::string>() << "\n";
      for (const auto& e : c["evidence"]) std::cout << "    | " << e.get<std::string>() << "\n";
    }
  }
  if (!any && r->body["services"].empty()) std::cout << "no services vramd runs, no crashes recorded\n";
  return kExitOk;
}

}  // namespace vramd
