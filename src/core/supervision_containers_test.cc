// Supervision of containers on a virtual clock: a stop is asked of the engine with stop_timeout
// and answered only once the engine has stopped it and its memory is gone; a start only once it
// answers its health check; a die vramd did not ask for is a crash record and a restart with
// backoff, unless Docker's own restart policy brings it back; health_failures failed checks
// restart it; a crash loop ends in failed.
#include <gtest/gtest.h>

#include "core/arbiter.h"
#include "core/supervision_world.h"

namespace vramd {
// Named, not anonymous: its helpers share a unity batch with other tests' (cmake/unity.cmake).
namespace supervision_containers_test {

using namespace std::chrono_literals;

// The shared World, and the engine's word about "comfy": running or not, a die.
class World : public supervision_world::World {
 public:
  explicit World(ServiceConfig svc) : supervision_world::World(std::move(svc)) {}
  void state(bool running, const std::string& policy = "no") {
    feed(ContainerChanged{"comfy", running, false, std::nullopt, false, parse_engine_restart(policy)});
  }
  void die(int code, const std::string& policy = "no", bool oom = false) {
    feed(ContainerChanged{"comfy", false, true, code, oom, parse_engine_restart(policy)});
  }
};

ServiceConfig comfy() { return supervision_world::comfy_run_by(Control::container); }

TEST(ContainerSupervision, UnknownUntilTheEngineSaysThenRunning) {
  World w(comfy());
  EXPECT_EQ(w.m(), nullptr);  // nothing shown before the engine answers
  w.state(true, "unless-stopped");
  ASSERT_NE(w.m(), nullptr);
  EXPECT_EQ(w.m()->state, ManagedPhase::running);
  EXPECT_EQ(w.m()->docker_restart_policy, EngineRestart::unless_stopped);
}

TEST(ContainerSupervision, AStopOfAStoppedContainerAnswersAtOnceAndALaterDieIsACrash) {
  World w(comfy());
  w.state(false);
  w.feed(ServiceCommand{"comfy", Command::stop, 1, false});
  w.feed(LifecycleDone{"comfy", Command::stop, true, "already stopped", /*changed=*/false});
  ASSERT_EQ(w.finished.size(), 1u);
  EXPECT_TRUE(w.finished[0].ok);
  w.state(true);
  w.die(1);
  EXPECT_EQ(w.crashes.size(), 1u);  // no stop is pending: this exit was not asked for
}

TEST(ContainerSupervision, DockersOwnRestartPolicyIsNotFought) {
  World w(comfy());
  w.state(true, "unless-stopped");
  w.die(1, "unless-stopped");
  EXPECT_EQ(w.crashes.size(), 1u);  // still a crash to diagnose
  EXPECT_TRUE(w.has("service.docker_restarts"));
  w.tick(10s);
  EXPECT_TRUE(w.asked.empty());  // Docker starts it, not vramd
  w.state(true, "unless-stopped");
  EXPECT_EQ(w.m()->state, ManagedPhase::starting);
  // on-failure restarts failures only: a clean exit is vramd's to judge (restart = on-failure:
  // it stays stopped).
  w.die(0, "on-failure");
  EXPECT_FALSE(w.has("service.backoff"));
  EXPECT_EQ(w.m()->state, ManagedPhase::stopped);
}

TEST(ContainerSupervision, AnOomKillIsSaidSo) {
  World w(comfy());
  w.state(true);
  w.die(137, "no", /*oom=*/true);
  ASSERT_EQ(w.crashes.size(), 1u);
  EXPECT_TRUE(w.crashes[0].oom);
  EXPECT_NE(w.m()->reason.find("OOM"), std::string::npos) << w.m()->reason;
}

// Over max_restarts by failed health checks, a container is stopped, not left running while it is
// shown failed: it answers no check and still holds its memory (a process is stopped by its
// SIGTERM the same way). Its stop's own exit is no crash, and the stop leaves it failed.
TEST(ContainerSupervision, FailedHealthChecksOverTheLimitStopItAndItStaysFailed) {
  World w(comfy());
  w.state(true);
  auto fail_checks = [&] {
    for (int i = 0; i < 3; ++i) {
      w.tick(5s);
      w.feed(HealthChecked{"comfy", false, "timed out"});
    }
  };
  for (int round = 0; round < 2; ++round) {  // max_restarts = 2: two restarts
    fail_checks();
    ASSERT_EQ(w.asked.back().action, Command::restart);
    w.die(0);
    w.feed(LifecycleDone{"comfy", Command::restart, true, "done"});
    w.tick(1s);
    w.feed(HealthChecked{"comfy", true, "ok"});
    ASSERT_EQ(w.m()->state, ManagedPhase::running);
  }
  size_t asked = w.asked.size();
  fail_checks();
  EXPECT_EQ(w.m()->state, ManagedPhase::failed);
  EXPECT_TRUE(w.has("service.failed"));
  ASSERT_EQ(w.asked.size(), asked + 1);
  EXPECT_EQ(w.asked.back().action, Command::stop);
  EXPECT_EQ(w.asked.back().stop_timeout, 7s);
  EXPECT_EQ(w.crashes.size(), 3u);
  w.die(0);  // the stop's own exit
  EXPECT_EQ(w.crashes.size(), 3u);
  w.feed(LifecycleDone{"comfy", Command::stop, true, "stopped"});
  EXPECT_EQ(w.m()->state, ManagedPhase::failed);
  EXPECT_NE(w.m()->reason.find("3 times in"), std::string::npos) << w.m()->reason;
  w.tick(60s);
  EXPECT_EQ(w.asked.size(), asked + 1) << "failed: nothing is asked again";
}

// Where a container differs from a process by design (supervision_detail::traits), pinned before
// the two state machines became one.

// A container start that times out answers its waiters false and is then counted as a running
// service that fails its checks (a process is killed as a crash instead).
TEST(ContainerSupervision, AStartThatTimesOutIsAnsweredFalseThenCheckedAsARunningOne) {
  ServiceConfig svc = comfy();
  svc.start_timeout = 30s;
  World w(svc);
  w.state(false);
  w.feed(ServiceCommand{"comfy", Command::start, 5});
  ASSERT_EQ(w.asked.size(), 1u);
  EXPECT_EQ(w.asked[0].action, Command::start);
  w.feed(LifecycleDone{"comfy", Command::start, true, "done"});
  EXPECT_EQ(w.m()->state, ManagedPhase::starting);
  w.tick(31s);
  EXPECT_TRUE(w.has("service.start_timeout"));
  ASSERT_EQ(w.finished.size(), 1u);
  EXPECT_EQ(w.finished[0].request_id, 5u);
  EXPECT_FALSE(w.finished[0].ok);
  EXPECT_EQ(w.m()->state, ManagedPhase::running);
  EXPECT_NE(w.m()->reason.find("start_timeout 30s"), std::string::npos) << w.m()->reason;
  for (int i = 0; i < 3; ++i) {
    w.tick(5s);
    w.feed(HealthChecked{"comfy", false, "refused"});
  }
  ASSERT_EQ(w.asked.size(), 2u);
  EXPECT_EQ(w.asked[1].action, Command::restart);
  EXPECT_EQ(w.crashes.size(), 1u);
}

// A restart asked by hand: one Lifecycle restart; its own die is no crash; counted once.
TEST(ContainerSupervision, ARestartByHandIsOneAskAndItsOwnDieIsNoCrash) {
  World w(comfy());
  w.state(true);
  w.feed(ServiceCommand{"comfy", Command::restart, 9});
  ASSERT_EQ(w.asked.size(), 1u);
  EXPECT_EQ(w.asked[0].action, Command::restart);
  EXPECT_EQ(w.asked[0].stop_timeout, 7s);
  EXPECT_EQ(w.m()->state, ManagedPhase::stopping);
  w.die(0);
  EXPECT_TRUE(w.crashes.empty());
  EXPECT_FALSE(w.has("service.crashed"));
  w.feed(LifecycleDone{"comfy", Command::restart, true, "done"});
  EXPECT_EQ(w.m()->state, ManagedPhase::starting);
  EXPECT_EQ(w.m()->restart_count, 1);
  w.tick(1s);
  w.feed(HealthChecked{"comfy", true, "ok"});
  EXPECT_EQ(w.m()->state, ManagedPhase::running);
  ASSERT_EQ(w.finished.size(), 1u);
  EXPECT_TRUE(w.finished[0].ok);
}

// A crash after more than a minute healthy backs off from 1 s again, not from where the last
// crash loop left it.
TEST(ContainerSupervision, ACrashAfterAMinuteHealthyBacksOffFromOneSecondAgain) {
  ServiceConfig svc = comfy();
  svc.max_restarts = 5;
  World w(svc);
  w.state(true);
  w.die(1);
  ASSERT_EQ(w.m()->state, ManagedPhase::backoff);
  EXPECT_TRUE(w.has("service.backoff"));
  w.tick(1s);  // 1 s
  ASSERT_EQ(w.asked.back().action, Command::start);
  w.feed(LifecycleDone{"comfy", Command::start, true, "done"});
  w.feed(HealthChecked{"comfy", true, "ok"});
  ASSERT_EQ(w.m()->state, ManagedPhase::running);
  w.die(1);  // at once again: 2 s now
  ASSERT_EQ(w.m()->state, ManagedPhase::backoff);
  w.tick(1s);
  EXPECT_EQ(w.m()->state, ManagedPhase::backoff) << "the second backoff is 2 s";
  w.tick(1s);
  ASSERT_EQ(w.asked.back().action, Command::start);
  w.feed(LifecycleDone{"comfy", Command::start, true, "done"});
  w.feed(HealthChecked{"comfy", true, "ok"});
  w.tick(61s);  // healthy for more than a minute
  w.die(1);
  ASSERT_EQ(w.m()->state, ManagedPhase::backoff);
  size_t asked = w.asked.size();
  w.tick(1s);
  EXPECT_EQ(w.asked.size(), asked + 1) << "back to 1 s";
}

// A start asked of the engine is checked only once the engine says it started: a check due from
// the run before (its schedule) is not sent to a container that is not there yet.
TEST(ContainerSupervision, NoHealthCheckUntilTheEngineSaysTheStartIsDone) {
  ServiceConfig svc = comfy();
  svc.health_interval = 30s;
  World w(svc);
  w.state(true);
  w.tick(1s);
  ASSERT_EQ(w.checks.size(), 1u);  // seen running: checked at once
  w.feed(HealthChecked{"comfy", true, "ok"});
  w.tick(20s);  // the next check is due at 31 s
  w.die(1);     // backoff 1 s
  w.tick(1s);
  ASSERT_EQ(w.asked.back().action, Command::start);
  ASSERT_EQ(w.m()->state, ManagedPhase::starting);
  w.tick(15s);  // past the old run's next check, the engine still starting it
  EXPECT_EQ(w.checks.size(), 1u);
  w.feed(LifecycleDone{"comfy", Command::start, true, "done"});
  w.tick(250ms);
  EXPECT_EQ(w.checks.size(), 2u);
}

}  // namespace supervision_containers_test
}  // namespace vramd
