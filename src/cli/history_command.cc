// vramd history SERVICE: the durations history (docs/history.md): recent prompts and requests,
// or their medians compared by version or argument set.
#include <cctype>
#include <iostream>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/daemon_call.h"

namespace vramd {

using nlohmann::json;

namespace {

std::string query_escape(const std::string& s) {
  std::string out;
  for (unsigned char c : s)
    out += std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~'
               ? std::string(1, static_cast<char>(c))
               : fmt::format("%{:02X}", c);
  return out;
}

std::string str(const json& v, const std::string& none = "-") {
  return v.is_string() ? v.get<std::string>() : none;
}

std::string secs(const json& v) {
  if (!v.is_number()) return "-";
  double s = v.get<double>();
  return s < 10 ? fmt::format("{:.2f}s", s) : fmt::format("{:.1f}s", s);
}

// "2026-12-03T20:01:02.123Z" → "2026-12-03 20:01:02"
std::string when(const json& v) {
  std::string s = str(v);
  if (s.size() >= 19) {
    s = s.substr(0, 19);
    s[10] = ' ';
  }
  return s;
}

}  // namespace

int cmd_history(const CommonOptions& opts, const HistoryOptions& h, bool as_json) {
  if (h.service.empty()) {
    std::cerr << "vramd history: name a service: vramd history SERVICE [--by version|args]\n";
    return kExitUsage;
  }
  if (!h.by.empty() && h.by != "version" && h.by != "args") {
    std::cerr << fmt::format("vramd history: --by: expected version or args, got '{}'\n", h.by);
    return kExitUsage;
  }
  auto client = DaemonClient::from_options(opts);
  if (!client) return kExitFailure;
  std::string target = fmt::format("{}?service={}", h.by.empty() ? "/v1/history/records" : "/v1/history/durations",
                                   query_escape(h.service));
  if (!h.by.empty()) target += "&by=" + h.by;
  if (!h.workflow.empty()) target += "&workflow=" + query_escape(h.workflow);
  if (!h.model.empty()) target += "&model=" + query_escape(h.model);
  if (!h.since.empty()) target += "&since=" + query_escape(h.since);
  if (h.by.empty()) target += fmt::format("&limit={}", h.limit);
  int code = kExitOk;
  auto body = client->call("GET", target, code, "", 30000, "vramd history");
  if (!body) return code;
  if (as_json) {
    std::cout << body->dump(2) << "\n";
    return kExitOk;
  }
  const json& b = *body;
  // Each argument set's name: what changed from the one before it ("+--disable-async-offload"),
  // else its fingerprint.
  std::map<std::string, std::string> arg_labels;
  std::string previous_fp;
  for (const auto& v : b["variants"]) {
    std::string fp = str(v["args_fingerprint"], "");
    if (fp.empty() || fp == previous_fp || arg_labels.count(fp)) continue;
    std::string label;
    if (!previous_fp.empty())
      for (const auto& d : v["args_diff"]) label += (label.empty() ? "" : " ") + d.get<std::string>();
    arg_labels[fp] = label.empty() ? "args " + fp : label;
    previous_fp = fp;
  }
  if (h.by.empty()) {
    if (b["records"].empty()) {
      std::cout << fmt::format("no prompts or requests recorded for {}\n", h.service);
      return kExitOk;
    }
    std::cout << fmt::format("{:<19}  {:<7} {:<36} {:<10} {:>8} {:>7} {:>7}  {}\n", "ENDED", "KIND",
                             "WORKFLOW / MODEL", "VERSION", "SECONDS", "WAIT", "TOK/S", "OUTCOME");
    for (const auto& r : b["records"]) {
      std::string subject = str(r["model"], "");
      if (r["workflow"].is_string())
        subject = fmt::format("{}{}{}", r["workflow"].get<std::string>().substr(0, 8),
                              subject.empty() ? "" : " ", subject);
      if (subject.size() > 36) subject = subject.substr(0, 35) + "…";
      std::string outcome = r["outcome"].is_string() ? r["outcome"].get<std::string>()
                            : r["status"].is_number() ? std::to_string(r["status"].get<int>())
                                                      : "-";
      std::string tps = r["tokens_per_second"].is_number()
                            ? fmt::format("{:.1f}", r["tokens_per_second"].get<double>())
                            : "-";
      std::cout << fmt::format("{:<19}  {:<7} {:<36} {:<10} {:>8} {:>7} {:>7}  {}\n", when(r["at"]),
                               str(r["kind"]), subject.empty() ? "-" : subject, str(r["version"]),
                               secs(r["seconds"]), secs(r["wait_seconds"]), tps, outcome);
    }
    return kExitOk;
  }
  std::cout << fmt::format("{} by {} ({} records)\n", h.service, h.by, b["records"].get<size_t>());
  if (b["groups"].empty()) {
    std::cout << "  nothing recorded yet\n";
    return kExitOk;
  }
  std::cout << fmt::format("{:<36} {:<40} {:>5} {:>8} {:>8} {:>8}\n", "WORKFLOW / MODEL",
                           h.by == "version" ? "VERSION" : "ARGUMENTS", "N", "P50", "P95", "CHANGE");
  std::string last_subject;
  for (const auto& g : b["groups"]) {
    std::string subject = g["subject"].get<std::string>();
    std::string shown;
    if (subject != last_subject) {
      shown = subject;
      if (g["kind"] == "prompt" && g["model"].is_string()) shown = subject.substr(0, 16) + " " + g["model"].get<std::string>();
      if (shown.size() > 36) shown = shown.substr(0, 35) + "…";
      last_subject = subject;
    }
    std::string variant = str(g["variant"], "unknown");
    if (h.by == "args" && arg_labels.count(variant)) variant = arg_labels[variant];
    // The end says most: "--port 8188 → --port 8189 +--disable-async-offload".
    if (variant.size() > 40) {
      size_t from = variant.size() - 39;
      while (from < variant.size() && (static_cast<unsigned char>(variant[from]) & 0xC0) == 0x80) ++from;
      variant = "…" + variant.substr(from);
    }
    std::string change = g["change_pct"].is_number()
                             ? fmt::format("{:+.1f}%", g["change_pct"].get<double>())
                             : "";
    std::string n = std::to_string(g["count"].get<size_t>());
    if (g["failed"].get<size_t>() > 0) n += fmt::format("+{}✗", g["failed"].get<size_t>());
    std::cout << fmt::format("{:<36} {:<40} {:>5} {:>8} {:>8} {:>8}\n", shown, variant, n,
                             secs(g["p50_seconds"]), secs(g["p95_seconds"]), change);
  }
  return kExitOk;
}

}  // namespace vramd
