// The request path's choice for the service a request is for (docs/proxy.md): take the request
// now, start the service, or wake it; and how much GPU memory a start or wake is admitted for.
// Learned, not configured: nobody writes a swap matrix. Pure functions of what the core knows.
#pragma once

#include <optional>
#include <string>

#include "core/config.h"
#include "core/service_status.h"

namespace vramd {

// What a load needs, and where that figure comes from (said in events and wait reasons).
struct LoadNeed {
  Bytes bytes = 0;
  std::string source;  // "the measured peak of llama3 in its past loads", "vram_estimate", ...
};

// How much a load of `model` ("" none named) needs, in this order:
//   1. the service's measured peak with that model in its past loads (ServiceStatus::load_peaks;
//      with no model named, the largest peak it has);
//   2. its configured `vram_estimate`;
//   3. what its last load held once it settled;
// nullopt when none is known (the load is not admitted: it takes what it finds).
std::optional<LoadNeed> load_need(const ServiceStatus& st, const ServiceConfig& cfg,
                                  const std::string& model);

// Unloaded by vramd and not loaded since (freed by an unload, or by the restart or stop its
// escalation asked for): its next request needs a wake first, where its kind has one (ComfyUI
// and Ollama load on the request itself).
bool unloaded_by_vramd(const ServiceStatus& st);

enum class WakeStep {
  ready,  // forward the request now (it loads on the request itself, or is loaded)
  start,  // a service vramd runs that is not running: start it (start admission sizes it)
  wait,   // being unloaded: wait for the verdict, then wake
  wake,   // call the adapter's wake, after admitting `room` like a lease when it is known
  admit,  // empty, and it loads on the request itself: admit `room` like a lease, then forward
};
const char* to_string(WakeStep s);

struct WakePlan {
  WakeStep step = WakeStep::ready;
  std::optional<LoadNeed> room;  // wake: the memory to admit first
};

// `can_wake`: the service's adapter has a wake call (vLLM /wake_up, llama.cpp /models/load).
// `model`: the model the request names ("" for a request that names none: a UI's poll, a
// ComfyUI prompt). Only a request for a model is admitted before it loads (`admit`): a request
// that names none may load nothing.
WakePlan plan_wake(const ServiceStatus& st, const ServiceConfig& cfg, bool can_wake,
                   const std::string& model);

}  // namespace vramd
