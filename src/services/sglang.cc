// SGLang: busy from /metrics (needs --enable-metrics), its models from /v1/models;
// release/resume memory occupation (needs --enable-memory-saver). Releasing with requests in flight
// is unsafe: refused while busy.
#include "services/http_adapter_base.h"
#include "services/kinds.h"
#include "services/parsers.h"

namespace vramd {
namespace {

using boost::asio::awaitable;

class SglangAdapter final : public HttpAdapter {
 public:
  using HttpAdapter::HttpAdapter;

  awaitable<ServiceProbe> probe() override {
    ServiceProbe p;
    Deadline d = probe_deadline();
    if (auto text = co_await probe_text("/metrics", d, p)) {
      PromExposition e = parse_prometheus(*text);
      p.busy = busy_from_metrics(e, {"sglang:num_running_reqs", "sglang:num_queue_reqs"});
      if (std::optional<double> q = e.sum("sglang:num_queue_reqs")) {
        p.queue_depth = static_cast<int>(*q);
      }
      if (!p.busy) add_error(p, "GET /metrics: no sglang:num_running_reqs (--enable-metrics?)");
    }
    if (!p.reachable) co_return p;
    // The names it serves (--served-model-name, else its model path): /v1/models answers without
    // any flag, its memory released or not.
    if (auto j = co_await probe_json("/v1/models", d, p)) {
      if (j->is_object() && j->contains("data") && (*j)["data"].is_array()) {
        for (const auto& m : (*j)["data"])
          if (m.is_object() && m.contains("id") && m["id"].is_string())
            p.models.push_back(m["id"].get<std::string>());
      }
    }
    p.installed = p.models;  // what it serves whenever it runs: routed while it is stopped too
    co_return p;
  }

  awaitable<UnloadCall> unload(SleepDepth) override {
    ServiceProbe p = co_await probe();
    if (p.busy.value_or(false)) {
      co_return unload_call(UnloadCall::Result::failed,
                            "busy: requests in flight (releasing memory now is unsafe)");
    }
    co_return co_await request("POST", "/release_memory_occupation", "{}");
  }

  bool can_wake() const override { return true; }
  awaitable<UnloadCall> wake(SleepDepth) override {
    co_return co_await request("POST", "/resume_memory_occupation", "{}");
  }

  awaitable<HealthCheck> health() override { co_return co_await health_get("/health"); }
};

}  // namespace

std::unique_ptr<Adapter> make_sglang_adapter(const ServiceConfig& c,
                                             boost::asio::any_io_executor ex, std::string key) {
  return std::make_unique<SglangAdapter>(c, std::move(ex), std::move(key));
}

}  // namespace vramd
