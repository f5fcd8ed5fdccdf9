// The eviction policy: which services may be evicted, how one in the way reads, and the cheapest
// set that frees the shortfall.
#include "core/eviction.h"

#include <gtest/gtest.h>

namespace vramd {
namespace {

using namespace std::chrono_literals;

TEST(ChooseEviction, ExactCheapestSetLruOnTiesGreedyBeyondTwelve) {
  MonoTime t0{};
  std::vector<EvictionCandidate> c = {
      {"a", 8 * GiB, 60s, t0 + 1s}, {"b", 6 * GiB, 20s, t0 + 2s}, {"c", 3 * GiB, 10s, t0 + 3s}};
  auto pick = choose_eviction(c, 6 * GiB);
  ASSERT_TRUE(pick);
  EXPECT_EQ(*pick, (std::vector<size_t>{1}));  // b alone: 20 s
  pick = choose_eviction(c, 9 * GiB);
  EXPECT_EQ(*pick, (std::vector<size_t>{1, 2}));  // b + c: 30 s < a + anything
  EXPECT_FALSE(choose_eviction(c, 18 * GiB));
  EXPECT_EQ(choose_eviction(c, 0)->size(), 0u);
  // Ties on cost: the least recently used goes.
  std::vector<EvictionCandidate> tie = {{"new", 4 * GiB, 10s, t0 + 9s},
                                        {"old", 4 * GiB, 10s, t0 + 1s}};
  EXPECT_EQ(*choose_eviction(tie, 3 * GiB), (std::vector<size_t>{1}));
  // 40 candidates: greedy still covers the shortfall without useless members.
  std::vector<EvictionCandidate> many;
  for (int i = 0; i < 40; ++i)
    many.push_back(
        {"s" + std::to_string(i), Bytes(1 + i % 4) * GiB, std::chrono::seconds(5 + i % 7), t0});
  auto big = choose_eviction(many, 20 * GiB);
  ASSERT_TRUE(big);
  Bytes got = 0;
  for (size_t i : *big) got += many[i].bytes;
  EXPECT_GE(got, 20 * GiB);
  for (size_t i : *big) EXPECT_LT(got - many[i].bytes, 20 * GiB);
}

ServiceStatus idle_service(MonoTime idle_since_t) {
  ServiceStatus st;
  st.name = "comfy";
  st.state = ServiceState::up;
  st.busy = false;
  st.last_activity = idle_since_t;
  return st;
}

TEST(Evictable, UpIdleLongEnoughUnpinnedAndOutOfBackoffOnly) {
  MonoTime t0{Duration(1'000'000)};
  ServiceConfig cfg;
  cfg.name = "comfy";
  cfg.min_idle = 30s;
  ServiceStatus st = idle_service(t0);
  EXPECT_FALSE(evictable(st, cfg, t0 + 29s, true));  // idle less than min_idle
  EXPECT_TRUE(evictable(st, cfg, t0 + 30s, true));
  st.busy = true;
  EXPECT_FALSE(evictable(st, cfg, t0 + 60s, true));
  st.busy = std::nullopt;  // no busy call: idle since its last activity
  EXPECT_TRUE(evictable(st, cfg, t0 + 60s, true));
  st.state = ServiceState::unreachable;
  EXPECT_FALSE(evictable(st, cfg, t0 + 60s, true));  // cannot tell if idle
  st.state = ServiceState::up;
  st.backoff_until = t0 + 90s;
  EXPECT_FALSE(evictable(st, cfg, t0 + 60s, true));
  EXPECT_TRUE(evictable(st, cfg, t0 + 90s, true));
  cfg.pinned = true;
  EXPECT_FALSE(evictable(st, cfg, t0 + 120s, true));
}

// Issue 46: a plain llama-server vramd neither runs nor can suspend has no way to be freed; an
// unload of it earns nothing but an unload.failed, so it is no candidate at all.
TEST(Evictable, NeverWhatVramdCannotFree) {
  MonoTime t0{Duration(1'000'000)};
  ServiceConfig cfg;
  cfg.name = "llama";
  ServiceStatus st = idle_service(t0);
  EXPECT_TRUE(evictable(st, cfg, t0 + 10min, true));
  EXPECT_FALSE(evictable(st, cfg, t0 + 10min, false));
  EXPECT_EQ(blocker_state(st, &cfg, false, t0 + 10min, false),
            "vramd cannot free it (no unload call; vramd neither starts it nor knows its "
            "container or unit)");
}

TEST(Evictable, NotAgainWhenItsLastUnloadAlreadyBroughtItToWhatItHolds_soak) {
  MonoTime t0{Duration(1'000'000)};
  ServiceConfig cfg;
  cfg.name = "comfy";
  cfg.min_idle = 30s;
  ServiceStatus st = idle_service(t0);
  UnloadVerdict v;
  v.outcome = UnloadOutcome::freed;
  v.before_bytes = 16 * GiB;
  v.after_bytes = 300 * MiB;  // its CUDA context stays
  st.last_unload = v;
  st.last_unload_at = t0 + 40s;
  st.bytes = 300 * MiB;
  EXPECT_FALSE(evictable(st, cfg, t0 + 60s, true));  // nothing more to free
  st.bytes = 330 * MiB;                        // within the settle band: still nothing
  EXPECT_FALSE(evictable(st, cfg, t0 + 60s, true));
  st.bytes = 6 * GiB;  // it loaded again while idle (a model pulled in): worth it again
  EXPECT_TRUE(evictable(st, cfg, t0 + 60s, true));
  st.bytes = 300 * MiB;
  st.last_activity = t0 + 50s;  // used since that unload: what it holds may be new
  EXPECT_TRUE(evictable(st, cfg, t0 + 90s, true));
}

TEST(BlockerState, SaysWhyEachHolderIsInTheWay) {
  MonoTime t0{Duration(1'000'000)};
  ServiceConfig cfg;
  cfg.min_idle = 30s;
  ServiceStatus st = idle_service(t0);
  EXPECT_EQ(blocker_state(st, &cfg, true, t0 + 12min, true), "idle 12 min: unloading");
  EXPECT_EQ(blocker_state(st, &cfg, false, t0 + 10s, true), "idle 10 s (< min_idle 30s)");
  EXPECT_EQ(blocker_state(st, &cfg, false, t0 + 2min, true), "idle 2 min");
  st.busy = true;
  EXPECT_EQ(blocker_state(st, &cfg, false, t0 + 2min, true), "busy");
  cfg.pinned = true;
  EXPECT_EQ(blocker_state(st, &cfg, false, t0 + 2min, true), "pinned");
  ServiceStatus unknown;
  EXPECT_EQ(blocker_state(unknown, nullptr, false, t0, true), "not probed yet");
  unknown.state = ServiceState::unreachable;
  EXPECT_EQ(blocker_state(unknown, nullptr, false, t0, true), "unreachable: cannot tell if idle");
}

}  // namespace
}  // namespace vramd
