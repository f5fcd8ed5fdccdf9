#include "core/wake.h"

#include <algorithm>

#include <fmt/format.h>

#include "core/eviction.h"
#include "core/service_kinds.h"

namespace vramd {

std::optional<LoadNeed> load_need(const ServiceStatus& st, const ServiceConfig& cfg,
                                  const std::string& model) {
  // Suspended: the restore brings back exactly what left the GPU.
  if (st.asleep && st.asleep->depth == SleepDepth::suspend && st.asleep->host_ram > 0)
    return LoadNeed{st.asleep->host_ram, "what it held when it was suspended"};
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

bool sleeping(const ServiceStatus& st) {
  if (!st.asleep) return false;
  // Stopped by vramd, then started again (by a request, by hand, by its engine): awake.
  if (st.asleep->depth == SleepDepth::stop && st.managed &&
      st.managed->state == ManagedPhase::running && st.managed->started_at &&
      *st.managed->started_at > st.asleep->since)
    return false;
  return true;
}

SleepDepth choose_depth(const ServiceStatus& st, const ServiceConfig& cfg,
                        std::optional<Bytes> ram_room, bool may_suspend) {
  if (may_suspend && (!ram_room || st.bytes <= *ram_room)) return SleepDepth::suspend;
  const ServiceKind* kind = find_service_kind(cfg.kind);
  if (!kind || kind->sleeps.empty()) return SleepDepth::stop;
  const std::vector<SleepDepth>& sleeps = kind->sleeps;
  auto offered = [&](SleepDepth d) {
    return std::find(sleeps.begin(), sleeps.end(), d) != sleeps.end();
  };
  if (cfg.sleep_level) {
    SleepDepth want = *cfg.sleep_level == 1 ? SleepDepth::sleep1 : SleepDepth::sleep2;
    if (offered(want)) return want;
  }
  for (SleepDepth d : sleeps) {
    Bytes keeps = host_ram_estimate(st, d);
    if (keeps == 0 || (ram_room && keeps <= *ram_room)) return d;
  }
  return sleeps.back();
}

Bytes host_ram_estimate(const ServiceStatus& st, SleepDepth depth) {
  if (depth == SleepDepth::suspend) return st.bytes;
  if (depth != SleepDepth::sleep1) return 0;
  if (st.sleep1_host_ram) return *st.sleep1_host_ram;
  return st.bytes;
}

Duration expected_wake(const ServiceStatus& st, const std::string& model, SleepDepth depth) {
  if (auto it = st.wake_times.find({model, depth}); it != st.wake_times.end()) return it->second;
  for (const auto& [key, took] : st.wake_times)
    if (key.second == depth) return took;
  const ServiceKind* kind = find_service_kind(st.kind);
  Duration reload = st.reload_measured ? st.reload_cost
                    : kind             ? kind->reload_cost
                                       : Duration(std::chrono::seconds(30));
  switch (depth) {
    case SleepDepth::sleep1:
      return kind && kind->sleep1_wake.count() > 0 ? kind->sleep1_wake : reload;
    case SleepDepth::sleep2:
      return reload;
    case SleepDepth::stop:
      return 2 * reload;
    case SleepDepth::suspend: {
      // Until a restore has been timed: its bytes back at a PCIe copy's pace.
      Bytes b = st.asleep && st.asleep->depth == SleepDepth::suspend ? st.asleep->host_ram
                                                                     : st.bytes;
      auto copy = std::chrono::duration<double>(static_cast<double>(b) / (4.0 * GiB));
      return std::max<Duration>(std::chrono::seconds(1),
                                std::chrono::duration_cast<Duration>(copy));
    }
  }
  return reload;
}

Duration eviction_cost(const ServiceStatus& st, const ServiceConfig& cfg,
                       std::optional<Bytes> ram_room, bool may_suspend) {
  std::string model = st.models.size() == 1 ? st.models[0] : std::string();
  return expected_wake(st, model, choose_depth(st, cfg, ram_room, may_suspend));
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
  // First: an unload that is a stop (a server without an unload call) has its process stopping;
  // it is started again once its verdict is in, not left waiting on a stop nobody restarts.
  if (st.state == ServiceState::unloading) {
    plan.step = WakeStep::wait;
    return plan;
  }
  if (st.managed && st.managed->state != ManagedPhase::running) {
    plan.step = WakeStep::start;
    plan.room = load_need(st, cfg, model);
    if (st.asleep) plan.depth = SleepDepth::stop;
    return plan;
  }
  bool asleep = sleeping(st);
  // Suspended: the restore is its wake, whatever its server offers.
  if (asleep && st.asleep->depth == SleepDepth::suspend) can_wake = true;
  if (can_wake && asleep && st.asleep->depth != SleepDepth::stop) {
    plan.step = WakeStep::wake;
    plan.room = load_need(st, cfg, model);
    plan.depth = st.asleep->depth;
    return plan;
  }
  // Asleep without a wake call, or empty (never loaded, or unloaded by its own keep-alive), and
  // asked for a model whose size is known: the load it is about to make waits for room like a
  // lease, so that idle others are evicted for it instead of it failing for memory (Ollama,
  // ComfyUI, a first load).
  bool empty = asleep || st.bytes < kWorthUnloading;
  if (!model.empty() && st.state == ServiceState::up && empty) {
    if (auto need = load_need(st, cfg, model)) {
      plan.step = WakeStep::admit;
      plan.room = need;
      if (asleep) plan.depth = st.asleep->depth;
    }
  }
  return plan;
}

}  // namespace vramd
