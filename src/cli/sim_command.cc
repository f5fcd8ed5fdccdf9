// `vramd sim`: replays a trace through each policy (the real Arbiter for `vramd`) and prints
// what each one cost; `vramd sim --generate NAME` writes a seeded trace (docs/sim.md).
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cli/commands.h"
#include "daemon/config_file.h"
#include "sim/generate.h"
#include "sim/plot.h"
#include "sim/sim.h"

namespace vramd {

namespace {

Result<std::string> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error(fmt::format("cannot read {}: {}", path, std::strerror(errno)));
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

int generate(const SimOptions& o) {
  auto text = sim::generate_trace(o.generate, o.seed);
  if (!text) {
    std::cerr << "vramd sim: " << text.error() << "\n";
    return kExitUsage;
  }
  std::cout << *text;
  return kExitOk;
}

// "front (job wait p95, reload s): ttl:300s, vramd; vramd: on the front".
std::string pareto_summary(const std::vector<sim::Metrics>& rows) {
  std::vector<std::string> front;
  for (const auto& m : rows)
    if (m.dominated_by.empty()) front.push_back(m.policy);
  std::string out =
      fmt::format("Pareto front (job wait p95, reload s): {}\n", fmt::join(front, ", "));
  for (const auto& m : rows)
    if (m.policy == "vramd")
      out += m.dominated_by.empty()
                 ? "vramd: on the front\n"
                 : fmt::format("vramd: dominated by {}\n", fmt::join(m.dominated_by, ", "));
  return out;
}

}  // namespace

int cmd_sim(const SimOptions& o) {
  if (!o.generate.empty()) return generate(o);
  if (o.trace.empty()) {
    std::cerr << "vramd sim: give a trace (vramd sim TRACE.jsonl) or --generate NAME\n";
    return kExitUsage;
  }
  Config config;
  if (!o.config_path.empty()) {
    auto c = load_config(o.config_path);
    if (!c) {
      std::cerr << c.error() << "\n";
      return kExitUsage;
    }
    config = std::move(*c);
  }
  std::vector<std::unique_ptr<sim::Policy>> policies;
  for (const auto& spec : o.policies.empty() ? sim::all_policies() : o.policies) {
    auto p = sim::make_policy(spec, config, !o.config_path.empty());
    if (!p) {
      std::cerr << "vramd sim: " << p.error() << "\n";
      return kExitUsage;
    }
    policies.push_back(std::move(*p));
  }
  auto text = read_file(o.trace);
  if (!text) {
    std::cerr << "vramd sim: " << text.error() << "\n";
    return kExitFailure;
  }
  auto trace = sim::parse_trace(*text, o.trace);
  if (!trace) {
    std::cerr << trace.error() << "\n";
    return kExitFailure;
  }
  std::vector<sim::RunResult> runs;
  for (auto& p : policies) {
    auto t0 = std::chrono::steady_clock::now();
    runs.push_back(sim::run_policy(*trace, *p));
    runs.back().metrics.wall_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  std::vector<sim::Metrics> rows;
  rows.reserve(runs.size());
  for (const auto& r : runs) rows.push_back(r.metrics);
  sim::mark_pareto(rows);
  if (o.json) {
    nlohmann::json out = {{"trace", o.trace},
                          {"events", trace->events()},
                          {"hours", double(trace->end) / 3.6e6},
                          {"policies", nlohmann::json::array()}};
    for (const auto& m : rows) out["policies"].push_back(sim::to_json(m));
    std::cout << out.dump(2) << "\n";
  } else {
    std::cout << fmt::format("{}: {} requests and jobs over {:.1f} h\n\n", o.trace, trace->events(),
                             double(trace->end) / 3.6e6)
              << sim::format_table(rows, o.markdown) << "\n"
              << pareto_summary(rows);
  }
  if (!o.plot.empty()) {
    std::ofstream out(o.plot);
    out << sim::plot_svg(*trace, runs);
    if (!out) {
      std::cerr << "vramd sim: cannot write " << o.plot << "\n";
      return kExitFailure;
    }
  }
  return kExitOk;
}

}  // namespace vramd
