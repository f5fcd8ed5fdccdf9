// LocalAI: per model (config `models`), GET /backend/monitor?model=NAME says busy (state 1) and
// the backend's memory; POST /backend/shutdown ends that backend (docs/adapters.md "localai").
#include "services/http_adapter_base.h"
#include "services/kinds.h"
#include "services/parsers.h"

namespace vramd {
namespace {

using boost::asio::awaitable;
using nlohmann::json;

class LocalAiAdapter final : public HttpAdapter {
 public:
  using HttpAdapter::HttpAdapter;

  awaitable<ServiceProbe> probe() override {
    ServiceProbe p;
    Deadline d = probe_deadline();
    if (config_.models.empty()) {
      // Without model names there is nothing to ask about; readiness says it is up.
      Result<HttpReply> r = co_await call("GET", "/readyz", {}, d);
      p.reachable = r.ok();
      if (!r || !ok_status(r->status)) add_error(p, describe("GET", "/readyz", r));
      co_return p;
    }
    bool any_busy = false;
    bool all_known = true;
    Bytes total = 0;
    bool any_memory = false;
    for (const std::string& m : config_.models) {
      std::string path = "/backend/monitor?model=" + url_encode(m);
      std::optional<json> j = co_await probe_json(path, d, p);
      if (!p.reachable) co_return p;
      Result<LocalAiMonitor> mon =
          j ? parse_localai_monitor(*j) : Result<LocalAiMonitor>(make_error("no answer"));
      if (!mon) {
        if (j) add_error(p, "GET " + path + ": " + mon.error());
        all_known = false;
        continue;
      }
      any_busy = any_busy || mon->state == 1;
      if (mon->state == 1 || mon->state == 2) p.models.push_back(m);
      if (mon->memory_total) {
        total += *mon->memory_total;
        any_memory = true;
      }
    }
    if (any_busy) {
      p.busy = true;
    } else if (all_known) {
      p.busy = false;
    }
    if (any_memory) p.self_reported_vram = total;
    co_return p;
  }

  awaitable<UnloadCall> unload(SleepDepth) override {
    if (config_.models.empty()) {
      co_return unload_call(UnloadCall::Result::not_supported,
                            "LocalAI needs the model names: set `models` for this service");
    }
    co_return co_await request_each("POST", config_.models, shutdown_path, model_body);
  }

  awaitable<HealthCheck> health() override { co_return co_await health_get("/readyz"); }

 private:
  static std::string shutdown_path(const std::string&) { return "/backend/shutdown"; }
  static std::string model_body(const std::string& m) { return json{{"model", m}}.dump(); }
};

}  // namespace

std::unique_ptr<Adapter> make_localai_adapter(const ServiceConfig& c,
                                              boost::asio::any_io_executor ex, std::string key) {
  return std::make_unique<LocalAiAdapter>(c, std::move(ex), std::move(key));
}

}  // namespace vramd
