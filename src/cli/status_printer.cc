#include "cli/status_printer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>

namespace vramd {

using nlohmann::json;

namespace {

std::string pids_text(const json& pids) {
  std::string s;
  size_t n = 0;
  for (const auto& p : pids) {
    if (n == 4) {
      s += fmt::format(" +{}", pids.size() - 4);
      break;
    }
    if (!s.empty()) s += ",";
    s += std::to_string(p.get<int>());
    ++n;
  }
  return s;
}

// Display width of UTF-8 text: "·" and "→" count as one column.
size_t display_width(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

std::string pad(const std::string& s, size_t width) {
  size_t w = display_width(s);
  return w >= width ? s : s + std::string(width - w, ' ');
}

std::string text_or(const json& obj, const char* key, const std::string& fallback) {
  auto it = obj.find(key);
  return it != obj.end() && it->is_string() ? it->get<std::string>() : fallback;
}

}  // namespace

std::string service_state_text(const json& s) {
  std::string probe = text_or(s, "state", "?");
  auto p = s.find("process");
  if (p == s.end() || !p->is_object()) return probe;
  std::string process = text_or(*p, "state", "?");
  // A stopped or failed process has no API to probe: its probe state says nothing new.
  if (process == "running" || probe == "up" || probe == "unloading") return probe + " · " + process;
  return process;
}

void print_services(std::ostream& out, const json& body, TimePoint now) {
  const json& services = body["services"];
  if (services.empty()) {
    out << "No services configured or discovered yet.\n";
    return;
  }
  size_t state_width = 5;
  for (const auto& s : services)
    state_width = std::max(state_width, display_width(service_state_text(s)));
  auto row = [&](const std::string& name, const std::string& kind, const std::string& state,
                 const std::string& busy, const std::string& holds, const std::string& idle,
                 const std::string& last, const std::string& models) {
    out << fmt::format("{:<16} {:<10} {} {:<6} {:>9} {:<10} {} {}\n", name, kind,
                       pad(state, state_width), busy, holds, idle, pad(last, 22), models);
  };
  row("SERVICE", "KIND", "STATE", "BUSY", "HOLDS", "IDLE", "LAST UNLOAD", "MODELS");
  for (const auto& s : services) {
    std::string busy = s["busy"].is_null() ? "?" : s["busy"].get<bool>() ? "yes" : "no";
    std::string idle = "-";
    if (s["idle_since"].is_string())
      if (auto t = parse_rfc3339(s["idle_since"].get<std::string>())) idle = format_age(now - *t);
    std::string last = "-";
    if (s["last_unload"].is_object()) {
      const auto& u = s["last_unload"];
      last = fmt::format("{} {}→{}", u["outcome"].get<std::string>(),
                         format_size(u["before_bytes"].get<Bytes>()),
                         format_size(u["after_bytes"].get<Bytes>()));
    }
    std::string models;
    for (const auto& m : s["models"]) models += (models.empty() ? "" : ", ") + m.get<std::string>();
    row(s["name"].get<std::string>(), s["kind"].get<std::string>(), service_state_text(s), busy,
        format_size(s["bytes"].get<Bytes>()), idle, last, models);
    // Why a process vramd runs is not running, or waits, matters more than the probe's error.
    const json& p = s.contains("process") ? s["process"] : json(nullptr);
    std::string process = p.is_object() ? text_or(p, "state", "") : "";
    std::string reason = p.is_object() ? text_or(p, "reason", "") : "";
    if (s.value("discovered", false))
      out << "    discovered by " << text_or(s, "discovered_by", "?")
          << (s.value("can_unload", false) ? "" : "; left alone until it is in the config") << "\n";
    if (s.contains("asleep") && s["asleep"].is_object()) {
      const json& a = s["asleep"];
      std::string since = "-";
      if (a["since"].is_string())
        if (auto t = parse_rfc3339(a["since"].get<std::string>())) since = format_age(now - *t);
      out << fmt::format("    asleep ({}) for {}: {} kept on the GPU", text_or(a, "label", "?"),
                         since, format_size(a.value("gpu_kept_bytes", Bytes(0))));
      if (a.value("host_ram_bytes", Bytes(0)) > 0)
        out << fmt::format(", {} of host RAM{}", format_size(a["host_ram_bytes"].get<Bytes>()),
                           a.value("host_ram_measured", false) ? "" : " (estimated)");
      out << "\n";
    }
    if (!reason.empty() && (process == "failed" || process == "backoff" || process == "queued"))
      out << "    " << process << ": " << reason << "\n";
    else if (s["probe_error"].is_string() && process != "stopped" && process != "starting")
      out << "    " << s["probe_error"].get<std::string>() << "\n";
  }
  // Host RAM that sleepers keep (core/sleep.h): it is theirs until they wake or are deepened.
  for (const auto& s : services)
    if (s.contains("asleep") && s["asleep"].is_object() &&
        s["asleep"].value("host_ram_bytes", Bytes(0)) > 0)
      out << fmt::format("Host RAM: {} asleep ({}): {} of host RAM\n", s["name"].get<std::string>(),
                         text_or(s["asleep"], "label", "?"),
                         format_size(s["asleep"]["host_ram_bytes"].get<Bytes>()));
}

std::string watch_frame(const std::string& header, const std::string& body, bool tty, bool first) {
  // Home, then clear: the new frame replaces the old one in place, without scrolling.
  std::string prefix = tty ? "\033[H\033[2J" : first ? "" : "\n";
  return prefix + header + "\n\n" + body;
}

namespace {

// One line on suspend (issue 28): offered, by which utility, or why not. Nothing from a daemon
// that does not say (older, or its probe not answered yet).
void print_suspend(std::ostream& out, const json& st) {
  if (!st.contains("suspend") || !st["suspend"].is_object()) return;
  const json& s = st["suspend"];
  if (!s.value("probed", false)) return;
  if (s.value("offered", false)) {
    std::string version = s["version"].is_string() ? " " + s["version"].get<std::string>() : "";
    out << fmt::format("\nSuspend offered: {}{} ({})\n", text_or(s, "tool", "cuda-checkpoint"),
                       version, text_or(s, "form", "action") == "toggle" ? "--toggle" : "--action");
    return;
  }
  std::string why = text_or(s, "why", "suspend is not offered");
  if (!why.empty()) why[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(why[0])));
  out << "\n" << why << "\n";
}

}  // namespace

void print_status(std::ostream& out, const json& st, TimePoint now) {
  if (!st.value("error", json(nullptr)).is_null())
    out << "GPU backend error: " << st["error"].get<std::string>() << "\n";
  if (st["gpus"].empty()) {
    out << "No GPUs found.\n";
    return;
  }
  bool first = true;
  for (const auto& g : st["gpus"]) {
    if (!first) out << "\n";
    first = false;
    Bytes total = g["total_bytes"].get<Bytes>();
    Bytes used = g["used_bytes"].get<Bytes>();
    std::string util = g["utilization_pct"].is_null()
                           ? ""
                           : fmt::format(", util {:.0f}%", g["utilization_pct"].get<double>());
    // Older daemons send no label: the index is the label.
    std::string label = g.contains("label") && g["label"].is_string()
                            ? g["label"].get<std::string>()
                            : std::to_string(g["index"].get<unsigned>());
    bool instance = g.contains("parent") && !g["parent"].is_null();
    bool mig_parent = g.value("mig_enabled", false);
    std::string indent = instance ? "  " : "";
    std::string what = g["name"].get<std::string>();
    if (instance) {
      std::string profile = g["mig_profile"].is_string() ? g["mig_profile"].get<std::string>() : "";
      what = "MIG " + (profile.empty() ? std::string("instance") : profile) + "  " +
             g["uuid"].get<std::string>();
    }
    out << fmt::format(
        "{}GPU {}  {}  {} used of {} ({:.0f}%), {} free{}{}\n", indent, label, what,
        format_size(used), format_size(total), total ? 100.0 * double(used) / double(total) : 0.0,
        format_size(total > used ? total - used : 0), util, mig_parent ? ", MIG on" : "");
    indent += "  ";
    if (g.contains("note") && g["note"].is_string())
      out << indent << "note: " << g["note"].get<std::string>() << "\n";
    if (g["health"] != "ok") {
      out << fmt::format("{}{}: {}\n", indent, g["health"].get<std::string>(),
                         g["error"].is_null() ? "" : g["error"].get<std::string>());
      continue;
    }
    if (mig_parent) {
      out << indent << "(MIG on: memory is held in its instances, listed below)\n";
      continue;
    }
    if (!g["per_process_available"].get<bool>())
      out << indent
          << "(the driver gives no per-process memory here: shares come from the card's "
             "totals)\n";
    out << fmt::format("{}{:<22} {:<9} {:>9} {:>6}  {:<9} {:<11} {}\n", indent, "OWNER", "KIND",
                       "SIZE", "SHARE", "SINCE", "SOURCE", "PIDS");
    for (const auto& h : g["holdings"]) {
      Bytes b = h["bytes"].get<Bytes>();
      std::string since = "-";
      if (auto t = parse_rfc3339(h["since"].get<std::string>()); t && h["owner_kind"] != "baseline")
        since = format_age(now - *t);
      out << fmt::format("{}{:<22} {:<9} {:>9} {:>5.0f}%  {:<9} {:<11} {}\n", indent,
                         h["owner"].get<std::string>(), h["owner_kind"].get<std::string>(),
                         format_size(b), total ? 100.0 * double(b) / double(total) : 0.0, since,
                         h["source"].get<std::string>(), pids_text(h["pids"]));
      if (!h["candidates"].empty()) {
        std::string c;
        for (const auto& cand : h["candidates"]) {
          if (!c.empty()) c += ", ";
          c += fmt::format("{} (pid {})", cand["name"].get<std::string>(), cand["pid"].get<int>());
        }
        out << indent << "  candidates: " << c << "\n";
      }
    }
  }
  print_suspend(out, st);
}

}  // namespace vramd
