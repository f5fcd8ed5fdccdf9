#include "server/json_view.h"

namespace vramd {

using nlohmann::json;

namespace {
template <typename T>
json opt(const std::optional<T>& v) {
  return v ? json(*v) : json(nullptr);
}
}  // namespace

json to_json(const Holding& h) {
  json candidates = json::array();
  for (const auto& c : h.candidates) candidates.push_back({{"pid", c.pid}, {"name", c.name}});
  return {{"owner", h.owner.name},   {"owner_kind", to_string(h.owner.kind)},
          {"bytes", h.bytes},        {"source", to_string(h.source)},
          {"pids", h.pids},          {"since", format_rfc3339(h.since)},
          {"candidates", candidates}};
}

json to_json(const GpuStatus& g) {
  const GpuSample& s = g.sample;
  json holdings = json::array();
  for (const auto& h : g.holdings) holdings.push_back(to_json(h));
  json processes = json::array();
  for (const auto& p : s.processes) {
    json j = {{"pid", p.pid}, {"used_bytes", opt(p.used)}};
    if (!p.name.empty()) j["name"] = p.name;
    processes.push_back(std::move(j));
  }
  return {{"index", s.index},
          {"uuid", s.uuid},
          {"name", s.name},
          {"health", to_string(s.health)},
          {"error", s.error.empty() ? json(nullptr) : json(s.error)},
          {"total_bytes", s.total},
          {"used_bytes", s.used},
          {"free_bytes", s.total >= s.used ? s.total - s.used : 0},
          {"reserved_bytes", opt(s.reserved)},
          {"utilization_pct", opt(s.utilization_pct)},
          {"temperature_c", opt(s.temperature_c)},
          {"power_w", opt(s.power_w)},
          {"per_process_available", g.per_process_available},
          {"baseline_bytes", opt(g.baseline)},
          {"baseline_source", g.baseline_source.empty() ? json(nullptr) : json(g.baseline_source)},
          {"holdings", holdings},
          {"processes", processes}};
}

json to_json(const StatusSnapshot& s) {
  json gpus = json::array();
  for (const auto& g : s.gpus) gpus.push_back(to_json(g));
  return {{"sampled_at", s.sampled ? json(format_rfc3339(s.sampled_at)) : json(nullptr)},
          {"backend", s.backend},
          {"driver_version", s.driver_version},
          {"error", s.error.empty() ? json(nullptr) : json(s.error)},
          {"gpus", gpus}};
}

json to_json(const HistoryView& v, unsigned gpu) {
  json times = json::array();
  for (auto t : v.times) times.push_back(t.time_since_epoch().count() / 1000.0);
  json series = json::array();
  for (const auto& s : v.series)
    series.push_back({{"owner", s.owner.name}, {"owner_kind", to_string(s.owner.kind)}, {"bytes", s.values}});
  return {{"gpu", gpu}, {"total_bytes", v.total}, {"times", times}, {"series", series}};
}

json to_json(const EventRecord& e) {
  return {{"at", format_rfc3339(e.at)},
          {"type", e.type},
          {"gpu", e.gpu ? json(*e.gpu) : json(nullptr)},
          {"subject", e.subject},
          {"message", e.message}};
}

json error_json(const std::string& code, const std::string& message) {
  return {{"error", {{"code", code}, {"message", message}}}};
}

}  // namespace vramd
