// ComfyUI: busy from GET /queue, unload with POST /free (docs/adapters.md "comfyui").
#include "services/http_adapter_base.h"
#include "services/kinds.h"
#include "services/comfyui_history.h"
#include "services/parsers.h"

namespace vramd {
namespace {

using boost::asio::awaitable;

// Enough for the prompts finished between two probes while it works (a probe every second or
// two then); a quiet server is probed seldom, and has finished nothing new.
constexpr std::string_view kHistoryPath = "/history?max_items=16";

DurationRecord to_record(const ComfyPromptRun& run) {
  DurationRecord r;
  r.kind = RecordKind::prompt;
  r.key = run.prompt_id;
  r.model = run.model;
  r.workflow = run.workflow;
  r.outcome = run.outcome;
  r.cached_nodes = run.cached_nodes;
  r.at = run.ended_at.value_or(TimePoint{});
  if (run.started_at && run.ended_at)
    r.seconds = std::max(0.0, std::chrono::duration<double>(*run.ended_at - *run.started_at).count());
  if (run.queued_at && run.started_at)
    r.wait_s = std::max(0.0, std::chrono::duration<double>(*run.started_at - *run.queued_at).count());
  return r;
}

class ComfyUiAdapter final : public HttpAdapter {
 public:
  ComfyUiAdapter(const ServiceConfig& c, boost::asio::any_io_executor ex, std::string key)
      // /free answers before anything is freed: the worker applies it after the running prompt.
      : HttpAdapter(c, std::move(ex), std::move(key), std::chrono::seconds(30)) {}

  awaitable<ServiceProbe> probe() override {
    ServiceProbe p;
    Deadline d = probe_deadline();
    if (auto j = co_await probe_json("/queue", d, p)) {
      Result<ComfyQueue> q = parse_comfyui_queue(*j);
      if (q) {
        p.busy = q->running + q->pending > 0;
        p.queue_depth = q->running + q->pending;
      } else {
        add_error(p, "GET /queue: " + q.error());
      }
    }
    if (!p.reachable) co_return p;  // no second wait on a server that did not answer
    if (auto j = co_await probe_json("/system_stats", d, p)) {
      Result<ComfyStats> s = parse_comfyui_system_stats(*j);
      if (s) {
        // Evidence only: PyTorch's cache, ~0.1 GB under cudaMallocAsync whatever is loaded.
        p.self_reported_vram = s->torch_vram_total;
        p.version = s->version;
        p.args = parse_comfyui_argv(*j);
      } else {
        add_error(p, "GET /system_stats: " + s.error());
      }
    }
    // The prompts it finished (the newest kHistoryItems; the core keeps each once): their
    // times for the durations history (docs/history.md). Extra: a failure is no probe error.
    if (auto j = co_await optional_json(kHistoryPath, d))
      if (auto runs = parse_comfyui_history(*j))
        for (const ComfyPromptRun& run : *runs) p.finished.push_back(to_record(run));
    co_return p;
  }

  // sleep1: the models move to host RAM (unload_all_models); sleep2 also drops the executor's
  // caches (free_memory), so nothing of them is kept.
  awaitable<UnloadCall> unload(SleepDepth depth) override {
    co_return co_await request("POST", "/free",
                               depth == SleepDepth::sleep1
                                   ? R"({"unload_models":true})"
                                   : R"({"unload_models":true,"free_memory":true})");
  }

  awaitable<HealthCheck> health() override { co_return co_await health_get("/system_stats"); }
};

}  // namespace

std::unique_ptr<Adapter> make_comfyui_adapter(const ServiceConfig& c,
                                              boost::asio::any_io_executor ex, std::string key) {
  return std::make_unique<ComfyUiAdapter>(c, std::move(ex), std::move(key));
}

}  // namespace vramd
