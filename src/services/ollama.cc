// Ollama: what is loaded from GET /api/ps; each model unloaded with keep_alive 0. Ollama has no
// busy call (docs/adapters.md "ollama").
#include "services/http_adapter_base.h"
#include "services/kinds.h"
#include "services/comfyui_history.h"
#include "services/parsers.h"

namespace vramd {
namespace {

using boost::asio::awaitable;
using nlohmann::json;

class OllamaAdapter final : public HttpAdapter {
 public:
  using HttpAdapter::HttpAdapter;

  awaitable<ServiceProbe> probe() override {
    ServiceProbe p;
    if (auto j = co_await probe_json("/api/ps", probe_deadline(), p)) {
      Result<std::vector<OllamaModel>> models = parse_ollama_ps(*j);
      if (models) {
        Bytes vram = 0;
        for (const OllamaModel& m : *models) {
          p.models.push_back(m.name);
          vram += m.size_vram;
        }
        p.self_reported_vram = vram;
        if (!p.models.empty()) last_models_ = p.models;
      } else {
        add_error(p, "GET /api/ps: " + models.error());
      }
    }
    // Every model it has, loaded or not: a request loads it, so the front door routes them all.
    if (p.reachable)
      if (auto j = co_await optional_json("/api/tags", probe_deadline()))
        if (j->is_object() && j->contains("models") && (*j)["models"].is_array())
          for (const auto& m : (*j)["models"])
            if (m.is_object() && m.contains("name") && m["name"].is_string())
              p.installed.push_back(m["name"].get<std::string>());
    // Its version, for the durations history (docs/history.md): extra, never a probe error.
    if (p.reachable)
      if (auto v = co_await optional_json("/api/version", probe_deadline())) p.version = parse_ollama_version(*v);
    co_return p;
  }

  awaitable<UnloadCall> unload(SleepDepth) override {
    std::vector<std::string> models = config_.models;
    if (models.empty()) {
      ServiceProbe p;
      std::optional<json> j = co_await probe_json("/api/ps", unload_deadline(), p);
      Result<std::vector<OllamaModel>> listed =
          j ? parse_ollama_ps(*j) : Result<std::vector<OllamaModel>>(make_error(p.error));
      if (!listed) {
        co_return unload_call(UnloadCall::Result::failed, "listing models: " + listed.error());
      }
      for (const OllamaModel& m : *listed) models.push_back(m.name);
    }
    if (!models.empty()) last_models_ = models;
    co_return co_await request_each("POST", models, generate_path, unload_body);
  }

  bool can_wake() const override { return true; }
  awaitable<UnloadCall> wake(SleepDepth) override {
    co_return co_await request_each("POST", last_models_, generate_path, load_body);
  }

  awaitable<HealthCheck> health() override { co_return co_await health_get("/api/version"); }

 private:
  static std::string generate_path(const std::string&) { return "/api/generate"; }
  static std::string unload_body(const std::string& m) {
    return json{{"model", m}, {"keep_alive", 0}}.dump();
  }
  static std::string load_body(const std::string& m) { return json{{"model", m}}.dump(); }

  std::vector<std::string> last_models_;
};

}  // namespace

std::unique_ptr<Adapter> make_ollama_adapter(const ServiceConfig& c,
                                             boost::asio::any_io_executor ex, std::string key) {
  return std::make_unique<OllamaAdapter>(c, std::move(ex), std::move(key));
}

}  // namespace vramd
