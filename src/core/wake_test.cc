// The request path's choice (core/wake.h): what a request for a service needs first, and how much
// memory a wake or start is admitted for.
#include "core/wake.h"

#include <gtest/gtest.h>

namespace vramd {
namespace {

ServiceStatus up(std::string name) {
  ServiceStatus st;
  st.name = std::move(name);
  st.state = ServiceState::up;
  return st;
}

UnloadVerdict freed() {
  UnloadVerdict v;
  v.outcome = UnloadOutcome::freed;
  return v;
}

TEST(LoadNeed, PeakOfTheModelThenEstimateThenLastLoadThenNothing) {
  ServiceStatus st = up("vllm");
  ServiceConfig cfg;
  EXPECT_FALSE(load_need(st, cfg, "llama3").has_value());
  st.last_load_bytes = 7 * GiB;
  EXPECT_EQ(load_need(st, cfg, "llama3")->bytes, 7 * GiB);
  EXPECT_EQ(load_need(st, cfg, "llama3")->source, "what its last load held");
  cfg.vram_estimate = 10 * GiB;
  EXPECT_EQ(load_need(st, cfg, "llama3")->bytes, 10 * GiB);
  EXPECT_EQ(load_need(st, cfg, "llama3")->source, "its vram_estimate");
  st.load_peaks["qwen"] = 20 * GiB;
  st.load_peaks["llama3"] = 8 * GiB;
  EXPECT_EQ(load_need(st, cfg, "llama3")->bytes, 8 * GiB);
  EXPECT_EQ(load_need(st, cfg, "llama3")->source, "the measured peak of llama3 in its past loads");
  // A model never measured: the estimate, not another model's peak.
  EXPECT_EQ(load_need(st, cfg, "mistral")->bytes, 10 * GiB);
  // No model named (a start by hand): the largest peak.
  EXPECT_EQ(load_need(st, cfg, "")->bytes, 20 * GiB);
}

TEST(PlanWake, EachStepFromTheServicesState) {
  ServiceConfig cfg;
  ServiceStatus st = up("vllm");
  st.bytes = 8 * GiB;
  EXPECT_EQ(plan_wake(st, cfg, true, "m").step, WakeStep::ready);  // loaded
  st.state = ServiceState::unloading;
  EXPECT_EQ(plan_wake(st, cfg, true, "m").step, WakeStep::wait);
  // Unloaded by vramd: a kind with a wake call is woken, sized by what it took before.
  st.state = ServiceState::up;
  st.bytes = 100 * MiB;
  st.last_unload = freed();
  st.load_peaks["m"] = 8 * GiB;
  WakePlan p = plan_wake(st, cfg, true, "m");
  EXPECT_EQ(p.step, WakeStep::wake);
  ASSERT_TRUE(p.room.has_value());
  EXPECT_EQ(p.room->bytes, 8 * GiB);
  // A kind that loads on the request itself (ComfyUI, Ollama): nothing to call, but the load it
  // is about to make is admitted first for what it was measured to take.
  p = plan_wake(st, cfg, false, "m");
  EXPECT_EQ(p.step, WakeStep::admit);
  EXPECT_EQ(p.room->bytes, 8 * GiB);
  // A request that names no model (a UI's poll) may load nothing: forwarded.
  EXPECT_EQ(plan_wake(st, cfg, false, "").step, WakeStep::ready);
  // Unloaded by someone else, or an unload that freed nothing: nothing to wake; empty, so its
  // load is admitted when its size is known, else forwarded.
  st.last_unload->outcome = UnloadOutcome::ineffective;
  st.last_unload->escalation = "report";
  EXPECT_EQ(plan_wake(st, cfg, true, "m").step, WakeStep::admit);
  EXPECT_EQ(plan_wake(st, cfg, true, "never-measured").step, WakeStep::ready);
  // Found by vramd sim (the agent-runner day): an unload that freed nothing and was escalated
  // left the service empty by vramd's own restart; its next load was forwarded unadmitted and
  // waited for room nobody made (request p95 4,270 s). It is vramd's to wake, like a freed one.
  st.last_unload->escalation = "restart";
  EXPECT_EQ(plan_wake(st, cfg, true, "m").step, WakeStep::wake);
  EXPECT_EQ(plan_wake(st, cfg, true, "m").room->bytes, 8 * GiB);
  st.bytes = 8 * GiB;  // loaded again since: nothing to wake
  EXPECT_EQ(plan_wake(st, cfg, true, "m").step, WakeStep::ready);
  st.bytes = 100 * MiB;
  st.last_unload->escalation = "";
  // A service vramd runs that is down: started, whatever else is true.
  st.managed = ManagedState{};
  st.managed->state = ManagedPhase::stopped;
  EXPECT_EQ(plan_wake(st, cfg, true, "m").step, WakeStep::start);
  EXPECT_EQ(plan_wake(st, cfg, true, "m").room->bytes, 8 * GiB);
  // Running and empty (it loads on its first request): that load is admitted; loaded: ready.
  st.managed->state = ManagedPhase::running;
  EXPECT_EQ(plan_wake(st, cfg, true, "m").step, WakeStep::admit);
  st.bytes = 8 * GiB;
  EXPECT_EQ(plan_wake(st, cfg, true, "m").step, WakeStep::ready);
}

}  // namespace
}  // namespace vramd
