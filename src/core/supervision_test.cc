// Supervision in the Arbiter on a virtual clock: start and health, start timeout, restarts after
// failed health checks, crash-loop backoff and the failed state, stop with SIGKILL after the
// timeout and the check that the memory went, exclusive groups, escalation to a restart.
#include <csignal>

#include <gtest/gtest.h>

#include "core/arbiter.h"

namespace vramd {
// Named, not anonymous: its helpers share a unity batch with other tests' (cmake/unity.cmake).
namespace supervision_test {

using namespace std::chrono_literals;

class World {
 public:
  explicit World(std::vector<ServiceConfig> services) {
    Config c;
    c.gpu.baseline = 0;
    c.services.assign(services.begin(), services.end());
    arbiter_ = std::make_unique<Arbiter>(c);
  }
  std::vector<Action> feed(const Event& e) {
    auto actions = arbiter_->handle(e, now_);
    for (auto& a : actions) {
      if (auto* s = std::get_if<SpawnService>(&a)) spawns.push_back(s->service);
      if (auto* s = std::get_if<SignalService>(&a)) signals.push_back({s->service, s->signal});
      if (auto* s = std::get_if<CheckHealth>(&a)) checks.push_back(s->service);
      if (auto* s = std::get_if<RecordCrash>(&a)) crashes.push_back(*s);
      if (auto* s = std::get_if<CommandFinished>(&a)) finished.push_back(*s);
      if (auto* s = std::get_if<EmitEvent>(&a)) events.push_back(s->event);
    }
    return actions;
  }
  // A sample where `pid` (if any) holds `bytes` on GPU 0.
  void sample(int pid = 0, Bytes bytes = 0) {
    SampleTaken s;
    GpuSample g;
    g.index = 0;
    g.total = 24 * GiB;
    if (pid) {
      g.processes.push_back({pid, bytes, ""});
      g.used = bytes;
      ProcessInfo p;
      p.pid = pid;
      p.ppid = 1;
      p.comm = "python3";
      s.host.processes.push_back(p);
    }
    s.gpus.gpus.push_back(g);
    feed(s);
  }
  void tick(Duration d) {
    for (Duration t{0}; t < d; t += 250ms) {
      now_ += 250ms;
      feed(Tick{});
    }
  }
  const ManagedState& m(const std::string& name) { return *arbiter_->service(name)->managed; }
  std::optional<MonoTime> deadline() const { return arbiter_->next_deadline(); }
  MonoTime now() const { return now_; }
  bool has_event(const std::string& type) const {
    for (const auto& e : events)
      if (e.type == type) return true;
    return false;
  }
  const EventRecord* event(const std::string& type) const {
    for (const auto& e : events)
      if (e.type == type) return &e;
    return nullptr;
  }

  std::vector<std::string> spawns, checks;
  std::vector<std::pair<std::string, int>> signals;
  std::vector<RecordCrash> crashes;
  std::vector<CommandFinished> finished;
  std::vector<EventRecord> events;

 private:
  std::unique_ptr<Arbiter> arbiter_;
  MonoTime now_{Duration(1'800'000'000'000)};
};

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

TEST(ArbiterSupervisor, StartThenHealthyIsRunningAndAnswersTheRequest) {
  World w({managed("comfy")});
  w.feed(ServiceCommand{"comfy", Command::start, 7});
  EXPECT_EQ(w.spawns, std::vector<std::string>{"comfy"});
  w.feed(ChildStarted{"comfy", true, 500, 99, "", false});
  EXPECT_EQ(w.m("comfy").state, ManagedPhase::starting);
  w.tick(1s);
  ASSERT_EQ(w.checks.size(), 1u);
  w.feed(HealthChecked{"comfy", false, "connect: refused"});
  EXPECT_EQ(w.m("comfy").state, ManagedPhase::starting);  // not yet
  EXPECT_TRUE(w.finished.empty());
  w.tick(1s);
  w.feed(HealthChecked{"comfy", true, "200"});
  EXPECT_EQ(w.m("comfy").state, ManagedPhase::running);
  ASSERT_EQ(w.finished.size(), 1u);
  EXPECT_EQ(w.finished[0].request_id, 7u);
  EXPECT_TRUE(w.finished[0].ok);
  // Its processes are the service's: the managed pid names the owner.
  w.sample(500, 4 * GiB);
  EXPECT_EQ(w.m("comfy").pid, 500);
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
  ASSERT_TRUE(w.has_event("service.start_timeout"));
  ASSERT_FALSE(w.signals.empty());
  EXPECT_EQ(w.signals[0], (std::pair<std::string, int>{"comfy", SIGTERM}));
  w.feed(ChildExited{"comfy", 500, std::nullopt, SIGTERM});
  ASSERT_EQ(w.crashes.size(), 1u);
  EXPECT_NE(w.crashes[0].reason.find("start_timeout 10s"), std::string::npos) << w.crashes[0].reason;
  EXPECT_EQ(w.m("comfy").state, ManagedPhase::backoff);
}

TEST(ArbiterSupervisor, FailedHealthChecksRestartIt) {
  auto svc = managed("comfy");
  svc.health_failures = 5;
  World w({svc});
  start_healthy(w, "comfy", 500);
  for (int i = 0; i < 4; ++i) {
    w.tick(2s);
    w.feed(HealthChecked{"comfy", false, "timeout"});
  }
  EXPECT_TRUE(w.signals.empty());
  EXPECT_TRUE(w.has_event("service.unhealthy"));
  w.tick(2s);
  w.feed(HealthChecked{"comfy", false, "timeout"});
  ASSERT_EQ(w.signals.size(), 1u);
  EXPECT_NE(w.event("service.restart")->message.find("failed 5 health checks"), std::string::npos);
  w.feed(ChildExited{"comfy", 500, 0, std::nullopt});
  w.tick(1s);
  EXPECT_EQ(w.spawns.size(), 2u);  // started again after the first backoff (1 s)
}

TEST(ArbiterSupervisor, CrashLoopBacksOffExponentiallyThenFails) {
  World w({managed("comfy")});
  start_healthy(w, "comfy", 500);
  int pid = 500;
  std::vector<Duration> waits;
  for (int crash = 0; crash < 3; ++crash) {
    w.feed(ChildExited{"comfy", pid, 1, std::nullopt});
    EXPECT_EQ(w.m("comfy").state, ManagedPhase::backoff);
    size_t spawns = w.spawns.size();
    Duration waited{0};
    while (w.spawns.size() == spawns) {
      w.tick(250ms);
      waited += 250ms;
    }
    waits.push_back(waited);
    w.feed(ChildStarted{"comfy", true, ++pid, 99, "", false});
  }
  EXPECT_EQ(waits, (std::vector<Duration>{1s, 2s, 4s}));
  w.feed(ChildExited{"comfy", pid, 1, std::nullopt});  // a 4th within the window: > max_restarts 3
  EXPECT_EQ(w.m("comfy").state, ManagedPhase::failed);
  EXPECT_NE(w.m("comfy").reason.find("4 times in"), std::string::npos) << w.m("comfy").reason;
  EXPECT_EQ(w.crashes.size(), 4u);
  w.tick(10min);
  EXPECT_EQ(w.m("comfy").state, ManagedPhase::failed);  // until a start by hand
  w.feed(ServiceCommand{"comfy", Command::start, 2});
  EXPECT_EQ(w.m("comfy").state, ManagedPhase::starting);
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
  EXPECT_EQ(w.m("comfy").state, ManagedPhase::stopped);
  EXPECT_TRUE(w.crashes.empty());  // asked for: not a crash
  EXPECT_TRUE(w.finished.size() == 1u);  // the start's answer only: the stop waits for the memory
  w.sample();
  ASSERT_TRUE(w.has_event("service.stopped"));
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
  EXPECT_EQ(w.m("comfy").state, ManagedPhase::stopping);
  EXPECT_TRUE(w.signals.empty());  // no pid to signal yet
  ASSERT_EQ(w.finished.size(), 1u);
  EXPECT_EQ(w.finished[0].request_id, 1u);
  EXPECT_FALSE(w.finished[0].ok);
  EXPECT_EQ(w.finished[0].message, "the start of comfy was cancelled by a stop");

  w.feed(ChildStarted{"comfy", true, 500, 99, "", false});
  ASSERT_EQ(w.signals.size(), 1u);
  EXPECT_EQ(w.signals[0], (std::pair<std::string, int>{"comfy", SIGTERM}));
  EXPECT_EQ(w.m("comfy").state, ManagedPhase::stopping);
  w.tick(3s);
  EXPECT_TRUE(w.checks.empty());  // being stopped: not checked
  w.feed(ChildExited{"comfy", 500, std::nullopt, SIGTERM});
  EXPECT_EQ(w.m("comfy").state, ManagedPhase::stopped);
  EXPECT_TRUE(w.crashes.empty());  // the exit it asked for
  w.sample();
  ASSERT_EQ(w.finished.size(), 2u);
  EXPECT_EQ(w.finished[1].request_id, 2u);
  EXPECT_TRUE(w.finished[1].ok);
  EXPECT_FALSE(w.has_event("service.healthy"));
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
  EXPECT_EQ(w.m("comfy").state, ManagedPhase::failed);
}

TEST(ArbiterSupervisor, StartingAGroupMemberStopsTheOthers) {
  World w({managed("a", "heavy"), managed("b", "heavy")});
  start_healthy(w, "a", 500);
  w.feed(ServiceCommand{"b", Command::start, 3});
  ASSERT_EQ(w.signals.size(), 1u);
  EXPECT_EQ(w.signals[0], (std::pair<std::string, int>{"a", SIGTERM}));
  EXPECT_EQ(w.spawns.back(), "b");
  EXPECT_TRUE(w.has_event("service.group_stop"));
}

TEST(ArbiterSupervisor, RestartStopsThenStartsAndAPortConflictFailsTheStart) {
  World w({managed("comfy")});
  start_healthy(w, "comfy", 500);
  w.feed(ServiceCommand{"comfy", Command::restart, 4});
  EXPECT_EQ(w.signals.back().second, SIGTERM);
  w.feed(ChildExited{"comfy", 500, 0, std::nullopt});
  EXPECT_EQ(w.spawns.size(), 2u);
  w.feed(ChildStarted{"comfy", false, 0, 0, "port 8188 is taken by python3[812]", false});
  EXPECT_EQ(w.m("comfy").state, ManagedPhase::failed);
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

// Characterisation (docs/plans/supervision-one-machine.md, step 0): each phase's deadline is the
// Arbiter's next one, to the millisecond, pinned before the phases get one deadline each.
TEST(ArbiterSupervisor, EachPhaseHasItsDeadline) {
  World w({managed("comfy")});
  w.feed(ServiceCommand{"comfy", Command::start, 1});
  w.feed(ChildStarted{"comfy", true, 500, 99, "", false});
  const MonoTime started = w.now();
  // Starting: the first check a second after the start, then (one in flight) the start timeout.
  EXPECT_EQ(w.deadline(), started + 1s);
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
  EXPECT_EQ(w.m("comfy").state, ManagedPhase::stopped) << "an exit it was asked for";
  w.feed(ServiceCommand{"comfy", Command::start, 3});
  w.feed(ChildStarted{"comfy", true, 501, 99, "", false});
  w.tick(1s);
  w.feed(HealthChecked{"comfy", true, "200"});
  w.feed(ChildExited{"comfy", 501, 1, std::nullopt});
  ASSERT_EQ(w.m("comfy").state, ManagedPhase::backoff);
  EXPECT_EQ(w.deadline(), w.now() + 1s);
}

// A crash after more than a minute healthy backs off from 1 s again.
TEST(ArbiterSupervisor, ACrashAfterAMinuteHealthyBacksOffFromOneSecondAgain) {
  World w({managed("comfy")});
  start_healthy(w, "comfy", 500);
  w.feed(ChildExited{"comfy", 500, 1, std::nullopt});
  ASSERT_EQ(w.m("comfy").state, ManagedPhase::backoff);
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
  ASSERT_EQ(w.m("comfy").state, ManagedPhase::backoff);
  EXPECT_EQ(w.deadline(), w.now() + 1s) << "back to 1 s";
}

}  // namespace supervision_test
}  // namespace vramd
