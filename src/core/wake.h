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

// Asleep: put to sleep by vramd (an unload's verdict, or the restart or stop its escalation
// asked for) and not woken or loaded since, whatever it still holds on the GPU (a sleeping vLLM
// keeps its CUDA context). A service stopped by vramd that runs again is not asleep.
bool sleeping(const ServiceStatus& st);

// The depth of the next unload of `st` (core/sleep.h): its `sleep_level` when set; else the
// shallowest of its kind's sleeps whose host RAM (host_ram_estimate) fits `ram_room` (the host
// RAM a new sleeper may keep: MemAvailable, less what leases were promised, less [host]
// ram_reserve; nullopt when unknown: the deepest sleep then). `may_suspend`
// (ServicePolicy::may_suspend): `suspend` where host RAM takes all it holds (or is unknown).
SleepDepth choose_depth(const ServiceStatus& st, const ServiceConfig& cfg,
                        std::optional<Bytes> ram_room, bool may_suspend);
// What a sleep at `depth` keeps in host RAM: for sleep1, what its last sleep1 was measured to
// keep, else what it holds on the GPU now (its weights are at most that); for suspend, all it
// holds on the GPU; 0 for deeper ones.
Bytes host_ram_estimate(const ServiceStatus& st, SleepDepth depth);
// How long a wake from `depth` is expected to take: learned for this model and depth, else for
// any model at that depth, else the kind's first guess (sleep1_wake; sleep2: reload_cost; stop:
// twice that; suspend: its bytes copied back at 4 GiB/s, a second at least).
Duration expected_wake(const ServiceStatus& st, const std::string& model, SleepDepth depth);
// What an eviction of `st` costs the next request: its expected wake from the depth it would be
// put to sleep at now (`ram_room`, `may_suspend` as for choose_depth).
Duration eviction_cost(const ServiceStatus& st, const ServiceConfig& cfg,
                       std::optional<Bytes> ram_room, bool may_suspend);

enum class WakeStep {
  ready,  // forward the request now (it loads on the request itself, or is loaded)
  start,  // a service vramd runs that is not running: start it (start admission sizes it)
  wait,   // being unloaded: wait for the verdict, then wake
  wake,   // asleep: call the adapter's wake (at suspend: the utility's restore), after admitting
          // `room` like a lease when it is known
  admit,  // empty, and it loads on the request itself: admit `room` like a lease, then forward
};
const char* to_string(WakeStep s);

struct WakePlan {
  WakeStep step = WakeStep::ready;
  std::optional<LoadNeed> room;  // wake: the memory to admit first
  std::optional<SleepDepth> depth;  // wake: the sleep it wakes from
};

// `can_wake`: the service's adapter has a wake call (vLLM /wake_up, llama.cpp /models/load).
// A sleeper whose kind has none loads on the request itself (`admit` when a model is named).
// `model`: the model the request names ("" for a request that names none: a UI's poll, a
// ComfyUI prompt). Only a request for a model is admitted before it loads (`admit`): a request
// that names none may load nothing.
WakePlan plan_wake(const ServiceStatus& st, const ServiceConfig& cfg, bool can_wake,
                   const std::string& model);

}  // namespace vramd
