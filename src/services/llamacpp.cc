// llama.cpp server. Busy from GET /slots, else /metrics, where the server was started with
// --slots or --metrics (both off by default: 501, then busy is unknown and neither is asked again
// until the server is lost); its model from GET /v1/models, which answers in every mode. Plain
// servers have no unload (stop the process); router mode (config `router`, or detected: its
// models carry a status) unloads each loaded model.
#include "services/http_adapter_base.h"
#include "services/comfyui_history.h"  // parse_llamacpp_build_info
#include "services/kinds.h"
#include "services/parsers.h"
#include "services/prometheus.h"

namespace vramd {
namespace {

using boost::asio::awaitable;
using nlohmann::json;

class LlamaCppAdapter final : public HttpAdapter {
 public:
  LlamaCppAdapter(const ServiceConfig& c, boost::asio::any_io_executor ex, std::string key)
      : HttpAdapter(c, std::move(ex), std::move(key)), router_(c.router) {}

  awaitable<ServiceProbe> probe() override {
    ServiceProbe p;
    Deadline d = probe_deadline();
    if (co_await probe_busy(d, p)) {
      std::optional<std::vector<std::string>> models = co_await list_models(d, p);
      if (models) p.models = *models;
      // A plain server serves its one model whenever it runs: kept while it is stopped, so a
      // request for it starts it (a router's loaded models come and go).
      if (models && !router_.value_or(false)) p.installed = *models;
    }
    if (!p.reachable) {
      busy_from_ = BusyFrom::untried;  // a server started again may have other flags
      co_return p;
    }
    // Its version, for the durations history (docs/history.md): extra, never a probe error.
    if (auto v = co_await optional_json("/props", d)) {
      p.version = parse_llamacpp_build_info(*v);
      if (v->is_object() && v->contains("total_slots") && (*v)["total_slots"].is_number_integer())
        p.slots = (*v)["total_slots"].get<int>();
    }
    co_return p;
  }

  awaitable<UnloadCall> unload(SleepDepth) override {
    ServiceProbe p;
    std::vector<std::string> models = config_.models;
    std::optional<std::vector<std::string>> listed;
    if (router_.value_or(true)) listed = co_await list_models(unload_deadline(), p);
    if (!router_.value_or(false)) {
      co_return unload_call(UnloadCall::Result::not_supported,
                            "plain llama-server has no unload: stopping the process frees its "
                            "memory (router mode has POST /models/unload)");
    }
    if (models.empty()) {
      if (!listed) co_return unload_call(UnloadCall::Result::failed, "listing models: " + p.error);
      models = *listed;
    }
    if (!models.empty()) last_models_ = models;
    co_return co_await request_each("POST", models, unload_path, model_body);
  }

  bool can_wake() const override { return router_.value_or(false); }
  awaitable<UnloadCall> wake(SleepDepth depth) override {
    if (!router_.value_or(false)) co_return co_await Adapter::wake(depth);
    co_return co_await request_each("POST", last_models_, load_path, model_body);
  }

  awaitable<HealthCheck> health() override {
    Result<HttpReply> r = co_await call("GET", "/health", {}, probe_deadline());
    HealthCheck out{r && ok_status(r->status), describe("GET", "/health", r)};
    if (r && r->status == 503) {
      std::string m = llamacpp_error_message(r->body);
      out.message = "GET /health → 503 " + (m.empty() ? std::string("Service Unavailable") : m);
    }
    co_return out;
  }

 private:
  // Which call says busy: /slots (--slots), else /metrics (--metrics); `none` once both said 501
  // (or 404: a router without ?model), so that neither is asked at every probe.
  enum class BusyFrom { untried, slots, metrics, none };

  // False when the server did not answer at all.
  awaitable<bool> probe_busy(Deadline d, ServiceProbe& p) {
    if (busy_from_ == BusyFrom::untried || busy_from_ == BusyFrom::slots) {
      Result<HttpReply> r = co_await call("GET", "/slots", {}, d);
      if (!r) {
        add_error(p, describe("GET", "/slots", r));
        co_return false;
      }
      p.reachable = true;
      if (ok_status(r->status)) {
        busy_from_ = BusyFrom::slots;
        json j = json::parse(r->body, nullptr, false);
        Result<bool> busy = j.is_discarded() ? Result<bool>(make_error("the answer is not JSON"))
                                             : parse_llamacpp_slots(j);
        if (busy) {
          p.busy = *busy;
        } else {
          add_error(p, "GET /slots: " + busy.error());
        }
        co_return true;
      }
      if (r->status == 503) {
        // No free slot (fail_on_no_slot): busy. While the model loads every path answers 503
        // "Loading model": unknown (health says it).
        if (llamacpp_error_message(r->body) != "Loading model") p.busy = true;
        co_return true;
      }
      if (r->status != 501 && r->status != 404) {
        add_error(p, describe("GET", "/slots", r));
        co_return true;
      }
      busy_from_ = BusyFrom::metrics;  // 501: started without --slots
    }
    if (busy_from_ != BusyFrom::metrics) co_return true;
    Result<HttpReply> r = co_await call("GET", "/metrics", {}, d);
    if (!r) {
      add_error(p, describe("GET", "/metrics", r));
      co_return false;
    }
    p.reachable = true;
    if (r->status == 501 || r->status == 404) {
      busy_from_ = BusyFrom::none;  // started without --metrics too: busy stays unknown
      co_return true;
    }
    if (!ok_status(r->status)) {
      if (r->status != 503) add_error(p, describe("GET", "/metrics", r));
      co_return true;
    }
    PromExposition e = parse_prometheus(r->body);
    p.busy = busy_from_metrics(e, {"llamacpp:requests_processing", "llamacpp:requests_deferred"});
    if (std::optional<double> deferred = e.sum("llamacpp:requests_deferred"))
      p.queue_depth = static_cast<int>(*deferred);
    if (!p.busy) add_error(p, "GET /metrics: no llamacpp:requests_processing");
    co_return true;
  }

  // The served models: a plain server's one model (GET /v1/models, in every mode and without
  // flags), a router's loaded ones (GET /models). Decides router mode when not configured: a
  // router lists models with a status; a plain server lists its one model without.
  awaitable<std::optional<std::vector<std::string>>> list_models(Deadline d, ServiceProbe& p) {
    const char* path = router_.value_or(false) ? "/models" : "/v1/models";
    Result<HttpReply> r = co_await call("GET", path, {}, d);
    if (r) p.reachable = true;
    if (!r || !ok_status(r->status)) {
      // 503 while the model loads: health says so; the probe's busy call said what it could.
      if (!r || r->status != 503) add_error(p, describe("GET", path, r));
      co_return std::nullopt;
    }
    json j = json::parse(r->body, nullptr, false);
    if (!router_ && !j.is_discarded()) {
      const json* list =
          j.is_array() ? &j : (j.is_object() && j.contains("data") ? &j["data"] : nullptr);
      bool has_status = false;
      if (list && list->is_array()) {
        for (const json& m : *list)
          has_status = has_status || (m.is_object() && m.contains("status"));
      }
      router_ = has_status;
    }
    Result<std::vector<std::string>> models =
        j.is_discarded() ? Result<std::vector<std::string>>(make_error("the answer is not JSON"))
                         : parse_llamacpp_models(j);
    if (!models) {
      add_error(p, std::string("GET ") + path + ": " + models.error());
      co_return std::nullopt;
    }
    co_return *models;
  }

  static std::string unload_path(const std::string&) { return "/models/unload"; }
  static std::string load_path(const std::string&) { return "/models/load"; }
  static std::string model_body(const std::string& m) { return json{{"model", m}}.dump(); }

  std::optional<bool> router_;  // nullopt until detected
  BusyFrom busy_from_ = BusyFrom::untried;
  std::vector<std::string> last_models_;
};

}  // namespace

std::unique_ptr<Adapter> make_llamacpp_adapter(const ServiceConfig& c,
                                               boost::asio::any_io_executor ex, std::string key) {
  return std::make_unique<LlamaCppAdapter>(c, std::move(ex), std::move(key));
}

}  // namespace vramd
