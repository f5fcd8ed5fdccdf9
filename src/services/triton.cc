// Triton: busy from nv_inference_pending_request_count at {url}/metrics; models from the
// repository index; explicit model control to unload and load (docs/adapters.md "triton").
#include "services/http_adapter_base.h"
#include "services/kinds.h"
#include "services/parsers.h"

namespace vramd {
namespace {

using boost::asio::awaitable;
using nlohmann::json;

class TritonAdapter final : public HttpAdapter {
 public:
  using HttpAdapter::HttpAdapter;

  awaitable<ServiceProbe> probe() override {
    ServiceProbe p;
    Deadline d = probe_deadline();
    if (auto text = co_await probe_text("/metrics", d, p)) {
      PromExposition e = parse_prometheus(*text);
      p.busy = busy_from_metrics(e, {"nv_inference_pending_request_count"});
      if (std::optional<double> q = e.sum("nv_inference_pending_request_count")) {
        p.queue_depth = static_cast<int>(*q);
      }
      if (!p.busy) add_error(p, "GET /metrics: no nv_inference_pending_request_count");
    }
    if (!p.reachable) co_return p;
    std::optional<std::vector<std::string>> ready = co_await index(d, p);
    if (ready) p.models = *ready;
    co_return p;
  }

  awaitable<UnloadCall> unload(SleepDepth) override {
    std::vector<std::string> models = config_.models;
    if (models.empty()) {
      ServiceProbe p;
      std::optional<std::vector<std::string>> ready = co_await index(unload_deadline(), p);
      if (!ready) co_return unload_call(UnloadCall::Result::failed, "listing models: " + p.error);
      models = *ready;
    }
    if (!models.empty()) last_models_ = models;
    co_return co_await request_each("POST", models, unload_path, unload_body);
  }

  bool can_wake() const override { return true; }
  awaitable<UnloadCall> wake(SleepDepth) override {
    co_return co_await request_each("POST", last_models_, load_path, empty_body);
  }

  awaitable<HealthCheck> health() override { co_return co_await health_get("/v2/health/ready"); }

 private:
  awaitable<std::optional<std::vector<std::string>>> index(Deadline d, ServiceProbe& p) {
    Result<HttpReply> r = co_await call("POST", "/v2/repository/index", "{}", d);
    if (r) p.reachable = true;
    if (!r || !ok_status(r->status)) {
      add_error(p, describe("POST", "/v2/repository/index", r));
      co_return std::nullopt;
    }
    json j = json::parse(r->body, nullptr, false);
    Result<std::vector<std::string>> ready =
        j.is_discarded() ? Result<std::vector<std::string>>(make_error("the answer is not JSON"))
                         : parse_triton_index(j);
    if (!ready) {
      add_error(p, "POST /v2/repository/index: " + ready.error());
      co_return std::nullopt;
    }
    co_return *ready;
  }

  static std::string unload_path(const std::string& m) {
    return "/v2/repository/models/" + url_encode(m) + "/unload";
  }
  static std::string load_path(const std::string& m) {
    return "/v2/repository/models/" + url_encode(m) + "/load";
  }
  static std::string unload_body(const std::string&) {
    return R"({"parameters":{"unload_dependents":true}})";
  }
  static std::string empty_body(const std::string&) { return "{}"; }

  std::vector<std::string> last_models_;
};

}  // namespace

std::unique_ptr<Adapter> make_triton_adapter(const ServiceConfig& c,
                                             boost::asio::any_io_executor ex, std::string key) {
  return std::make_unique<TritonAdapter>(c, std::move(ex), std::move(key));
}

}  // namespace vramd
