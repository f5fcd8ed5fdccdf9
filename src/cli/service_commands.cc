// `vramd services`, `vramd free`, `vramd events`: clients of the daemon's API.
#include <unistd.h>

#include <fmt/format.h>
#include <iostream>
#include <thread>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "daemon/sampler.h"

namespace vramd {

using nlohmann::json;

namespace {

// GET/POST to the daemon; prints why when it cannot, and returns the exit code in `code`.
std::optional<json> call(const CommonOptions& opts, const std::string& method,
                         const std::string& target, int& code, int timeout_ms = 10000) {
  auto config = load_cli_config(opts);
  if (!config) {
    std::cerr << config.error() << "\n";
    code = kExitFailure;
    return std::nullopt;
  }
  DaemonAddress addr = daemon_address(opts, *config);
  auto reply = http_request(addr, method, target, "", timeout_ms, config->daemon.token);
  if (!reply) {
    std::cerr << "vramd: the daemon is not reachable at " << addr.url << ": " << reply.error() << "\n";
    code = kExitUnreachable;
    return std::nullopt;
  }
  json body = json::parse(reply->body, nullptr, false);
  if (body.is_discarded()) {
    std::cerr << "vramd: the daemon answered HTTP " << reply->status << " with a body that is not JSON\n";
    code = kExitFailure;
    return std::nullopt;
  }
  code = reply->status / 100 == 2 ? kExitOk : kExitFailure;
  if (code != kExitOk && body.contains("error") && !body.contains("outcome")) {
    std::cerr << "vramd: " << body["error"].value("message", reply->body) << "\n";
    return std::nullopt;
  }
  return body;
}


void print_verdict(const json& v) {
  std::string esc = v["escalation"].is_null() ? "" : fmt::format(" (escalation: {})", v["escalation"].get<std::string>());
  std::cout << fmt::format("{}: {}{}\n", v["service"].get<std::string>(), v["message"].get<std::string>(), esc);
}

}  // namespace

int cmd_services(const CommonOptions& opts, bool as_json) {
  int code = 0;
  auto body = call(opts, "GET", "/v1/services", code);
  if (!body) return code;
  if (as_json) {
    std::cout << body->dump(2) << "\n";
    return code;
  }
  TimePoint now = system_now();
  std::cout << fmt::format("{:<16} {:<10} {:<12} {:<6} {:>9} {:<10} {:<22} {}\n", "SERVICE", "KIND",
                           "STATE", "BUSY", "HOLDS", "IDLE", "LAST UNLOAD", "MODELS");
  for (const auto& s : (*body)["services"]) {
    std::string busy = s["busy"].is_null() ? "?" : s["busy"].get<bool>() ? "yes" : "no";
    std::string idle = "-";
    if (!s["idle_since"].is_null())
      if (auto t = parse_rfc3339(s["idle_since"].get<std::string>())) idle = format_age(now - *t);
    std::string last = "-";
    if (!s["last_unload"].is_null()) {
      const auto& u = s["last_unload"];
      last = fmt::format("{} {}→{}", u["outcome"].get<std::string>(), format_size(u["before_bytes"].get<Bytes>()),
                         format_size(u["after_bytes"].get<Bytes>()));
    }
    std::string models;
    for (const auto& m : s["models"]) models += (models.empty() ? "" : ", ") + m.get<std::string>();
    std::cout << fmt::format("{:<16} {:<10} {:<12} {:<6} {:>9} {:<10} {:<22} {}\n",
                             s["name"].get<std::string>(), s["kind"].get<std::string>(),
                             s["state"].get<std::string>(), busy, format_size(s["bytes"].get<Bytes>()),
                             idle, last, models);
    if (!s["probe_error"].is_null())
      std::cout << "    " << s["probe_error"].get<std::string>() << "\n";
  }
  return code;
}

int cmd_free(const CommonOptions& opts, const std::string& service, bool idle, bool force,
             bool as_json) {
  if (service.empty() == !idle) {
    std::cerr << "vramd free: name one service, or use --idle for every idle one\n";
    return kExitUsage;
  }
  int code = 0;
  std::string target = idle ? "/v1/free?idle=true"
                            : fmt::format("/v1/services/{}/unload{}", service, force ? "?force=true" : "");
  // A verdict can take the unload timeout (30 s for ComfyUI) plus the call.
  auto body = call(opts, "POST", target, code, 6 * 60 * 1000);
  if (!body) return code;
  if (as_json) {
    std::cout << body->dump(2) << "\n";
    return code;
  }
  if (idle) {
    if ((*body)["unloads"].empty()) std::cout << "No idle service holds GPU memory.\n";
    for (const auto& v : (*body)["unloads"]) print_verdict(v);
    return code;
  }
  print_verdict(*body);
  if (body->contains("error")) return kExitFailure;
  return (*body)["outcome"] == "freed" ? kExitOk : kExitFailure;
}

int cmd_events(const CommonOptions& opts, bool follow, const std::string& since, bool as_json) {
  int code = 0;
  std::string target = "/v1/events";
  if (!since.empty()) {
    auto d = parse_duration(since);
    std::string t = d ? format_rfc3339(system_now() - *d) : since;
    target += "?since=" + t;
  }
  int64_t last_id = 0;
  auto print = [&](const json& events) {
    for (const auto& e : events) {
      last_id = std::max<int64_t>(last_id, e.value("id", int64_t{0}));
      if (as_json) {
        std::cout << e.dump() << "\n";
      } else {
        std::string at = e["at"].get<std::string>();
        std::cout << fmt::format("{}  {:<20} {}\n", at.substr(0, 19), e["type"].get<std::string>(),
                                 e["message"].get<std::string>());
      }
    }
    std::cout << std::flush;
  };
  auto body = call(opts, "GET", target, code);
  if (!body) return code;
  print((*body)["events"]);
  // Follow by polling after the last id: simple, and it survives daemon restarts.
  while (follow) {
    std::this_thread::sleep_for(std::chrono::seconds(1));
    body = call(opts, "GET", fmt::format("/v1/events?after={}", last_id), code);
    if (!body) {
      if (code != kExitUnreachable) return code;
      continue;  // daemon restarting: keep trying
    }
    print((*body)["events"]);
  }
  return code;
}

}  // namespace vramd
