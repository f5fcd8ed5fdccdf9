// What ComfyUI's GET /history says about finished prompts, and the versions servers report:
// pure functions over the answers' JSON, for the durations history (core/durations.h). None
// throws, whatever the JSON (tests/fuzz/comfyui_history_fuzz.cc).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/durations.h"
#include "core/result.h"
#include "core/units.h"

namespace vramd {

// One finished prompt of ComfyUI's history.
struct ComfyPromptRun {
  std::string prompt_id;
  std::optional<TimePoint> queued_at;   // extra_data.create_time (ComfyUI 0.3.4x and later)
  std::optional<TimePoint> started_at;  // the first execution_start's timestamp
  std::optional<TimePoint> ended_at;    // the end message's timestamp: always set when returned
  std::optional<PromptOutcome> outcome;  // which end message; none: not finished
  int cached_nodes = 0;                 // the nodes execution_cached lists
  std::string workflow;                 // comfyui_workflow_fingerprint() of the graph
  std::string model;                    // comfyui_main_model() of the graph
};

// GET /history (or /history/{id}, /history?max_items=N): {prompt_id: {"prompt": [number, id,
// graph, extra_data, outputs], "outputs": {...}, "status": {"status_str", "completed",
// "messages": [[event, {..., "timestamp": ms}], ...]}}}. Only prompts whose end message
// (execution_success, execution_error, execution_interrupted) carries a timestamp are returned,
// oldest end first; an entry with a missing or garbled part (no graph, no status, ComfyUI before
// message timestamps) is left out. Error only when the answer is not an object.
Result<std::vector<ComfyPromptRun>> parse_comfyui_history(const nlohmann::json& j);

// 16 lowercase hex digits (FNV-1a 64) naming a workflow's shape, so that runs of one workflow
// compare across seeds, prompt texts and model files; "" when the graph is not an object. Hashed:
// the nodes in id order (numeric ids by value), each node's id, class_type and inputs in key
// order: links ([node_id, slot]), numbers and booleans as they are, except these values, of
// which only the input's name counts:
//  - seeds: inputs named "seed" or "noise_seed";
//  - text: strings of inputs named text, prompt, text_g, text_l, negative or positive, and any
//    string with a newline or over 64 characters;
//  - files: strings ending in a model, image, video or audio extension (.safetensors, .ckpt,
//    .pt, .pth, .bin, .gguf, .sft, .png, .jpg, .jpeg, .webp, .mp4, .wav, ...), strings of inputs
//    named image, video or audio, and strings of inputs named *_name that look like a file (an
//    extension or a '/'): ckpt_name "sdxl.safetensors" goes, sampler_name "euler" stays.
// Other short strings (sampler_name, scheduler) count. Same workflow with another seed, prompt
// or checkpoint: same fingerprint; other steps, cfg or nodes: another.
std::string comfyui_workflow_fingerprint(const nlohmann::json& prompt_graph);

// The main checkpoint or UNet: the ckpt_name or unet_name input (a string) of the node with the
// lowest id that has one (CheckpointLoaderSimple, UNETLoader, UnetLoaderGGUF, ...); "" when none.
std::string comfyui_main_model(const nlohmann::json& prompt_graph);

// vLLM GET /version: {"version": "0.8.5"}; "" when absent.
std::string parse_vllm_version(const nlohmann::json& j);
// Ollama GET /api/version: {"version": "0.6.8"}; "" when absent.
std::string parse_ollama_version(const nlohmann::json& j);
// llama.cpp GET /props: "build_info", "b<build number>-<commit>" ("b5474-e5c834f7"); "" when
// absent.
std::string parse_llamacpp_build_info(const nlohmann::json& props);
// ComfyUI GET /system_stats: system.argv, its strings in order; empty when absent.
std::vector<std::string> parse_comfyui_argv(const nlohmann::json& system_stats);

}  // namespace vramd
