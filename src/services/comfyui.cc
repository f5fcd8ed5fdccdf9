// ComfyUI: busy from GET /queue, unload with POST /free (docs/adapters.md "comfyui").
#include "services/http_adapter_base.h"
#include "services/kinds.h"
#include "services/parsers.h"

namespace vramd {
namespace {

using boost::asio::awaitable;

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
      } else {
        add_error(p, "GET /system_stats: " + s.error());
      }
    }
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
