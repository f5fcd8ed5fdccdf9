#include "core/service_kinds.h"

namespace vramd {

using std::chrono::seconds;

const std::vector<ServiceKind>& service_kinds() {
  // unload_timeout: ComfyUI applies /free only after the running prompt, hence its 30 s.
  static const std::vector<ServiceKind> kinds = {
      {"comfyui", seconds(30), seconds(20)},
      {"ollama", seconds(20), seconds(10), /*self_report_covers_process=*/true, true, true},
      {"vllm", seconds(20), seconds(60), false, true, true, true, {"sleep_level"}},
      {"sglang", seconds(20), seconds(60), false, true, true},
      {"a1111", seconds(20), seconds(20), false, true, true},
      {"forge", seconds(20), seconds(20), false, true, true},
      {"textgen", seconds(20), seconds(10), false, true, true},
      {"tabbyapi", seconds(20), seconds(10), false, true, true},
      {"llamacpp", seconds(20), seconds(10), false, true, true, true, {"router"}},
      {"triton", seconds(20), seconds(60), false, true, true},
      {"localai", seconds(20), seconds(10), /*self_report_covers_process=*/true},
      {"speaches", seconds(20), seconds(5), false, true, true},
      {"generic_http",
       seconds(20),
       seconds(30),
       false,
       true,
       false,
       true,
       {"busy_url", "busy_json_pointer", "busy_metric", "unload_method", "unload_url",
        "unload_body", "health_url"}},
      // A process with no API: stopping it is the only unload, and a restart the only reload.
      {"process", seconds(20), seconds(30), false, /*has_unload=*/false, false,
       /*needs_url=*/false},
  };
  return kinds;
}

const ServiceKind* find_service_kind(std::string_view name) {
  for (const auto& k : service_kinds())
    if (k.name == name) return &k;
  return nullptr;
}

}  // namespace vramd
