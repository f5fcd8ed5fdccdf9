// The answers of each server's API read into plain values: pure functions, unit-tested against
// fixtures of the real shapes (tests/fixtures/services/). Each returns an error naming what was
// missing when the JSON has the wrong shape.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/result.h"
#include "core/units.h"
#include "services/prometheus.h"

namespace vramd {

// ComfyUI GET /queue: {"queue_running":[...],"queue_pending":[...]}.
struct ComfyQueue {
  int running = 0;
  int pending = 0;
};
Result<ComfyQueue> parse_comfyui_queue(const nlohmann::json& j);

// ComfyUI GET /system_stats (old, middle and new formats). devices[0].torch_vram_total is only
// PyTorch's caching allocator (near 0 under cudaMallocAsync): evidence, never ComfyUI's share.
struct ComfyStats {
  std::optional<Bytes> torch_vram_total;
  std::optional<Bytes> ram_total;  // absent in the 2023 format
  std::string version;             // "" in the 2023 format
};
Result<ComfyStats> parse_comfyui_system_stats(const nlohmann::json& j);

// Ollama GET /api/ps.
struct OllamaModel {
  std::string name;
  Bytes size = 0;
  Bytes size_vram = 0;
  std::optional<TimePoint> expires_at;  // offsets and nanoseconds allowed
};
Result<std::vector<OllamaModel>> parse_ollama_ps(const nlohmann::json& j);

// Prometheus metrics: the sum of `names` over all label sets; nullopt when none has a sample.
std::optional<double> sum_metrics(const PromExposition& e, const std::vector<std::string>& names);
// Busy from "running + waiting" style gauges: nullopt when no sample of any of them.
std::optional<bool> busy_from_metrics(const PromExposition& e,
                                      const std::vector<std::string>& names);

// A1111/Forge GET /sdapi/v1/progress: busy iff state.job_count != 0 (-1 during a job).
Result<bool> parse_a1111_progress(const nlohmann::json& j);
// A1111 GET /sdapi/v1/memory: cuda.reserved.current (PyTorch's reserved bytes) and ram.used.
struct A1111Memory {
  std::optional<Bytes> cuda_reserved;
  std::optional<Bytes> ram_used;
};
Result<A1111Memory> parse_a1111_memory(const nlohmann::json& j);

// text-generation-webui GET /v1/internal/model/info: model_name, nullopt when "None".
Result<std::optional<std::string>> parse_textgen_model_info(const nlohmann::json& j);

// TabbyAPI GET /v1/model: {"id": name, ...} (an OpenAI model card).
Result<std::optional<std::string>> parse_tabby_model(const nlohmann::json& j);
// TabbyAPI GET /health: {"status":"healthy"|"unhealthy","issues":[...]}.
Result<std::pair<bool, std::string>> parse_tabby_health(const nlohmann::json& j);

// llama.cpp GET /slots: busy iff any slot is_processing (older builds: state != 0).
Result<bool> parse_llamacpp_slots(const nlohmann::json& j);
// llama.cpp router GET /models: {"data":[{"id":...,"status":{"value":"loaded"}}]} or a list.
// The ids of loaded models.
Result<std::vector<std::string>> parse_llamacpp_models(const nlohmann::json& j);
// llama.cpp error body {"error":{"message":...}}: the message, or "".
std::string llamacpp_error_message(const std::string& body);

// Triton POST /v2/repository/index: [{"name":..,"version":..,"state":"READY"}]: ready names.
Result<std::vector<std::string>> parse_triton_index(const nlohmann::json& j);

// LocalAI GET /backend/monitor: {"state": 0|1|2|-1, "memory": {"total":N, "breakdown":{}}}.
struct LocalAiMonitor {
  int state = 0;  // 1 = busy
  std::optional<Bytes> memory_total;
};
Result<LocalAiMonitor> parse_localai_monitor(const nlohmann::json& j);

// speaches GET /api/ps: {"models":["id", ...]}.
Result<std::vector<std::string>> parse_speaches_ps(const nlohmann::json& j);

// generic_http: the value at an RFC 6901 pointer, as busy: true, a number > 0, a non-empty
// string/array/object = busy; false, 0, null, "" = idle. Error when the pointer is not there.
Result<bool> busy_at_pointer(const nlohmann::json& j, const std::string& pointer);

}  // namespace vramd
