// The front door's route lookup per request (issue 27 item 4: "the route table is a snapshot
// swapped when services change, not a copy per request"), side by side in one run:
//
// - BM_RouteCopyPerRequest: what each front-door request did before: Arbiter::services() (every
//   ServiceStatus copied, its managed part and idle time filled), the models of the proxied ones
//   gathered, a ModelTable built from them, then the lookup.
// - BM_RouteKeptTable: what it does now: RequestPath::models() walks each service's models
//   through the Daemon's hook comparing them with the list it handed out last (the same:
//   nothing allocated), the proxy keeps the table built from that list, then the same lookup.
//
// The world: 16 Ollama services on one GPU, each with 4 models loaded (its probe said so), the
// request asking for the last service's last model (the table's longest walk).
#include <memory>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include "core/arbiter.h"
#include "core/config.h"
#include "daemon/request_path.h"
#include "proxy/router.h"

namespace vramd {
namespace {

constexpr int kServices = 16;
constexpr int kModels = 4;

struct RouteWorld {
  RouteWorld() : arbiter(make_config()) {
    Now now{MonoTime(std::chrono::seconds(100)), TimePoint(std::chrono::seconds(1700000000))};
    for (int s = 0; s < kServices; ++s) {
      ProbeDone p;
      p.service = fmt::format("ollama-{}", s);
      p.probe.reachable = true;
      p.probe.busy = false;
      for (int m = 0; m < kModels; ++m) p.probe.models.push_back(fmt::format("model-{}-{}:8b", s, m));
      arbiter.handle(p, now);
    }
    asked = fmt::format("model-{}-{}:8b", kServices - 1, kModels - 1);
  }
  static Config make_config() {
    std::string text;
    for (int s = 0; s < kServices; ++s)
      text += fmt::format("[services.ollama-{}]\nkind = \"ollama\"\nurl = \"http://127.0.0.1:{}\"\n", s,
                          20000 + s);
    auto c = parse_config(text, "route_bench.toml");
    if (!c) throw std::runtime_error(c.error());
    return *c;
  }
  Arbiter arbiter;
  std::map<std::string, std::string> aliases;
  std::string asked;
};

RouteWorld& world() {
  static RouteWorld w;
  return w;
}

void BM_RouteCopyPerRequest(benchmark::State& state) {
  RouteWorld& w = world();
  for (auto _ : state) {
    std::vector<ModelEntry> entries;
    for (const auto& st : w.arbiter.services()) {
      const ServiceConfig* cfg = w.arbiter.config().find_service(st.name);
      if (!cfg || !proxied(*cfg)) continue;
      for (const auto& m : st.models) entries.push_back({m, st.name});
    }
    ModelTable table(std::move(entries), w.aliases);
    auto route = table.find(w.asked);
    if (!route) state.SkipWithError("no route");
    benchmark::DoNotOptimize(route);
  }
}
BENCHMARK(BM_RouteCopyPerRequest)->Unit(benchmark::kMicrosecond);

void BM_RouteKeptTable(benchmark::State& state) {
  RouteWorld& w = world();
  boost::asio::io_context io;
  RequestPath::Hooks hooks;
  hooks.models = [&](const RequestPath::Hooks::EachModels& each) {
    for (const auto& cfg : w.arbiter.config().services) {
      if (!proxied(cfg)) continue;
      if (const ServiceStatus* st = w.arbiter.service_policy_status(cfg.name))
        each(cfg.name, /*ollama_api=*/false, st->models);
    }
  };
  RequestPath path(io, hooks);
  // The proxy's side (proxy.cc route_table): the table is built again only for another list.
  ModelList routed;
  std::shared_ptr<const ModelTable> table;
  for (auto _ : state) {
    ModelList list = path.models();
    if (!table || list != routed) {
      table = std::make_shared<const ModelTable>(*list, w.aliases);
      routed = list;
    }
    auto route = table->find(w.asked);
    if (!route) state.SkipWithError("no route");
    benchmark::DoNotOptimize(route);
  }
}
BENCHMARK(BM_RouteKeptTable)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace vramd
