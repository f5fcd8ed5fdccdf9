// Every adapter's response parser (src/services/parsers.h) and discover's fingerprints over any JSON: each gives a value or
// an error, never a throw or a crash. The input's first line is also an RFC 6901 pointer for
// generic_http's busy_at_pointer, over the JSON after it.
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "services/fingerprint.h"
#include "services/parsers.h"

namespace {

void all_parsers(const nlohmann::json& j) {
  using namespace vramd;
  (void)parse_comfyui_queue(j);
  (void)parse_comfyui_system_stats(j);
  (void)parse_ollama_ps(j);
  (void)parse_a1111_progress(j);
  (void)parse_a1111_memory(j);
  (void)parse_textgen_model_info(j);
  (void)parse_tabby_model(j);
  (void)parse_tabby_health(j);
  (void)parse_llamacpp_slots(j);
  (void)parse_llamacpp_models(j);
  (void)parse_triton_index(j);
  (void)parse_localai_monitor(j);
  (void)parse_speaches_ps(j);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  (void)vramd::llamacpp_error_message(text);
  // `vramd discover`: the same answer on every fingerprint path.
  std::map<std::string, vramd::ProbeAnswer> answers;
  for (const auto& path : vramd::fingerprint_paths()) answers[path] = {200, text};
  (void)vramd::identify_server(answers);
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (!j.is_discarded()) all_parsers(j);
  size_t nl = text.find('\n');
  if (nl != std::string::npos) {
    nlohmann::json rest = nlohmann::json::parse(text.substr(nl + 1), nullptr, false);
    if (!rest.is_discarded()) {
      all_parsers(rest);
      (void)vramd::busy_at_pointer(rest, text.substr(0, nl));
    }
  }
  return 0;
}
