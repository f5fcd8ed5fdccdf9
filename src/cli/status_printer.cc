#include "cli/status_printer.h"

#include <fmt/format.h>

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
    out << fmt::format("GPU {}  {}  {} used of {} ({:.0f}%), {} free{}\n", g["index"].get<int>(),
                       g["name"].get<std::string>(), format_size(used), format_size(total),
                       total ? 100.0 * double(used) / double(total) : 0.0,
                       format_size(total > used ? total - used : 0), util);
    if (g["health"] != "ok") {
      out << fmt::format("  {}: {}\n", g["health"].get<std::string>(),
                         g["error"].is_null() ? "" : g["error"].get<std::string>());
      continue;
    }
    if (!g["per_process_available"].get<bool>())
      out << "  (the driver gives no per-process memory here: shares come from the card's totals)\n";
    out << fmt::format("  {:<22} {:<9} {:>9} {:>6}  {:<9} {:<11} {}\n", "OWNER", "KIND", "SIZE",
                       "SHARE", "SINCE", "SOURCE", "PIDS");
    for (const auto& h : g["holdings"]) {
      Bytes b = h["bytes"].get<Bytes>();
      std::string since = "-";
      if (auto t = parse_rfc3339(h["since"].get<std::string>()); t && h["owner_kind"] != "baseline")
        since = format_age(now - *t);
      out << fmt::format("  {:<22} {:<9} {:>9} {:>5.0f}%  {:<9} {:<11} {}\n",
                         h["owner"].get<std::string>(), h["owner_kind"].get<std::string>(),
                         format_size(b), total ? 100.0 * double(b) / double(total) : 0.0, since,
                         h["source"].get<std::string>(), pids_text(h["pids"]));
      if (!h["candidates"].empty()) {
        std::string c;
        for (const auto& cand : h["candidates"]) {
          if (!c.empty()) c += ", ";
          c += fmt::format("{} (pid {})", cand["name"].get<std::string>(), cand["pid"].get<int>());
        }
        out << "    candidates: " << c << "\n";
      }
    }
  }
}

}  // namespace vramd
