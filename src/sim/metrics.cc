#include "sim/metrics.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace vramd::sim {

double percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  // Nearest rank: the smallest value with at least p% of the values at or below it.
  double rank = std::ceil(p / 100.0 * double(values.size()));
  size_t i = rank < 1 ? 0 : std::min(values.size() - 1, size_t(rank) - 1);
  return values[i];
}

void mark_pareto(std::vector<Metrics>& rows) {
  if (rows.empty()) return;
  double wmin = rows[0].job_wait_p95_s, wmax = wmin, rmin = rows[0].reload_s, rmax = rmin;
  for (const auto& r : rows) {
    wmin = std::min(wmin, r.job_wait_p95_s), wmax = std::max(wmax, r.job_wait_p95_s);
    rmin = std::min(rmin, r.reload_s), rmax = std::max(rmax, r.reload_s);
  }
  auto scaled = [](double v, double lo, double hi) { return hi > lo ? (v - lo) / (hi - lo) : 0; };
  for (auto& b : rows) {
    b.dominated_by.clear();
    for (const auto& a : rows) {
      bool no_worse = a.job_wait_p95_s <= b.job_wait_p95_s && a.reload_s <= b.reload_s;
      bool better = a.job_wait_p95_s < b.job_wait_p95_s || a.reload_s < b.reload_s;
      if (no_worse && better) b.dominated_by.push_back(a.policy);
    }
    b.distance_to_ideal =
        std::hypot(scaled(b.job_wait_p95_s, wmin, wmax), scaled(b.reload_s, rmin, rmax));
  }
}

nlohmann::json to_json(const Metrics& m) {
  auto r3 = [](double v) { return std::round(v * 1000.0) / 1000.0; };
  return {
      {"policy", m.policy},
      {"job_wait_p50_s", r3(m.job_wait_p50_s)},
      {"job_wait_p95_s", r3(m.job_wait_p95_s)},
      {"job_wait_max_s", r3(m.job_wait_max_s)},
      {"job_completion_p50_s", r3(m.job_completion_p50_s)},
      {"job_completion_p95_s", r3(m.job_completion_p95_s)},
      {"suspends", m.suspends},
      {"blocked_by_idle_job_s", r3(m.blocked_by_idle_job_s)},
      {"reloads", m.reloads},
      {"reload_s", r3(m.reload_s)},
      {"reload_s_sleep1", r3(m.reload_s_sleep1)},
      {"reload_s_cold", r3(m.reload_s_cold)},
      {"host_ooms", m.host_ooms},
      {"requests_found_down", m.requests_found_down},
      {"reload_wait_p95_s", r3(m.reload_wait_p95_s)},
      {"request_reload_p95_s", r3(m.request_reload_p95_s)},
      {"request_latency_p50_s", r3(m.request_latency_p50_s)},
      {"request_latency_p95_s", r3(m.request_latency_p95_s)},
      {"idle_gib_h", r3(m.idle_gib_h)},
      {"unload_calls", m.unload_calls},
      {"unload_ineffective", m.unload_ineffective},
      {"restarts", m.restarts},
      {"jobs", m.jobs},
      {"jobs_never_admitted", m.jobs_never_admitted},
      {"requests", m.requests},
      {"requests_never_served", m.requests_never_served},
      {"loads_over_capacity", m.loads_over_capacity},
      {"unadmitted_load_ooms", m.unadmitted_load_ooms},
      {"dominated_by", m.dominated_by},
      {"distance_to_ideal", r3(m.distance_to_ideal)},
      {"wall_s", r3(m.wall_s)},
  };
}

std::string format_table(const std::vector<Metrics>& rows, bool markdown) {
  struct Col {
    const char* head;
    std::string (*cell)(const Metrics&);
  };
  static const Col cols[] = {
      {"policy", [](const Metrics& m) { return m.policy; }},
      {"job wait p50/p95/max s",
       [](const Metrics& m) {
         return fmt::format("{:.0f}/{:.0f}/{:.0f}", m.job_wait_p50_s, m.job_wait_p95_s,
                            m.job_wait_max_s);
       }},
      {"job done p50/p95 s",
       [](const Metrics& m) {
         return fmt::format("{:.0f}/{:.0f}", m.job_completion_p50_s, m.job_completion_p95_s);
       }},
      {"suspends", [](const Metrics& m) { return fmt::format("{}", m.suspends); }},
      {"blocked by idle job-s",
       [](const Metrics& m) { return fmt::format("{:.0f}", m.blocked_by_idle_job_s); }},
      {"reloads", [](const Metrics& m) { return fmt::format("{}", m.reloads); }},
      {"reload s (RAM/cold)",
       [](const Metrics& m) {
         return fmt::format("{:.0f} ({:.0f}/{:.0f})", m.reload_s, m.reload_s_sleep1,
                            m.reload_s_cold);
       }},
      {"req reload p95 s",
       [](const Metrics& m) { return fmt::format("{:.1f}", m.request_reload_p95_s); }},
      {"req latency p50/p95 s",
       [](const Metrics& m) {
         return fmt::format("{:.1f}/{:.1f}", m.request_latency_p50_s, m.request_latency_p95_s);
       }},
      {"idle GiB-h", [](const Metrics& m) { return fmt::format("{:.1f}", m.idle_gib_h); }},
      {"unloads (ineff.)",
       [](const Metrics& m) {
         return fmt::format("{} ({})", m.unload_calls, m.unload_ineffective);
       }},
      {"restarts", [](const Metrics& m) { return fmt::format("{}", m.restarts); }},
      {"host OOMs", [](const Metrics& m) { return fmt::format("{}", m.host_ooms); }},
      {"jobs never admitted",
       [](const Metrics& m) { return fmt::format("{}/{}", m.jobs_never_admitted, m.jobs); }},
      {"requests never served",
       [](const Metrics& m) { return fmt::format("{}/{}", m.requests_never_served, m.requests); }},
      {"to ideal", [](const Metrics& m) { return fmt::format("{:.2f}", m.distance_to_ideal); }},
      {"dominated by (wait p95, reload s)",
       [](const Metrics& m) {
         return m.dominated_by.empty() ? std::string("-")
                                       : fmt::format("{}", fmt::join(m.dominated_by, ", "));
       }},
  };
  std::vector<size_t> width;
  for (const auto& c : cols) {
    size_t w = std::string(c.head).size();
    for (const auto& r : rows) w = std::max(w, c.cell(r).size());
    width.push_back(w);
  }
  std::string out;
  auto line = [&](auto cell_of) {
    std::string s = markdown ? "|" : "";
    for (size_t i = 0; i < std::size(cols); ++i) {
      std::string c = cell_of(i);
      if (markdown)
        s += " " + c + std::string(width[i] - c.size(), ' ') + " |";
      else
        s += (i ? "  " : "") + c +
             std::string(i + 1 < std::size(cols) ? width[i] - c.size() : 0, ' ');
    }
    out += s + "\n";
  };
  line([&](size_t i) { return std::string(cols[i].head); });
  if (markdown) line([&](size_t i) { return std::string(width[i], '-'); });
  for (const auto& r : rows) line([&](size_t i) { return cols[i].cell(r); });
  return out;
}

}  // namespace vramd::sim
