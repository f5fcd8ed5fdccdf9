// ComfyUI's GET /history and the servers' version answers (src/services/comfyui_history.h) over
// any JSON: a value or an error, never a throw or a crash. Every returned run has an end time, an
// outcome of the three, and a 16-digit workflow fingerprint; and the fingerprint and main model
// of the input itself, as if it were a prompt graph.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "services/comfyui_history.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded()) return 0;
  vramd::Result<std::vector<vramd::ComfyPromptRun>> runs = vramd::parse_comfyui_history(j);
  if (runs.ok() != j.is_object()) std::abort();
  if (runs) {
    for (const vramd::ComfyPromptRun& r : *runs) {
      if (!r.ended_at || r.workflow.size() != 16 || r.cached_nodes < 0) std::abort();
      if (!r.outcome) std::abort();
    }
  }
  std::string fp = vramd::comfyui_workflow_fingerprint(j);
  if (fp.size() != (j.is_object() ? 16u : 0u)) std::abort();
  (void)vramd::comfyui_main_model(j);
  (void)vramd::parse_vllm_version(j);
  (void)vramd::parse_ollama_version(j);
  (void)vramd::parse_llamacpp_build_info(j);
  (void)vramd::parse_comfyui_argv(j);
  return 0;
}
