// Supervision in the Arbiter on a virtual clock: start and health, start timeout, restarts after
// failed health checks, crash-loop backoff and the failed state, stop with SIGKILL after the
// timeout and the check that the memory went, exclusive groups, escalation to a restart.
#include <csignal>

#include <gtest/gtest.h>

#include "core/arbiter.h"
#include "core/supervision_world.h"

namespace vramd {
// Named, not anonymous: its helpers share a unity batch with other tests' (cmake/unity.cmake).
namespace supervision_test {

using namespace std::chrono_literals;

using supervision_world::Driven;
using supervision_world::World;

ServiceConfig managed(std::string name, std::string group = "") {
  ServiceConfig s;
  s.name = std::move(name);
  s.kind = "comfyui";
  s.url = "http://127.0.0.1:8188";
  s.start = {"python3", "main.py"};
  s.start_timeout = 10s;
  s.stop_timeout = 5s;
  s.health_interval = 2s;
  s.max_restarts = 3;
  s.group = std::move(group);
  return s;
}

// Starts `name` as pid `pid` and answers its first health check.
void start_healthy(World& w, const std::string& name, int pid) {
  w.feed(ServiceCommand{name, Command::start, 1});
  w.feed(ChildStarted{name, true, pid, 99, "", false});
  w.tick(1s);
  w.feed(HealthChecked{name, true, "GET /system_stats → 200"});
}

// What all three backends share, over each: a process vramd runs, a container, a unit. Where the
// backends differ by design (supervision_detail::traits), the test says which way each goes.
class EverySupervised : public testing::TestWithParam<Control> {};
INSTANTIATE_TEST_SUITE_P(Backends, EverySupervised,
                         testing::Values(Control::managed, Control::container, Control::unit),
                         supervision_world::backend_name);

TEST_P(EverySupervised, AStartIsAnsweredOnceItAnswersItsHealthCheck) {
  Driven d(GetParam());
  d.ask(Command::start, 7);
  EXPECT_EQ(d.starts_asked(), 1u);
  d.start_confirmed();
  EXPECT_EQ(d.m().state, ManagedPhase::starting);
  d.w.tick(1s);
  ASSERT_EQ(d.w.checks.size(), 1u);
  d.w.feed(HealthChecked{"comfy", false, "connect: refused"});
  EXPECT_EQ(d.m().state, ManagedPhase::starting);  // not yet
  EXPECT_TRUE(d.w.finished.empty());
  d.w.tick(1s);
  ASSERT_EQ(d.w.checks.size(), 2u);  // checked again soon while it starts
  d.w.feed(HealthChecked{"comfy", true, "200"});
  EXPECT_EQ(d.m().state, ManagedPhase::running);
  ASSERT_EQ(d.w.finished.size(), 1u);
  EXPECT_EQ(d.w.finished[0].request_id, 7u);
  EXPECT_TRUE(d.w.finished[0].ok);
  ASSERT_TRUE(d.w.has("service.healthy"));
  EXPECT_EQ(d.w.event("service.healthy")->message.rfind(d.label() + " is up after ", 0), 0u)
      << d.w.event("service.healthy")->message;
  EXPECT_EQ(d.m().pid, GetParam() == Control::container ? std::nullopt : std::optional(d.pid));
}

// Issue 46: a server ready at once is used at once (a wake through the front door waited a
// second for a server ready in 0.05 s). A start's checks come soon and back off: the first
// 25 ms after a process's start (at once when an engine confirms it), each wait twice the last,
// to 1 s.
TEST_P(EverySupervised, AStartIsCheckedSoonThenLessAndLessOften) {
  Driven d(GetParam());
  d.ask(Command::start, 7);
  d.start_confirmed();
  const MonoTime confirmed = d.w.now();
  std::vector<Duration> at;
  for (size_t i = 0; i < 8; ++i) {
    d.w.tick_to_deadline();
    ASSERT_EQ(d.w.checks.size(), i + 1);
    at.push_back(d.w.now() - confirmed);
    d.w.feed(HealthChecked{"comfy", false, "connect: refused"});
  }
  const std::vector<Duration> process{25ms, 75ms, 175ms, 375ms, 775ms, 1575ms, 2575ms, 3575ms};
  const std::vector<Duration> engine{0ms, 25ms, 75ms, 175ms, 375ms, 775ms, 1575ms, 2575ms};
  EXPECT_EQ(at, GetParam() == Control::managed ? process : engine);
  EXPECT_EQ(d.m().state, ManagedPhase::starting);
  d.w.tick_to_deadline();
  d.w.feed(HealthChecked{"comfy", true, "200"});
  EXPECT_EQ(d.m().state, ManagedPhase::running);
  ASSERT_EQ(d.w.finished.size(), 1u);
  EXPECT_TRUE(d.w.finished[0].ok);
}

// A server ready 50 ms after its start is up well within 200 ms of it.
TEST(ArbiterSupervisor, AServerReadyAtOnceIsUpWithinItsSecondCheck) {
  World w(supervision_world::comfy_run_by(Control::managed));
  w.feed(ServiceCommand{"comfy", Command::start, 1, false});
  w.feed(ChildStarted{"comfy", true, 501, 99, "", false});
  const MonoTime started = w.now();
  for (int i = 0; i < 10 && w.m()->state == ManagedPhase::starting; ++i) {
    size_t asked = w.checks.size();
    w.tick_to_deadline();
    if (w.checks.size() == asked) continue;
    bool ready = w.now() - started >= 50ms;
    w.feed(HealthChecked{"comfy", ready, ready ? "200" : "connect: refused"});
  }
  EXPECT_EQ(w.m()->state, ManagedPhase::running);
  EXPECT_LE(w.now() - started, 200ms);
}

TEST_P(EverySupervised, ACrashBacksOffDoublingAndACrashLoopEndsFailedUntilAStartByHand) {
  Driven d(GetParam());  // max_restarts 2
  d.bring_up();
  std::vector<Duration> waits;
  for (int crash = 0; crash < 2; ++crash) {
    d.exits(1);
    EXPECT_EQ(d.m().state, ManagedPhase::backoff);
    ASSERT_EQ(d.w.crashes.size(), static_cast<size_t>(crash + 1));
    EXPECT_EQ(d.w.crashes.back().exit_code, 1);
    d.expect_named(d.w.crashes.back());
    size_t asked = d.starts_asked();
    Duration waited{0};
    while (d.starts_asked() == asked && waited < 1min) {
      d.w.tick(250ms);
      waited += 250ms;
    }
    waits.push_back(waited);
    EXPECT_EQ(d.m().restart_count, crash + 1);
    d.start_confirmed();
  }
  EXPECT_EQ(waits, (std::vector<Duration>{1s, 2s}));
  d.exits(1);  // a 3rd within the window: more than max_restarts 2
  EXPECT_EQ(d.m().state, ManagedPhase::failed);
  EXPECT_NE(d.m().reason.find("3 times in"), std::string::npos) << d.m().reason;
  EXPECT_TRUE(d.w.has("service.failed"));
  EXPECT_EQ(d.w.crashes.size(), 3u);
  size_t asked = d.starts_asked();
  d.w.tick(10min);
  EXPECT_EQ(d.m().state, ManagedPhase::failed);  // until a start by hand
  EXPECT_EQ(d.starts_asked(), asked);
  d.ask(Command::start, 2);
  EXPECT_EQ(d.m().state, ManagedPhase::starting);
  EXPECT_EQ(d.starts_asked(), asked + 1);
}

// A stop is asked its backend's way (SIGTERM to a process; the engine's stop with stop_timeout),
// and answered once it ended and a sample shows its memory gone: its own exit is no crash.
TEST_P(EverySupervised, AStopIsAnsweredOnceItEndedAndItsMemoryWent) {
  Driven d(GetParam());
  d.bring_up();
  d.holds(10 * GiB);
  d.ask(Command::stop, 9);
  EXPECT_EQ(d.m().state, ManagedPhase::stopping);
  if (GetParam() == Control::managed) {
    EXPECT_EQ(d.w.signals, (std::vector<std::pair<std::string, int>>{{"comfy", SIGTERM}}));
  } else {
    ASSERT_EQ(d.w.asked.size(), 2u);  // the start, then the stop
    EXPECT_EQ(d.w.asked[1].action, Command::stop);
    EXPECT_EQ(d.w.asked[1].target,
              GetParam() == Control::container ? "comfyui" : "comfyui.service");
    EXPECT_EQ(d.w.asked[1].stop_timeout, 7s);
  }
  d.holds(10 * GiB);
  EXPECT_EQ(d.w.finished.size(), 1u);  // the start's answer only: the stop is not done
  d.stop_confirmed();
  EXPECT_EQ(d.w.finished.size(), 1u);  // answered at a sample, not at the exit
  EXPECT_TRUE(d.w.crashes.empty());    // the exit it asked for
  EXPECT_FALSE(d.w.has("service.crashed"));
  EXPECT_EQ(d.m().state, ManagedPhase::stopped);
  if (GetParam() == Control::unit) {
    // Ended, and its MainPID (its own while the stop is verified) still holds the memory: no
    // answer yet. (An exited child's pid is no longer a process's.)
    d.holds(10 * GiB);
    EXPECT_EQ(d.w.finished.size(), 1u);
  }
  d.holds(0);
  ASSERT_EQ(d.w.finished.size(), 2u);
  EXPECT_EQ(d.w.finished[1].request_id, 9u);
  EXPECT_TRUE(d.w.finished[1].ok) << d.w.finished[1].message;
  EXPECT_EQ(d.w.count("service.stopped"), 1u);
  EXPECT_EQ(d.m().state, ManagedPhase::stopped);
}

// health_failures failed checks in a row restart it. A process is stopped (SIGTERM) and its exit
// is the crash, under the restart policy and its backoff; an engine's service is recorded as a
// crash at once and restarted by one ask (its exit then is the restart's own).
TEST_P(EverySupervised, FailedHealthChecksRestartIt) {
  Driven d(GetParam());  // health_failures 3
  const Duration interval = ServiceConfig{}.health_interval;
  d.bring_up();
  for (int i = 0; i < 2; ++i) {
    d.w.tick(interval);
    d.w.feed(HealthChecked{"comfy", false, "timeout"});
  }
  EXPECT_TRUE(d.w.has("service.unhealthy"));
  EXPECT_FALSE(d.w.has("service.restart"));
  EXPECT_TRUE(d.w.signals.empty());
  EXPECT_EQ(d.starts_asked(), 1u);
  d.w.tick(interval);
  d.w.feed(HealthChecked{"comfy", false, "timeout"});
  ASSERT_TRUE(d.w.has("service.restart"));
  EXPECT_NE(d.w.event("service.restart")->message.find("failed 3 health checks in a row"),
            std::string::npos)
      << d.w.event("service.restart")->message;
  if (GetParam() == Control::managed) {
    ASSERT_EQ(d.w.signals.size(), 1u);
    EXPECT_EQ(d.w.signals[0], (std::pair<std::string, int>{"comfy", SIGTERM}));
    EXPECT_TRUE(d.w.crashes.empty());  // its exit is the crash
    d.exits(0);
    ASSERT_EQ(d.w.crashes.size(), 1u);
    EXPECT_EQ(d.m().state, ManagedPhase::backoff);
    d.w.tick(1s);
    EXPECT_EQ(d.starts_asked(), 2u);  // started again after the first backoff (1 s)
  } else {
    ASSERT_EQ(d.w.crashes.size(), 1u);  // recorded now
    EXPECT_NE(d.w.crashes[0].reason.find("3 health checks"), std::string::npos);
    ASSERT_EQ(d.w.asked.size(), 2u);
    EXPECT_EQ(d.w.asked[1].action, Command::restart);
    EXPECT_EQ(d.m().state, ManagedPhase::stopping);
    d.exits(0);  // the restart's own exit: no second crash
    EXPECT_EQ(d.w.crashes.size(), 1u);
    d.start_confirmed();
    EXPECT_EQ(d.m().state, ManagedPhase::starting);
    EXPECT_EQ(d.m().restart_count, 1);
  }
}

// Shutdown is the core's to answer (issue 27): SIGTERM to the services whose on_shutdown is
// `stop`, nothing to those left running, and nothing else decided (no spawn, no admission).
TEST(ArbiterSupervisor, ShuttingDownSignalsOnlyTheServicesToStopWithVramd) {
  ServiceConfig stops = managed("stops");
  stops.on_shutdown = OnShutdown::stop;
  ServiceConfig down = managed("down");  // configured to stop too, but not running
  down.on_shutdown = OnShutdown::stop;
  World w({stops, managed("stays"), down});
  start_healthy(w, "stops", 501);
  start_healthy(w, "stays", 502);
  w.signals.clear();
  w.events.clear();
  auto actions = w.feed(ShuttingDown{});
  EXPECT_EQ(w.signals, (std::vector<std::pair<std::string, int>>{{"stops", SIGTERM}}));
  const EventRecord* e = w.event("service.stopping");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->subject, "stops");
  EXPECT_NE(e->message.find("pid 501"), std::string::npos) << e->message;
  for (const Action& a : actions)
    EXPECT_TRUE(std::holds_alternative<SignalService>(a) || std::holds_alternative<EmitEvent>(a))
        << "index " << a.index();
}

TEST(ArbiterSupervisor, StartTimeoutEndsItAsACrashAndBacksOff) {
  World w({managed("comfy")});
  w.feed(ServiceCommand{"comfy", Command::start, 1});
  w.feed(ChildStarted{"comfy", true, 500, 99, "", false});
  for (int i = 0; i < 12; ++i) {
    w.tick(1s);
    w.feed(HealthChecked{"comfy", false, "503 Loading model"});
  }
  ASSERT_TRUE(w.has("service.start_timeout"));
  ASSERT_FALSE(w.signals.empty());
  EXPECT_EQ(w.signals[0], (std::pair<std::string, int>{"comfy", SIGTERM}));
  w.feed(ChildExited{"comfy", 500, std::nullopt, SIGTERM});
  ASSERT_EQ(w.crashes.size(), 1u);
  EXPECT_NE(w.crashes[0].reason.find("start_timeout 10s"), std::string::npos) << w.crashes[0].reason;
  EXPECT_EQ(w.m("comfy")->state, ManagedPhase::backoff);
}

TEST(ArbiterSupervisor, StopKillsAfterTheTimeoutAndChecksTheMemoryWent) {
  World w({managed("comfy")});
  start_healthy(w, "comfy", 500);
  w.sample(500, 16 * GiB);
  w.feed(ServiceCommand{"comfy", Command::stop, 9});
  ASSERT_EQ(w.signals.back(), (std::pair<std::string, int>{"comfy", SIGTERM}));
  w.tick(5s);
  ASSERT_EQ(w.signals.back(), (std::pair<std::string, int>{"comfy", SIGKILL}));
  w.feed(ChildExited{"comfy", 500, std::nullopt, SIGKILL});
  EXPECT_EQ(w.m("comfy")->state, ManagedPhase::stopped);
  EXPECT_TRUE(w.crashes.empty());  // asked for: not a crash
  EXPECT_TRUE(w.finished.size() == 1u);  // the start's answer only: the stop waits for the memory
  w.sample();
  ASSERT_TRUE(w.has("service.stopped"));
  EXPECT_NE(w.event("service.stopped")->message.find("stopped comfy: 16.0 GiB → 0 B in 5.0 s"),
            std::string::npos)
      << w.event("service.stopped")->message;
  EXPECT_EQ(w.finished.back().request_id, 9u);
  EXPECT_TRUE(w.finished.back().ok);
}

// A stop that comes between the spawn and the child's pid is not lost: it waits for the pid,
// then SIGTERM goes. The start's waiter is told at once that the stop cancelled it.
TEST(ArbiterSupervisor, AStopBeforeThePidIsKnownStopsTheChildOnceItIs) {
  World w({managed("comfy")});
  w.feed(ServiceCommand{"comfy", Command::start, 1});
  ASSERT_EQ(w.spawns.size(), 1u);
  w.feed(ServiceCommand{"comfy", Command::stop, 2});
  EXPECT_EQ(w.m("comfy")->state, ManagedPhase::stopping);
  EXPECT_TRUE(w.signals.empty());  // no pid to signal yet
  ASSERT_EQ(w.finished.size(), 1u);
  EXPECT_EQ(w.finished[0].request_id, 1u);
  EXPECT_FALSE(w.finished[0].ok);
  EXPECT_EQ(w.finished[0].message, "the start of comfy was cancelled by a stop");

  w.feed(ChildStarted{"comfy", true, 500, 99, "", false});
  ASSERT_EQ(w.signals.size(), 1u);
  EXPECT_EQ(w.signals[0], (std::pair<std::string, int>{"comfy", SIGTERM}));
  EXPECT_EQ(w.m("comfy")->state, ManagedPhase::stopping);
  w.tick(3s);
  EXPECT_TRUE(w.checks.empty());  // being stopped: not checked
  w.feed(ChildExited{"comfy", 500, std::nullopt, SIGTERM});
  EXPECT_EQ(w.m("comfy")->state, ManagedPhase::stopped);
  EXPECT_TRUE(w.crashes.empty());  // the exit it asked for
  w.sample();
  ASSERT_EQ(w.finished.size(), 2u);
  EXPECT_EQ(w.finished[1].request_id, 2u);
  EXPECT_TRUE(w.finished[1].ok);
  EXPECT_FALSE(w.has("service.healthy"));
}

// The same stop when the spawn then fails: answered, nothing left to stop.
TEST(ArbiterSupervisor, AStopBeforeAStartThatFailsIsAnswered) {
  World w({managed("comfy")});
  w.feed(ServiceCommand{"comfy", Command::start, 1});
  w.feed(ServiceCommand{"comfy", Command::stop, 2});
  w.feed(ChildStarted{"comfy", false, 0, 0, "port 8188 is taken", false});
  EXPECT_TRUE(w.signals.empty());
  ASSERT_EQ(w.finished.size(), 2u);
  EXPECT_EQ(w.finished[1].request_id, 2u);
  EXPECT_TRUE(w.finished[1].ok);
  EXPECT_EQ(w.finished[1].message, "comfy is not running (it could not start: port 8188 is taken)");
  EXPECT_EQ(w.m("comfy")->state, ManagedPhase::failed);
}

TEST(ArbiterSupervisor, StartingAGroupMemberStopsTheOthers) {
  World w({managed("a", "heavy"), managed("b", "heavy")});
  start_healthy(w, "a", 500);
  w.feed(ServiceCommand{"b", Command::start, 3});
  ASSERT_EQ(w.signals.size(), 1u);
  EXPECT_EQ(w.signals[0], (std::pair<std::string, int>{"a", SIGTERM}));
  EXPECT_EQ(w.spawns.back(), "b");
  EXPECT_TRUE(w.has("service.group_stop"));
}

TEST(ArbiterSupervisor, RestartStopsThenStartsAndAPortConflictFailsTheStart) {
  World w({managed("comfy")});
  start_healthy(w, "comfy", 500);
  w.feed(ServiceCommand{"comfy", Command::restart, 4});
  EXPECT_EQ(w.signals.back().second, SIGTERM);
  w.feed(ChildExited{"comfy", 500, 0, std::nullopt});
  EXPECT_EQ(w.spawns.size(), 2u);
  w.feed(ChildStarted{"comfy", false, 0, 0, "port 8188 is taken by python3[812]", false});
  EXPECT_EQ(w.m("comfy")->state, ManagedPhase::failed);
  EXPECT_FALSE(w.finished.back().ok);
  EXPECT_EQ(w.finished.back().message, "port 8188 is taken by python3[812]");
}

TEST(ArbiterSupervisor, ServicesWithoutStartCannotBeStarted) {
  ServiceConfig plain;
  plain.name = "ollama";
  plain.kind = "ollama";
  plain.url = "http://127.0.0.1:11434";
  World w({plain});
  w.feed(ServiceCommand{"ollama", Command::start, 5});
  ASSERT_EQ(w.finished.size(), 1u);
  EXPECT_FALSE(w.finished[0].ok);
  EXPECT_NE(w.finished[0].message.find("no start command, container or unit"), std::string::npos);
}

// Each phase's one deadline (supervision_detail::phase_deadline) is the Arbiter's next one, to
// the millisecond (pinned before the phases got one deadline each, and unchanged since).
TEST(ArbiterSupervisor, EachPhaseHasItsDeadline) {
  World w({managed("comfy")});
  w.feed(ServiceCommand{"comfy", Command::start, 1});
  w.feed(ChildStarted{"comfy", true, 500, 99, "", false});
  const MonoTime started = w.now();
  // Starting: the first check 25 ms after the start, then (one in flight) the start timeout.
  EXPECT_EQ(w.deadline(), started + 25ms);
  w.tick(1s);
  ASSERT_EQ(w.checks.size(), 1u);
  EXPECT_EQ(w.deadline(), started + 10s + Duration(1));
  w.feed(HealthChecked{"comfy", true, "200"});
  // Running: the next check, health_interval on.
  EXPECT_EQ(w.deadline(), w.now() + 2s);
  // Stopping: SIGKILL at stop_timeout after the SIGTERM (no checks while it stops).
  w.feed(ServiceCommand{"comfy", Command::stop, 2});
  const MonoTime stopped = w.now();
  EXPECT_EQ(w.deadline(), stopped + 5s);
  // A crash: backoff, the restart 1 s on.
  w.feed(ChildExited{"comfy", 500, 1, std::nullopt});
  EXPECT_EQ(w.m("comfy")->state, ManagedPhase::stopped) << "an exit it was asked for";
  w.feed(ServiceCommand{"comfy", Command::start, 3});
  w.feed(ChildStarted{"comfy", true, 501, 99, "", false});
  w.tick(1s);
  w.feed(HealthChecked{"comfy", true, "200"});
  w.feed(ChildExited{"comfy", 501, 1, std::nullopt});
  ASSERT_EQ(w.m("comfy")->state, ManagedPhase::backoff);
  EXPECT_EQ(w.deadline(), w.now() + 1s);
}

// A crash after more than a minute healthy backs off from 1 s again.
TEST(ArbiterSupervisor, ACrashAfterAMinuteHealthyBacksOffFromOneSecondAgain) {
  World w({managed("comfy")});
  start_healthy(w, "comfy", 500);
  w.feed(ChildExited{"comfy", 500, 1, std::nullopt});
  ASSERT_EQ(w.m("comfy")->state, ManagedPhase::backoff);
  w.tick(1s);
  ASSERT_EQ(w.spawns.size(), 2u);
  w.feed(ChildStarted{"comfy", true, 501, 99, "", false});
  w.tick(1s);
  w.feed(HealthChecked{"comfy", true, "200"});
  w.feed(ChildExited{"comfy", 501, 1, std::nullopt});  // at once: 2 s now
  EXPECT_EQ(w.deadline(), w.now() + 2s);
  w.tick(2s);
  ASSERT_EQ(w.spawns.size(), 3u);
  w.feed(ChildStarted{"comfy", true, 502, 99, "", false});
  w.tick(1s);
  w.feed(HealthChecked{"comfy", true, "200"});
  w.tick(61s);
  w.feed(ChildExited{"comfy", 502, 1, std::nullopt});
  ASSERT_EQ(w.m("comfy")->state, ManagedPhase::backoff);
  EXPECT_EQ(w.deadline(), w.now() + 1s) << "back to 1 s";
}

}  // namespace supervision_test
}  // namespace vramd
