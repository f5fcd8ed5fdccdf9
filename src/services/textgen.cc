// text-generation-webui (OpenAI extension's internal API): no busy call; the loaded model from
// /v1/internal/model/info; unload, and load of the last model seen (docs/adapters.md "textgen").
#include "services/http_adapter_base.h"
#include "services/kinds.h"
#include "services/parsers.h"

namespace vramd {
namespace {

using boost::asio::awaitable;

class TextgenAdapter final : public HttpAdapter {
 public:
  TextgenAdapter(const ServiceConfig& c, boost::asio::any_io_executor ex, std::string key)
      : HttpAdapter(c, std::move(ex), std::move(key)) {
    if (!c.models.empty()) last_model_ = c.models.front();
  }

  awaitable<ServiceProbe> probe() override {
    ServiceProbe p;
    if (auto j = co_await probe_json("/v1/internal/model/info", probe_deadline(), p)) {
      Result<std::optional<std::string>> name = parse_textgen_model_info(*j);
      if (!name) {
        add_error(p, "GET /v1/internal/model/info: " + name.error());
      } else if (*name) {
        p.models.push_back(**name);
        last_model_ = **name;
      }
    }
    co_return p;
  }

  awaitable<UnloadCall> unload(SleepDepth) override {
    co_return co_await request("POST", "/v1/internal/model/unload");
  }

  bool can_wake() const override { return true; }
  awaitable<UnloadCall> wake(SleepDepth) override {
    if (last_model_.empty()) {
      co_return unload_call(UnloadCall::Result::failed,
                            "no model to load: none seen loaded and `models` not set");
    }
    co_return co_await request("POST", "/v1/internal/model/load", model_name_body(last_model_));
  }

  awaitable<HealthCheck> health() override { co_return co_await health_get("/v1/internal/health"); }

 private:
  static std::string model_name_body(const std::string& m) {
    return nlohmann::json{{"model_name", m}}.dump();
  }

  std::string last_model_;
};

}  // namespace

std::unique_ptr<Adapter> make_textgen_adapter(const ServiceConfig& c,
                                              boost::asio::any_io_executor ex, std::string key) {
  return std::make_unique<TextgenAdapter>(c, std::move(ex), std::move(key));
}

}  // namespace vramd
