// Which server answers on a port: each kind's fingerprint, read from answers to GET requests
// (`vramd discover`). Pure: the caller makes the requests (GET only, short timeouts) and hands
// in what came back; nothing here does I/O.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace vramd {

struct ProbeAnswer {
  unsigned status = 0;  // 0: no answer (refused, timeout, not HTTP)
  std::string body;
};

// The paths to GET on a port, in the order their answers are looked at.
const std::vector<std::string>& fingerprint_paths();

struct Fingerprint {
  std::string kind;      // a config kind: "comfyui", "ollama", "vllm", ...
  std::string evidence;  // what told it: "GET /system_stats: system and devices"
};

// The kind whose fingerprint the answers (path -> answer) match, first match in the order of
// the kinds below; nullopt when none does (not a model server vramd knows, or not HTTP).
//   comfyui    GET /system_stats        JSON with "system" and "devices"
//   ollama     GET /                    "Ollama is running"
//   a1111      GET /sdapi/v1/options    JSON with "sd_model_checkpoint" (Forge: the same API)
//   textgen    GET /v1/internal/model/info  JSON with "model_name"
//   sglang     GET /get_model_info      JSON with "model_path"; or vllm-less `sglang:` metrics
//   vllm       GET /metrics             `vllm:` metric families
//   llamacpp   GET /metrics `llamacpp:`, or GET /slots (a list of slots with "id"), both off
//              by default; or GET /props with default_generation_settings, total_slots and
//              build_info, or GET /v1/models owned_by "llamacpp" (both always answer); or, while
//              it loads, GET /health 503 {"error":{"message":"Loading model","type":
//              "unavailable_error"}}
//   triton     GET /v2                  JSON "name": "triton"; or `nv_inference_` metrics
//   tabbyapi   GET /health              JSON "status" with an "issues" list
//   speaches   GET /api/ps              JSON "models" list (Ollama answered "/" first)
//   localai    GET /readyz 200 and GET /v1/models with `owned_by` (after the others)
std::optional<Fingerprint> identify_server(const std::map<std::string, ProbeAnswer>& answers);

}  // namespace vramd
