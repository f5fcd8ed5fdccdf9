#include "core/wake.h"

#include <algorithm>

#include <fmt/format.h>

#include "core/eviction.h"

namespace vramd {

std::optional<LoadNeed> load_need(const ServiceStatus& st, const ServiceConfig& cfg,
                                  const std::string& model) {
  if (!model.empty()) {
    auto it = st.load_peaks.find(model);
    if (it != st.load_peaks.end() && it->second > 0)
      return LoadNeed{it->second, fmt::format("the measured peak of {} in its past loads", model)};
  } else if (!st.load_peaks.empty()) {
    auto most = std::max_element(st.load_peaks.begin(), st.load_peaks.end(),
                                 [](const auto& a, const auto& b) { return a.second < b.second; });
    if (most->second > 0) return LoadNeed{most->second, "its largest measured peak in past loads"};
  }
  if (cfg.vram_estimate && *cfg.vram_estimate > 0)
    return LoadNeed{*cfg.vram_estimate, "its vram_estimate"};
  if (st.last_load_bytes && *st.last_load_bytes > 0)
    return LoadNeed{*st.last_load_bytes, "what its last load held"};
  return std::nullopt;
}

bool unloaded_by_vramd(const ServiceStatus& st) {
  if (!st.last_unload || st.bytes >= kWorthUnloading) return false;
  // An unload that freed nothing but was escalated (restart, stop) emptied it all the same.
  const std::string& esc = st.last_unload->escalation;
  return st.last_unload->outcome == UnloadOutcome::freed || esc == "restart" || esc == "stop";
}

const char* to_string(WakeStep s) {
  switch (s) {
    case WakeStep::ready:
      return "ready";
    case WakeStep::start:
      return "start";
    case WakeStep::wait:
      return "wait";
    case WakeStep::wake:
      return "wake";
    case WakeStep::admit:
      return "admit";
  }
  return "?";
}

WakePlan plan_wake(const ServiceStatus& st, const ServiceConfig& cfg, bool can_wake,
                   const std::string& model) {
  WakePlan plan;
  if (st.managed && st.managed->state != ManagedPhase::running) {
    plan.step = WakeStep::start;
    plan.room = load_need(st, cfg, model);
    return plan;
  }
  if (st.state == ServiceState::unloading) {
    plan.step = WakeStep::wait;
    return plan;
  }
  if (can_wake && unloaded_by_vramd(st)) {
    plan.step = WakeStep::wake;
    plan.room = load_need(st, cfg, model);
    return plan;
  }
  // Empty (unloaded by vramd, by its own keep-alive, or never loaded) and asked for a model whose
  // size is known: the load it is about to make waits for room like a lease, so that idle others
  // are evicted for it instead of it failing for memory (Ollama, ComfyUI, a first load).
  if (!model.empty() && st.state == ServiceState::up && st.bytes < kWorthUnloading) {
    if (auto need = load_need(st, cfg, model)) {
      plan.step = WakeStep::admit;
      plan.room = need;
    }
  }
  return plan;
}

}  // namespace vramd
