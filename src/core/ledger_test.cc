// The ledger on its own: owners named per sample, since-when kept across samples (and a brief
// loss of the GPU), the learned baseline, owner events and the per-owner history.
#include "core/ledger.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace vramd {
namespace {

using namespace std::chrono_literals;

class LedgerWorld {
 public:
  LedgerWorld() : ledger_(config_) {}

  void hold(int pid, Bytes bytes) { procs_[pid] = bytes; }
  void release(int pid) { procs_.erase(pid); }
  std::vector<Action> sample(GpuHealth health = GpuHealth::ok, const OwnerHints& hints = {}) {
    SampleTaken s;
    GpuSample g;
    g.index = 0;
    g.total = 24 * GiB;
    g.used = 300 * MiB;
    g.health = health;
    if (health != GpuHealth::ok) g.error = "GPU is lost";
    for (const auto& [pid, bytes] : procs_) {
      g.processes.push_back({pid, bytes, ""});
      g.used += bytes;
      ProcessInfo p;
      p.pid = pid;
      p.ppid = 1;
      p.comm = "python3";
      p.rss = 1 * GiB;
      s.host.processes.push_back(p);
    }
    s.gpus.gpus.push_back(g);
    std::vector<Action> actions;
    ledger_.on_sample(s, hints, {}, now_, actions);
    return actions;
  }
  void advance(Duration d) { now_ += d; }
  const Ledger& ledger() const { return ledger_; }
  MonoTime now() const { return now_; }

  static std::vector<std::string> types(const std::vector<Action>& actions) {
    std::vector<std::string> out;
    for (const auto& a : actions)
      if (auto* e = std::get_if<EmitEvent>(&a)) out.push_back(e->event.type);
    return out;
  }

 private:
  Config config_;
  Ledger ledger_;
  std::map<int, Bytes> procs_;
  MonoTime now_{Duration(9'000'000)};
};

const Holding* find(const GpuStatus& g, const std::string& owner) {
  for (const auto& h : g.holdings)
    if (h.owner.name == owner) return &h;
  return nullptr;
}

TEST(Ledger, LearnsTheBaselineAndKeepsEachOwnersSinceAcrossSamples) {
  LedgerWorld w;
  w.sample();  // nothing holds memory: the card's use is the baseline
  EXPECT_EQ(w.ledger().status().gpus[0].baseline_source, "learned");
  MonoTime t0 = w.now();
  w.hold(812, 6 * GiB);
  auto events = LedgerWorld::types(w.sample());
  EXPECT_EQ(events, (std::vector<std::string>{"owner.appeared"}));
  w.advance(5s);
  w.hold(812, 7 * GiB);  // more bytes, same owner: same since
  w.sample();
  const Holding* h = find(w.ledger().status().gpus[0], "python3[812]");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->since, t0);
  EXPECT_EQ(h->bytes, 7 * GiB);
  EXPECT_EQ(*w.ledger().status().gpus[0].baseline, 300 * MiB);
}

TEST(Ledger, ABriefLossOfTheGpuKeepsSinceAndSaysSoOnce) {
  LedgerWorld w;
  w.hold(812, 6 * GiB);
  w.sample();
  MonoTime t0 = w.now();
  w.advance(1s);
  EXPECT_EQ(LedgerWorld::types(w.sample(GpuHealth::lost)), (std::vector<std::string>{"gpu.lost"}));
  w.advance(1s);
  EXPECT_TRUE(LedgerWorld::types(w.sample(GpuHealth::lost)).empty());
  w.advance(1s);
  EXPECT_EQ(LedgerWorld::types(w.sample()), (std::vector<std::string>{"gpu.recovered"}));
  EXPECT_EQ(find(w.ledger().status().gpus[0], "python3[812]")->since, t0);
}

TEST(Ledger, AnOwnerThatLeavesIsNamedWithWhatItHeldAndHistoryKeepsIt) {
  LedgerWorld w;
  w.sample();
  w.advance(1s);  // one history frame per moment: a second sample at the same time is ignored
  w.hold(812, 6 * GiB);
  w.sample();
  w.advance(90s);
  w.release(812);
  auto actions = w.sample();
  ASSERT_EQ(LedgerWorld::types(actions), (std::vector<std::string>{"owner.gone"}));
  EXPECT_NE(std::get<EmitEvent>(actions[0]).event.message.find("released 6.0 GiB"),
            std::string::npos);
  HistoryView v = w.ledger().history(0, w.now(), 15min, 100);
  bool held = false;
  for (const auto& s : v.series)
    if (s.owner.name == "python3[812]")
      for (Bytes b : s.values) held |= b == 6 * GiB;
  EXPECT_TRUE(held);
  EXPECT_EQ(w.ledger().history(7, w.now(), 15min, 100).times.size(), 0u);  // no such GPU
}

// Issue 46: a discovered service took over a process's bytes; nothing left the GPU.
TEST(Ledger, BytesNamedAnewAreNotCalledReleased) {
  LedgerWorld w;
  w.sample();
  w.advance(1s);
  w.hold(812, 2 * GiB);
  w.sample();
  w.advance(5s);
  OwnerHints hints;
  hints.managed = {{"speaches", 812}};
  auto actions = w.sample(GpuHealth::ok, hints);
  std::vector<std::string> types = LedgerWorld::types(actions);
  EXPECT_EQ(std::count(types.begin(), types.end(), "owner.gone"), 0)
      << ::testing::PrintToString(types);
  ASSERT_EQ(std::count(types.begin(), types.end(), "owner.renamed"), 1);
  for (const auto& a : actions)
    if (auto* e = std::get_if<EmitEvent>(&a); e && e->event.type == "owner.renamed") {
      EXPECT_EQ(e->event.message.find("released 2.0 GiB"), std::string::npos) << e->event.message;
      EXPECT_NE(e->event.message.find("speaches"), std::string::npos) << e->event.message;
    }
}

TEST(Ledger, HoldersAreListedLargestFirst) {
  LedgerWorld w;
  w.sample();
  w.hold(1, 2 * GiB);
  w.hold(2, 9 * GiB);
  w.sample();
  auto holders = w.ledger().holders(64 * MiB);
  ASSERT_EQ(holders.size(), 2u);
  EXPECT_EQ(holders[0].first, "python3[2]");
  EXPECT_EQ(holders[1].first, "python3[1]");
}

}  // namespace
}  // namespace vramd
