// vLLM: busy from /metrics; unload with sleep mode (POST /sleep?level=N), wake with /wake_up
// (docs/adapters.md "vllm").
#include "services/http_adapter_base.h"
#include "services/kinds.h"
#include "services/comfyui_history.h"
#include "services/parsers.h"

namespace vramd {
namespace {

using boost::asio::awaitable;

constexpr const char* kNoSleepMode =
    "vLLM runs without --enable-sleep-mode / VLLM_SERVER_DEV_MODE=1";

class VllmAdapter final : public HttpAdapter {
 public:
  using HttpAdapter::HttpAdapter;

  awaitable<ServiceProbe> probe() override {
    ServiceProbe p;
    Deadline d = probe_deadline();
    if (auto text = co_await probe_text("/metrics", d, p)) {
      PromExposition e = parse_prometheus(*text);
      // Summed over label sets: v0 {model_name}, v1 {engine, model_name}, one set per engine.
      p.busy = busy_from_metrics(e, {"vllm:num_requests_running", "vllm:num_requests_waiting"});
      if (std::optional<double> waiting = e.sum("vllm:num_requests_waiting")) {
        p.queue_depth = static_cast<int>(*waiting);
      }
      if (!p.busy && !e.declared("vllm:num_requests_running")) {
        add_error(p, "GET /metrics: no vllm:num_requests_running");
      }
    }
    if (!p.reachable) co_return p;
    // /is_sleeping exists only in sleep mode; a 404 there is not an error. Asleep, vramd wakes
    // it before a request, also when vramd did not put it to sleep (or restarted since).
    Result<HttpReply> r = co_await call("GET", "/is_sleeping", {}, d);
    if (r && ok_status(r->status)) {
      auto j = nlohmann::json::parse(r->body, nullptr, false);
      if (j.is_object() && j.contains("is_sleeping") && j["is_sleeping"].is_boolean())
        p.asleep = j["is_sleeping"].get<bool>();
    }
    // Asleep or not, its API server lists the names it serves (without the engine): a sleeper's
    // models stay its own, for the front door to route to and wake.
    if (auto j = co_await probe_json("/v1/models", d, p)) {
      if (j->is_object() && j->contains("data") && (*j)["data"].is_array()) {
        for (const auto& m : (*j)["data"]) {
          if (m.is_object() && m.contains("id") && m["id"].is_string()) {
            p.models.push_back(m["id"].get<std::string>());
          }
        }
      }
    }
    p.installed = p.models;  // what it serves whenever it runs: routed while it is stopped too
    // Its version, for the durations history (docs/history.md): extra, never a probe error.
    if (p.reachable)
      if (auto v = co_await optional_json("/version", d)) p.version = parse_vllm_version(*v);
    co_return p;
  }

  // sleep1: level 1 (weights to host RAM, KV cache dropped); sleep2: level 2 (both dropped).
  awaitable<UnloadCall> unload(SleepDepth depth) override {
    std::string path = depth == SleepDepth::sleep1 ? "/sleep?level=1" : "/sleep?level=2";
    UnloadCall out = co_await request("POST", path);
    if (out.message.find("→ 404") != std::string::npos) {
      out = unload_call(UnloadCall::Result::not_supported,
                        std::string(kNoSleepMode) + " (" + out.message + ")");
    }
    co_return out;
  }

  bool can_wake() const override { return true; }
  awaitable<UnloadCall> wake(SleepDepth depth) override {
    if (depth == SleepDepth::sleep1) co_return co_await request("POST", "/wake_up");
    // Level 2 dropped the weights: wake their memory, reload them from disk, then the KV cache,
    // and drop the prefix cache computed with the old weights (vLLM's sleep-mode docs).
    UnloadCall w = co_await request("POST", "/wake_up?tags=weights");
    if (w.result != UnloadCall::Result::requested) co_return w;
    UnloadCall r = co_await request("POST", "/collective_rpc", R"({"method":"reload_weights"})");
    if (r.result != UnloadCall::Result::requested) co_return r;
    UnloadCall k = co_await request("POST", "/wake_up?tags=kv_cache");
    if (k.result != UnloadCall::Result::requested) co_return k;
    UnloadCall p = co_await request("POST", "/reset_prefix_cache");
    p.message = w.message + "; " + r.message + "; " + k.message + "; " + p.message;
    co_return p;
  }

  awaitable<HealthCheck> health() override { co_return co_await health_get("/health"); }
};

}  // namespace

std::unique_ptr<Adapter> make_vllm_adapter(const ServiceConfig& c, boost::asio::any_io_executor ex,
                                           std::string key) {
  return std::make_unique<VllmAdapter>(c, std::move(ex), std::move(key));
}

}  // namespace vramd
