#include "core/service_kinds.h"

namespace vramd {

using std::chrono::seconds;

const std::vector<ServiceKind>& service_kinds() {
  // unload_timeout: ComfyUI applies /free only after the running prompt, hence its 30 s.
  // keep_alive_timeout: each server's HTTP stack (transport.md section 1): uvicorn's 5 s for the
  // Python servers, cpp-httplib's 5 s, aiohttp's 3630 s for ComfyUI, none for Go's (Ollama);
  // 5 s where unknown (an idle connection closed early costs one connect).
  // sleep1_wake: vLLM's own figures (level 1 wake 0.26 s to 6 s by model size, A100) and a
  // PCIe copy of a large checkpoint for the image servers (gpu-and-host.md "Reload floors").
  using D = SleepDepth;
  static const std::vector<ServiceKind> kinds = {
      {.name = "comfyui", .unload_timeout = seconds(30), .reload_cost = seconds(20),
       .own_keys = {"sleep_level"}, .sleeps = {D::sleep1, D::sleep2}, .sleep1_wake = seconds(5),
       .keep_alive_timeout = seconds(3630)},
      {.name = "ollama", .unload_timeout = seconds(20), .reload_cost = seconds(10),
       .self_report_covers_process = true, .has_wake = true, .keep_alive_timeout = seconds(0),
       .ollama_api = true},
      {.name = "vllm", .unload_timeout = seconds(20), .reload_cost = seconds(60), .has_wake = true,
       .sleep_levels = true, .own_keys = {"sleep_level"}, .sleeps = {D::sleep1, D::sleep2}, .sleep1_wake = seconds(3)},
      {.name = "sglang", .unload_timeout = seconds(20), .reload_cost = seconds(60),
       .has_wake = true, .sleeps = {D::sleep1}, .sleep1_wake = seconds(3)},
      {.name = "a1111", .unload_timeout = seconds(20), .reload_cost = seconds(20),
       .has_wake = true, .sleeps = {D::sleep1}, .sleep1_wake = seconds(5),
       .keep_alive_timeout = seconds(30)},
      {.name = "forge", .unload_timeout = seconds(20), .reload_cost = seconds(20),
       .has_wake = true, .sleeps = {D::sleep1}, .sleep1_wake = seconds(5),
       .keep_alive_timeout = seconds(30)},
      {.name = "textgen", .unload_timeout = seconds(20), .reload_cost = seconds(10),
       .has_wake = true},
      {.name = "tabbyapi", .unload_timeout = seconds(20), .reload_cost = seconds(10),
       .has_wake = true},
      {.name = "llamacpp", .unload_timeout = seconds(20), .reload_cost = seconds(10),
       .has_wake = true, .unload_needs = UnloadNeeds::router, .own_keys = {"router"},
       .fixed_http_threads = true},
      {.name = "triton", .unload_timeout = seconds(20), .reload_cost = seconds(60),
       .has_wake = true},
      {.name = "localai", .unload_timeout = seconds(20), .reload_cost = seconds(10),
       .self_report_covers_process = true, .unload_needs = UnloadNeeds::models,
       .keep_alive_timeout = seconds(120)},
      {.name = "speaches", .unload_timeout = seconds(20), .reload_cost = seconds(5),
       .has_wake = true},
      {.name = "generic_http",
       .unload_timeout = seconds(20),
       .reload_cost = seconds(30),
       .unload_needs = UnloadNeeds::unload_url,
       .own_keys = {"busy_url", "busy_json_pointer", "busy_metric", "unload_method",
                    "unload_url", "unload_body", "health_url"}},
      // A process with no API: stopping it is the only unload, and a restart the only reload.
      {.name = "process", .unload_timeout = seconds(20), .reload_cost = seconds(30),
       .has_unload = false, .needs_url = false, .sleeps = {}},
  };
  return kinds;
}

const ServiceKind* find_service_kind(std::string_view name) {
  for (const auto& k : service_kinds())
    if (k.name == name) return &k;
  return nullptr;
}

}  // namespace vramd
