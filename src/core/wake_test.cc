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

Asleep asleep_at(SleepDepth d, Bytes gpu_kept = 0) {
  Asleep a;
  a.depth = d;
  a.gpu_kept = gpu_kept;
  return a;
}

TEST(PlanWake, EachStepFromTheServicesState) {
  ServiceConfig cfg;
  ServiceStatus st = up("vllm");
  st.bytes = 8 * GiB;
  EXPECT_EQ(plan_wake(st, cfg, true, "m").step, WakeStep::ready);  // loaded
  st.state = ServiceState::unloading;
  EXPECT_EQ(plan_wake(st, cfg, true, "m").step, WakeStep::wait);
  // Asleep (put to sleep by vramd): a kind with a wake call is woken from its depth, sized by
  // what it took before, whatever it still holds: a sleeping vLLM keeps its CUDA context, and
  // 500 MiB is over any "empty" threshold.
  st.state = ServiceState::up;
  st.bytes = 500 * MiB;
  st.asleep = asleep_at(SleepDepth::sleep1, 500 * MiB);
  st.load_peaks["m"] = 8 * GiB;
  WakePlan p = plan_wake(st, cfg, true, "m");
  EXPECT_EQ(p.step, WakeStep::wake);
  EXPECT_EQ(p.depth, SleepDepth::sleep1);
  ASSERT_TRUE(p.room.has_value());
  EXPECT_EQ(p.room->bytes, 8 * GiB);
  // A request that names no model is woken all the same (a UI's poll of a sleeper).
  EXPECT_EQ(plan_wake(st, cfg, true, "").step, WakeStep::wake);
  // A kind that loads on the request itself (ComfyUI, Ollama): nothing to call, but the load it
  // is about to make is admitted first for what it was measured to take.
  p = plan_wake(st, cfg, false, "m");
  EXPECT_EQ(p.step, WakeStep::admit);
  EXPECT_EQ(p.room->bytes, 8 * GiB);
  // A request that names no model (a UI's poll) may load nothing: forwarded.
  EXPECT_EQ(plan_wake(st, cfg, false, "").step, WakeStep::ready);
  // Not asleep (unloaded by someone else, or an unload that freed nothing) but empty: nothing to
  // wake; its load is admitted when its size is known, else forwarded.
  st.asleep.reset();
  st.bytes = 100 * MiB;
  EXPECT_EQ(plan_wake(st, cfg, true, "m").step, WakeStep::admit);
  EXPECT_EQ(plan_wake(st, cfg, true, "never-measured").step, WakeStep::ready);
  // Holding a real amount and not asleep: ready.
  st.bytes = 600 * MiB;
  EXPECT_EQ(plan_wake(st, cfg, true, "m").step, WakeStep::ready);
  // A service vramd runs that is down: started, whatever else is true.
  st.managed = ManagedState{};
  st.managed->state = ManagedPhase::stopped;
  st.asleep = asleep_at(SleepDepth::stop);
  p = plan_wake(st, cfg, true, "m");
  EXPECT_EQ(p.step, WakeStep::start);
  EXPECT_EQ(p.room->bytes, 8 * GiB);
  EXPECT_EQ(p.depth, SleepDepth::stop);
  // Stopped by vramd, then started again: awake; empty, so its first load is admitted.
  st.managed->state = ManagedPhase::running;
  st.managed->started_at = st.asleep->since + std::chrono::seconds(5);
  st.bytes = 100 * MiB;
  EXPECT_FALSE(sleeping(st));
  EXPECT_EQ(plan_wake(st, cfg, true, "m").step, WakeStep::admit);
  st.bytes = 8 * GiB;
  EXPECT_EQ(plan_wake(st, cfg, true, "m").step, WakeStep::ready);
}

TEST(ChooseDepth, TheShallowestWhoseHostRamFits) {
  ServiceConfig cfg;
  cfg.kind = "vllm";
  ServiceStatus st = up("vllm");
  st.kind = "vllm";
  st.bytes = 14 * GiB;
  // Its weights are at most what it holds on the GPU until a sleep1 was measured.
  EXPECT_EQ(host_ram_estimate(st, SleepDepth::sleep1), 14 * GiB);
  EXPECT_EQ(host_ram_estimate(st, SleepDepth::sleep2), 0u);
  EXPECT_EQ(choose_depth(st, cfg, 20 * GiB, false), SleepDepth::sleep1);   // RAM fits: level 1
  EXPECT_EQ(choose_depth(st, cfg, 10 * GiB, false), SleepDepth::sleep2);   // RAM short: level 2
  EXPECT_EQ(choose_depth(st, cfg, std::nullopt, false), SleepDepth::sleep2);  // unknown: keep none
  st.sleep1_host_ram = 9 * GiB;  // measured at its last sleep1
  EXPECT_EQ(choose_depth(st, cfg, 10 * GiB, false), SleepDepth::sleep1);
  // sleep_level fixes it.
  cfg.sleep_level = 2;
  EXPECT_EQ(choose_depth(st, cfg, 100 * GiB, false), SleepDepth::sleep2);
  cfg.sleep_level = 1;
  EXPECT_EQ(choose_depth(st, cfg, 0, false), SleepDepth::sleep1);
  // One sleep only (Ollama: the model file stays in the page cache, not the process's RAM).
  ServiceConfig ollama;
  ollama.kind = "ollama";
  EXPECT_EQ(choose_depth(st, ollama, 0, false), SleepDepth::sleep2);
  // No unload call at all: only a stop frees it.
  ServiceConfig process;
  process.kind = "process";
  EXPECT_EQ(choose_depth(st, process, 100 * GiB, false), SleepDepth::stop);
  // ... unless cuda-checkpoint may suspend it (ServicePolicy::may_suspend) and host RAM takes
  // all it holds: its bytes go to host RAM, and its wake is a restore.
  EXPECT_EQ(choose_depth(st, process, 14 * GiB, true), SleepDepth::suspend);
  EXPECT_EQ(choose_depth(st, process, std::nullopt, true), SleepDepth::suspend);
  EXPECT_EQ(choose_depth(st, process, 13 * GiB, true), SleepDepth::stop);
  EXPECT_EQ(host_ram_estimate(st, SleepDepth::suspend), 14 * GiB);
}

TEST(ExpectedWake, LearnedForTheModelThenTheDepthThenTheKind) {
  ServiceStatus st = up("vllm");
  st.kind = "vllm";
  using std::chrono::seconds;
  EXPECT_EQ(expected_wake(st, "m", SleepDepth::sleep1), seconds(3));   // vLLM's first guess
  EXPECT_EQ(expected_wake(st, "m", SleepDepth::sleep2), seconds(60));  // its reload_cost
  EXPECT_EQ(expected_wake(st, "m", SleepDepth::stop), seconds(120));
  st.wake_times[{"other", SleepDepth::sleep1}] = seconds(2);
  EXPECT_EQ(expected_wake(st, "m", SleepDepth::sleep1), seconds(2));  // any model at the depth
  st.wake_times[{"m", SleepDepth::sleep1}] = seconds(1);
  EXPECT_EQ(expected_wake(st, "m", SleepDepth::sleep1), seconds(1));
  // What evicting it costs: the wake from the depth it would sleep at now.
  ServiceConfig cfg;
  cfg.kind = "vllm";
  st.bytes = 14 * GiB;
  st.models = {"m"};
  EXPECT_EQ(eviction_cost(st, cfg, 64 * GiB, false), seconds(1));   // room for level 1
  EXPECT_EQ(eviction_cost(st, cfg, 1 * GiB, false), seconds(60));   // level 2: a reload
  // Suspended: its bytes copied back at 4 GiB/s until a restore was timed.
  EXPECT_EQ(expected_wake(st, "m", SleepDepth::suspend), std::chrono::milliseconds(3500));
  ServiceConfig process;
  process.kind = "process";
  EXPECT_EQ(eviction_cost(st, process, 64 * GiB, true), std::chrono::milliseconds(3500));
  st.wake_times[{"m", SleepDepth::suspend}] = seconds(2);
  EXPECT_EQ(eviction_cost(st, process, 64 * GiB, true), seconds(2));
}

}  // namespace
}  // namespace vramd
