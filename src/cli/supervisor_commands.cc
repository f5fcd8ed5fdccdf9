// `vramd start|stop|restart`, `vramd logs`, `vramd doctor`: the supervisor from the CLI.
#include <unistd.h>

#include <fmt/format.h>
#include <iostream>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/daemon_call.h"

namespace vramd {

using nlohmann::json;

int cmd_lifecycle(const CommonOptions& opts, const std::string& action, const std::string& service,
                  bool wait, bool force) {
  auto client = DaemonClient::from_options(opts);
  if (!client) return kExitFailure;
  std::string query;
  if (wait) query += "wait=true";
  if (force) query += std::string(query.empty() ? "" : "&") + "force=true";
  DaemonCall r = client->request(
      "POST",
      fmt::format("/v1/services/{}/{}{}{}", service, action, query.empty() ? "" : "?", query), "",
      wait ? 16 * 60 * 1000 : 15000);
  if (!r.ok()) {
    print_call_error(r, "vramd " + action);
    return r.code;
  }
  if (r.status == 202) {
    std::string state =
        r.body.value("state", json(nullptr)).is_string() ? r.body["state"].get<std::string>() : "?";
    std::cout << fmt::format(
        "{}: {} under way (state: {}); vramd services or vramd events -f to follow\n", service,
        action, state);
    // A start waits for GPU room like a lease does; say why and how not to wait.
    if (state == "queued" && !force)
      std::cout << fmt::format(
          "  {}vramd start {} --force starts it without waiting for GPU room\n",
          api_message(r.body).empty() ? "" : api_message(r.body) + "; ", service);
  } else {
    std::cout << service << ": " << api_message(r.body) << "\n";
  }
  return kExitOk;
}

int cmd_logs(const CommonOptions& opts, const std::string& service, bool follow, size_t lines) {
  auto client = DaemonClient::from_options(opts);
  if (!client) return kExitFailure;
  int code = kExitOk;
  auto body = client->call("GET", fmt::format("/v1/services/{}/logs?lines={}", service, lines),
                           code, "", 10000, "vramd logs");
  if (!body) return code;
  for (const auto& l : (*body)["lines"]) std::cout << l.get<std::string>() << "\n";
  std::cout << std::flush;
  uint64_t offset = body->value("offset", uint64_t{0});
  while (follow) {
    usleep(500'000);
    auto next = client->call("GET", fmt::format("/v1/services/{}/logs?after={}", service, offset),
                             code, "", 10000, "vramd logs");
    if (!next) return code;
    for (const auto& l : (*next)["lines"]) std::cout << l.get<std::string>() << "\n";
    std::cout << std::flush;
    offset = next->value("offset", offset);
  }
  return kExitOk;
}

int cmd_doctor(const CommonOptions& opts, const std::string& service, bool as_json) {
  auto client = DaemonClient::from_options(opts);
  if (!client) return kExitFailure;
  int code = kExitOk;
  auto body = client->call("GET", service.empty() ? "/v1/doctor" : "/v1/doctor?service=" + service,
                           code, "", 10000, "vramd doctor");
  if (!body) return code;
  if (as_json) {
    std::cout << body->dump(2) << "\n";
    return kExitOk;
  }
  bool any = false;
  for (const auto& s : (*body)["services"]) {
    std::string state =
        s.contains("state") ? fmt::format(" ({})", s["state"].get<std::string>()) : "";
    std::cout << s["service"].get<std::string>() << state;
    if (s.contains("reason") && s["reason"].is_string())
      std::cout << ": " << s["reason"].get<std::string>();
    std::cout << "\n";
    if (s["crashes"].empty()) {
      std::cout << "  no crashes recorded\n";
      continue;
    }
    any = true;
    for (const auto& c : s["crashes"]) {
      std::cout << fmt::format("  {} x{}  [{}]  first {}, last {}\n", c["title"].get<std::string>(),
                               c["count"].get<int>(), c["signature"].get<std::string>(),
                               c["first_seen"].get<std::string>(),
                               c["last_seen"].get<std::string>());
      if (!c["explanation"].get<std::string>().empty())
        std::cout << "    why: " << c["explanation"].get<std::string>() << "\n";
      if (!c["suggestion"].get<std::string>().empty()) {
        std::string applied;
        if (c.contains("applied") && c["applied"].is_object())
          applied = c["applied"]["since"].is_string()
                        ? fmt::format("  (applied since {})", c["applied"]["since"].get<std::string>())
                        : std::string("  (applied)");
        std::cout << "    fix: " << c["suggestion"].get<std::string>() << applied << "\n";
      }
      // Split by the versions and argument sets it ran (docs/history.md).
      if (c.contains("summary") && c["summary"].is_string())
        std::cout << "    by variant: " << c["summary"].get<std::string>() << "\n";
      for (const auto& e : c["evidence"]) std::cout << "    | " << e.get<std::string>() << "\n";
    }
  }
  if (!any && (*body)["services"].empty())
    std::cout << "no services vramd runs, no crashes recorded\n";
  return kExitOk;
}

}  // namespace vramd
