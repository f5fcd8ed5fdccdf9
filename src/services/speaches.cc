// speaches: loaded models from GET /api/ps; DELETE /api/ps/{id} unloads one (404: not loaded),
// POST /api/ps/{id} loads it again. No busy call (docs/adapters.md "speaches").
#include "services/http_adapter_base.h"
#include "services/kinds.h"
#include "services/parsers.h"

namespace vramd {
namespace {

using boost::asio::awaitable;

class SpeachesAdapter final : public HttpAdapter {
 public:
  using HttpAdapter::HttpAdapter;

  awaitable<ServiceProbe> probe() override {
    ServiceProbe p;
    if (auto j = co_await probe_json("/api/ps", probe_deadline(), p)) {
      Result<std::vector<std::string>> models = parse_speaches_ps(*j);
      if (models) {
        p.models = *models;
      } else {
        add_error(p, "GET /api/ps: " + models.error());
      }
    }
    co_return p;
  }

  awaitable<UnloadCall> unload(SleepDepth) override {
    std::vector<std::string> models = config_.models;
    if (models.empty()) {
      ServiceProbe p;
      std::optional<nlohmann::json> j = co_await probe_json("/api/ps", unload_deadline(), p);
      Result<std::vector<std::string>> listed =
          j ? parse_speaches_ps(*j) : Result<std::vector<std::string>>(make_error(p.error));
      if (!listed) {
        co_return unload_call(UnloadCall::Result::failed, "listing models: " + listed.error());
      }
      models = *listed;
    }
    if (!models.empty()) last_models_ = models;
    std::vector<unsigned> not_loaded(1, 404);
    co_return co_await request_each("DELETE", models, ps_path, no_body, not_loaded);
  }

  bool can_wake() const override { return true; }
  awaitable<UnloadCall> wake(SleepDepth) override {
    co_return co_await request_each("POST", last_models_, ps_path, no_body);
  }

  awaitable<HealthCheck> health() override { co_return co_await health_get("/health"); }

 private:
  // Model ids are "Systran/faster-whisper-small": the route takes the '/' as it is.
  static std::string ps_path(const std::string& m) { return "/api/ps/" + m; }
  static std::string no_body(const std::string&) { return {}; }

  std::vector<std::string> last_models_;
};

}  // namespace

std::unique_ptr<Adapter> make_speaches_adapter(const ServiceConfig& c,
                                               boost::asio::any_io_executor ex, std::string key) {
  return std::make_unique<SpeachesAdapter>(c, std::move(ex), std::move(key));
}

}  // namespace vramd
