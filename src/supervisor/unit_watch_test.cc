// The unit watch's rule: which reads of a unit's state are a run that ended (a die), and which
// are a state read. A restart by systemd between two reads is still a die.
#include "supervisor/unit_watch.h"

#include <csignal>

#include <gtest/gtest.h>

namespace vramd {
namespace {

UnitShow running(const std::string& invocation, uint64_t entered, int pid, int restarts = 0) {
  UnitShow u;
  u.load_state = "loaded";
  u.active_state = "active";
  u.sub_state = "running";
  u.main_pid = pid;
  u.invocation_id = invocation;
  u.active_enter_mono = entered;
  u.n_restarts = restarts;
  u.restart = "always";
  u.result = "success";
  return u;
}

TEST(UnitWatchRule, TheFirstReadIsAStateRead) {
  auto out = UnitWatch::changes("comfy", std::nullopt, running("a", 1, 42));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_FALSE(out[0].died);
  EXPECT_TRUE(out[0].running);
  EXPECT_EQ(out[0].main_pid, 42);
  EXPECT_EQ(out[0].restart_policy, EngineRestart::always);
}

TEST(UnitWatchRule, ARunThatEndedIsADieWithHowItEnded) {
  UnitShow after = running("a", 1, 0);
  after.active_state = "failed";
  after.sub_state = "failed";
  after.exec_main_code = 2;  // CLD_KILLED
  after.exec_main_status = SIGKILL;
  after.result = "signal";
  auto out = UnitWatch::changes("comfy", running("a", 1, 42), after);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(out[0].died);
  EXPECT_FALSE(out[0].running);
  EXPECT_EQ(out[0].signal, SIGKILL);
  EXPECT_FALSE(out[0].exit_code.has_value());
  EXPECT_EQ(out[0].result, UnitResult::signal);

  after.exec_main_code = 1;  // CLD_EXITED
  after.exec_main_status = 1;
  after.result = "exit-code";
  out = UnitWatch::changes("comfy", running("a", 1, 42), after);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].exit_code, 1);
  EXPECT_FALSE(out[0].signal.has_value());
}

TEST(UnitWatchRule, ANewRunBetweenTwoReadsIsADieThenARunning) {
  auto out = UnitWatch::changes("comfy", running("a", 1, 42), running("b", 9, 43, 1));
  ASSERT_EQ(out.size(), 2u);
  EXPECT_TRUE(out[0].died);
  EXPECT_EQ(out[0].result, std::nullopt);  // how it ended is gone: ExecMain* are the new run's
  EXPECT_FALSE(out[1].died);
  EXPECT_TRUE(out[1].running);
  EXPECT_EQ(out[1].main_pid, 43);
  EXPECT_EQ(out[1].restart_count, 1);
}

TEST(UnitWatchRule, AWholeRunBetweenTwoReadsIsADie) {
  UnitShow before = running("a", 1, 0);
  before.active_state = "failed";
  before.exec_main_code = 1;
  before.exec_main_status = 1;
  before.result = "exit-code";
  UnitShow after = before;
  after.invocation_id = "b";  // started and failed again, both between the reads
  after.active_enter_mono = 7;
  after.exec_main_status = 2;
  auto out = UnitWatch::changes("comfy", before, after);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(out[0].died);
  EXPECT_EQ(out[0].exit_code, 2);
  EXPECT_TRUE(UnitWatch::changes("comfy", before, before).empty());
}

TEST(UnitWatchRule, NothingChangedIsNothingAndAStartIsAStateRead) {
  EXPECT_TRUE(UnitWatch::changes("comfy", running("a", 1, 42), running("a", 1, 42)).empty());
  UnitShow off = running("", 0, 0);
  off.active_state = "inactive";
  off.sub_state = "dead";
  EXPECT_TRUE(UnitWatch::changes("comfy", off, off).empty());
  auto out = UnitWatch::changes("comfy", off, running("c", 5, 50));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_FALSE(out[0].died);
  EXPECT_TRUE(out[0].running);
}

}  // namespace
}  // namespace vramd
