// llama.cpp server: busy from GET /slots; plain servers have no unload (stop the process);
// router mode (config `router`, or detected from GET /models) unloads each loaded model.
#include "services/http_adapter_base.h"
#include "services/kinds.h"
#include "services/comfyui_history.h"
#include "services/comfyui_history.h"
#include "services/parsers.h"

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
    Result<HttpReply> r = co_await call("GET", "/slots", {}, d);
    if (!r) {
      add_error(p, describe("GET", "/slots", r));
      co_return p;
    }
    p.reachable = true;
    if (ok_status(r->status)) {
      json j = json::parse(r->body, nullptr, false);
      Result<bool> busy = j.is_discarded() ? Result<bool>(make_error("the answer is not JSON"))
                                           : parse_llamacpp_slots(j);
      if (busy) {
        p.busy = *busy;
      } else {
        add_error(p, "GET /slots: " + busy.error());
      }
    } else if (r->status != 501 && r->status != 404 && r->status != 503) {
      // 501: --no-slots; 404: router mode without ?model; 503: no free slot (fail_on_no_slot).
      add_error(p, describe("GET", "/slots", r));
    } else if (r->status == 503) {
      p.busy = true;
    }
    if (router_.value_or(true)) {
      std::optional<std::vector<std::string>> models = co_await list_models(d, p);
      if (models) p.models = *models;
    }
    // Its version, for the durations history (docs/history.md): extra, never a probe error.
    if (p.reachable)
      if (auto v = co_await optional_json("/props", d)) p.version = parse_llamacpp_build_info(*v);
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
  // GET /models: the loaded model ids. Decides router mode when not configured: a router lists
  // models with a status; a plain server lists its one model without.
  awaitable<std::optional<std::vector<std::string>>> list_models(Deadline d, ServiceProbe& p) {
    Result<HttpReply> r = co_await call("GET", "/models", {}, d);
    if (!r || !ok_status(r->status)) {
      if (!router_) co_return std::nullopt;  // not a router: quiet
      add_error(p, describe("GET", "/models", r));
      co_return std::nullopt;
    }
    json j = json::parse(r->body, nullptr, false);
    if (!router_) {
      const json* list =
          j.is_array() ? &j : (j.is_object() && j.contains("data") ? &j["data"] : nullptr);
      bool has_status = false;
      if (list && list->is_array()) {
        for (const json& m : *list)
          has_status = has_status || (m.is_object() && m.contains("status"));
      }
      router_ = has_status;
      if (!has_status) co_return std::nullopt;
    }
    Result<std::vector<std::string>> models =
        j.is_discarded() ? Result<std::vector<std::string>>(make_error("the answer is not JSON"))
                         : parse_llamacpp_models(j);
    if (!models) {
      add_error(p, "GET /models: " + models.error());
      co_return std::nullopt;
    }
    co_return *models;
  }

  static std::string unload_path(const std::string&) { return "/models/unload"; }
  static std::string load_path(const std::string&) { return "/models/load"; }
  static std::string model_body(const std::string& m) { return json{{"model", m}}.dump(); }

  std::optional<bool> router_;  // nullopt until detected
  std::vector<std::string> last_models_;
};

}  // namespace

std::unique_ptr<Adapter> make_llamacpp_adapter(const ServiceConfig& c,
                                               boost::asio::any_io_executor ex, std::string key) {
  return std::make_unique<LlamaCppAdapter>(c, std::move(ex), std::move(key));
}

}  // namespace vramd
