// What vramd learns about a configured service from its own API (DESIGN.md "Service"): the
// adapter's probe and unload results as plain values, so the pure core can decide on them.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/durations.h"
#include "core/units.h"

namespace vramd {

// One probe of a service's API (busy check, loaded models, its own memory figures).
struct ServiceProbe {
  bool reachable = false;
  std::string error;            // why not reachable, or what was wrong with the answer
  std::optional<bool> busy;     // nullopt: the server has no busy call, or it failed
  std::optional<int> queue_depth;
  std::vector<std::string> models;            // models loaded now (names as the server gives)
  // Models it loads on a request (Ollama's /api/tags) or serves whenever it runs (a plain
  // llama-server's, vLLM's): routed while it is unloaded or stopped too; nothing else reads them.
  std::vector<std::string> installed;
  std::optional<Bytes> self_reported_vram;    // the server's own figure: evidence, never primary
  std::optional<Bytes> self_reported_ram;
  // The server says it sleeps (vLLM's GET /is_sleeping): nullopt where it has no such call.
  std::optional<bool> asleep;
  // Its adapter has a call that loads it again (vLLM /wake_up, llama.cpp's router /models/load):
  // a fact of the adapter, which the shell fills in (a prewarm wakes only such a service).
  bool can_wake = false;
  // What it runs: its version and argument list, where the server says (ComfyUI's
  // /system_stats comfyui_version and argv, vLLM's /version, Ollama's /api/version, llama.cpp's
  // /props build_info); "" and empty where it does not.
  std::string version;
  std::vector<std::string> args;
  // How many requests it serves at once, where it says (llama.cpp's /props total_slots): the
  // proxy sizes its connections to it from this (docs/proxy.md, "Upstream connections").
  std::optional<int> slots;
  // Work it finished, as it tells (ComfyUI's /history): prompts with their times; the core adds
  // the service, its version, arguments and GPU (core/durations.h).
  std::vector<DurationRecord> finished;
};

// The result of asking a service to release GPU memory (or to wake). It says only what the
// server answered; whether memory came back is judged from the GPU's numbers.
struct UnloadCall {
  enum class Result {
    requested,      // the server accepted the call (2xx)
    not_supported,  // this server has no unload API: only stopping its process frees memory
    failed,         // refused, error status, timeout, garbage
  };
  Result result = Result::failed;
  std::string message;  // "POST /free → 200", "connect: Connection refused", ...
};
const char* to_string(UnloadCall::Result r);

struct HealthCheck {
  bool healthy = false;
  std::string message;  // "GET /health → 503 Loading model"
};

}  // namespace vramd
