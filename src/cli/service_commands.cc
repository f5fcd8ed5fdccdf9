// `vramd services`, `vramd free`, `vramd events`: clients of the daemon's API.
#include <unistd.h>

#include <fmt/format.h>
#include <iostream>
#include <thread>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/daemon_call.h"
#include "cli/status_printer.h"
#include "daemon/sampler.h"

namespace vramd {

using nlohmann::json;

namespace {

void print_verdict(const json& v) {
  std::string esc = v["escalation"].is_null()
                        ? ""
                        : fmt::format(" (escalation: {})", v["escalation"].get<std::string>());
  std::cout << fmt::format("{}: {}{}\n", v["service"].get<std::string>(),
                           v["message"].get<std::string>(), esc);
}

}  // namespace

int cmd_services(const CommonOptions& opts, bool as_json) {
  auto client = DaemonClient::from_options(opts);
  if (!client) return kExitFailure;
  int code = 0;
  auto body = client->call("GET", "/v1/services", code);
  if (!body) return code;
  if (as_json) {
    std::cout << body->dump(2) << "\n";
    return code;
  }
  print_services(std::cout, *body, system_now());
  return code;
}

int cmd_free(const CommonOptions& opts, const std::string& service, bool idle, bool force,
             bool as_json) {
  if (service.empty() == !idle) {
    std::cerr << "vramd free: name one service, or use --idle for every idle one\n";
    return kExitUsage;
  }
  auto client = DaemonClient::from_options(opts);
  if (!client) return kExitFailure;
  std::string target =
      idle ? "/v1/free?idle=true"
           : fmt::format("/v1/services/{}/unload{}", service, force ? "?force=true" : "");
  // A verdict can take the unload timeout (30 s for ComfyUI) plus the call.
  DaemonCall c = client->request("POST", target, "", 6 * 60 * 1000);
  // A refused unload (409) still carries its verdict: print that rather than the bare error.
  bool verdict = c.body.is_object() && c.body.contains("outcome");
  if (!c.ok() && !verdict) {
    print_call_error(c);
    return c.code;
  }
  int code = c.code;
  json* body = &c.body;
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
  auto client = DaemonClient::from_options(opts);
  if (!client) return kExitFailure;
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
  auto body = client->call("GET", target, code);
  if (!body) return code;
  print((*body)["events"]);
  // Follow by polling after the last id: simple, and it survives daemon restarts.
  while (follow) {
    std::this_thread::sleep_for(std::chrono::seconds(1));
    body = client->call("GET", fmt::format("/v1/events?after={}", last_id), code);
    if (!body) {
      if (code != kExitUnreachable) return code;
      continue;  // daemon restarting: keep trying
    }
    print((*body)["events"]);
  }
  return code;
}

}  // namespace vramd
