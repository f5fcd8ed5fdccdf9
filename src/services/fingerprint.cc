#include "services/fingerprint.h"

#include <nlohmann/json.hpp>

namespace vramd {

namespace {

using nlohmann::json;

const ProbeAnswer* ok(const std::map<std::string, ProbeAnswer>& a, const std::string& path) {
  auto it = a.find(path);
  return it != a.end() && it->second.status == 200 ? &it->second : nullptr;
}

json object(const std::map<std::string, ProbeAnswer>& a, const std::string& path) {
  const ProbeAnswer* r = ok(a, path);
  if (!r) return nullptr;
  json j = json::parse(r->body, nullptr, false);
  return j.is_discarded() ? json(nullptr) : j;
}

// j[key] when it is a string, else "" (never throws on a body of another shape).
std::string text_at(const json& j, const char* key) {
  if (!j.is_object()) return {};
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

bool metrics_have(const std::map<std::string, ProbeAnswer>& a, const std::string& prefix) {
  const ProbeAnswer* r = ok(a, "/metrics");
  if (!r) return false;
  // A family name at the start of a line (a sample, or # HELP / # TYPE).
  for (size_t at = 0; at < r->body.size();) {
    size_t end = r->body.find('\n', at);
    std::string_view line(r->body.data() + at, (end == std::string::npos ? r->body.size() : end) - at);
    if (line.rfind("# HELP ", 0) == 0 || line.rfind("# TYPE ", 0) == 0) line.remove_prefix(7);
    if (line.rfind(prefix, 0) == 0) return true;
    if (end == std::string::npos) break;
    at = end + 1;
  }
  return false;
}

}  // namespace

const std::vector<std::string>& fingerprint_paths() {
  static const std::vector<std::string> paths = {"/system_stats",
                                                 "/",
                                                 "/sdapi/v1/options",
                                                 "/v1/internal/model/info",
                                                 "/get_model_info",
                                                 "/metrics",
                                                 "/slots",
                                                 "/props",
                                                 "/v2",
                                                 "/health",
                                                 "/api/ps",
                                                 "/readyz",
                                                 "/v1/models"};
  return paths;
}

std::optional<Fingerprint> identify_server(const std::map<std::string, ProbeAnswer>& a) {
  if (json j = object(a, "/system_stats"); j.is_object() && j.contains("system") && j.contains("devices"))
    return Fingerprint{"comfyui", "GET /system_stats: system and devices"};
  if (const ProbeAnswer* r = ok(a, "/"); r && r->body.rfind("Ollama is running", 0) == 0)
    return Fingerprint{"ollama", "GET /: Ollama is running"};
  if (json j = object(a, "/sdapi/v1/options"); j.is_object() && j.contains("sd_model_checkpoint"))
    return Fingerprint{"a1111", "GET /sdapi/v1/options: sd_model_checkpoint"};
  if (json j = object(a, "/v1/internal/model/info"); j.is_object() && j.contains("model_name"))
    return Fingerprint{"textgen", "GET /v1/internal/model/info: model_name"};
  if (json j = object(a, "/get_model_info"); j.is_object() && j.contains("model_path"))
    return Fingerprint{"sglang", "GET /get_model_info: model_path"};
  if (metrics_have(a, "vllm:")) return Fingerprint{"vllm", "GET /metrics: vllm: metrics"};
  if (metrics_have(a, "sglang:")) return Fingerprint{"sglang", "GET /metrics: sglang: metrics"};
  if (metrics_have(a, "llamacpp:"))
    return Fingerprint{"llamacpp", "GET /metrics: llamacpp: metrics"};
  if (json j = object(a, "/slots");
      j.is_array() && !j.empty() && j[0].is_object() && j[0].contains("id"))
    return Fingerprint{"llamacpp", "GET /slots: a list of slots"};
  // /slots and /metrics need --slots / --metrics; /props and /v1/models answer without flags.
  if (json j = object(a, "/props"); j.is_object() && j.contains("default_generation_settings") &&
                                    j.contains("total_slots") && j.contains("build_info"))
    return Fingerprint{"llamacpp", "GET /props: default_generation_settings, total_slots"};
  if (json j = object(a, "/v1/models"); j.is_object() && j.contains("data") &&
                                        j["data"].is_array() && !j["data"].empty() &&
                                        text_at(j["data"][0], "owned_by") == "llamacpp")
    return Fingerprint{"llamacpp", "GET /v1/models: owned_by llamacpp"};
  // While it loads its model, llama-server answers every path 503 in its own error shape.
  if (const auto it = a.find("/health"); it != a.end() && it->second.status == 503) {
    json j = json::parse(it->second.body, nullptr, false);
    if (j.is_object() && j.contains("error") &&
        text_at(j["error"], "type") == "unavailable_error" &&
        text_at(j["error"], "message") == "Loading model")
      return Fingerprint{"llamacpp", "GET /health: 503 Loading model (llama-server's error)"};
  }
  if (json j = object(a, "/v2"); j.is_object() && j.value("name", "") == "triton")
    return Fingerprint{"triton", "GET /v2: name triton"};
  if (metrics_have(a, "nv_inference_"))
    return Fingerprint{"triton", "GET /metrics: nv_inference_ metrics"};
  if (json j = object(a, "/health");
      j.is_object() && j.contains("status") && j.contains("issues") && j["issues"].is_array())
    return Fingerprint{"tabbyapi", "GET /health: status and issues"};
  if (json j = object(a, "/api/ps"); j.is_object() && j.contains("models") && j["models"].is_array())
    return Fingerprint{"speaches", "GET /api/ps: models"};
  if (ok(a, "/readyz")) {
    json m = object(a, "/v1/models");
    if (m.is_object() && m.contains("data") && m["data"].is_array())
      return Fingerprint{"localai", "GET /readyz and GET /v1/models"};
  }
  return std::nullopt;
}

}  // namespace vramd
