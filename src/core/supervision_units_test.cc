// Supervision of systemd units (match.unit, no `start`) on a virtual clock: the same code as
// containers (supervision_containers.cc), asked through systemctl (Lifecycle via unit), told by
// systemd's state (ContainerChanged with ExecMainStatus, a signal, Result=). A stop is answered
// once systemd stopped it and its memory went (named by the unit's MainPID); systemd's own
// Restart= is respected; a run vramd did not end is a crash record whose logs are the journal's.
#include <csignal>

#include <gtest/gtest.h>

#include "core/arbiter.h"
#include "core/supervision_world.h"

namespace vramd {
// Named, not anonymous: its helpers share a unity batch with other tests' (cmake/unity.cmake).
namespace supervision_units_test {

using namespace std::chrono_literals;

// The shared World, and systemd's word about "comfy" as the unit watch reads it.
class World : public supervision_world::World {
 public:
  explicit World(ServiceConfig svc) : supervision_world::World(std::move(svc)) {}
  ContainerChanged read(bool running, const std::string& restart = "no", int pid = 0) {
    ContainerChanged e;
    e.service = "comfy";
    e.running = running;
    e.restart_policy = parse_engine_restart(restart);  // as the reader parses systemd's words
    e.main_pid = pid;
    return e;
  }
  ContainerChanged died(std::optional<int> code, std::optional<int> sig, std::string result,
                        const std::string& restart = "no") {
    ContainerChanged e = read(false, restart);
    e.died = true;
    e.exit_code = code;
    e.signal = sig;
    e.result = parse_unit_result(result);
    return e;
  }
};

ServiceConfig comfy() { return supervision_world::comfy_run_by(Control::unit); }

TEST(UnitSupervision, ItsMainPidsMemoryIsTheUnitsAndAStopWaitsForItToGo) {
  World w(comfy());
  EXPECT_EQ(w.m(), nullptr);  // nothing shown before systemd answers
  w.feed(w.read(true, "no", 4242));
  ASSERT_NE(w.m(), nullptr);
  EXPECT_EQ(w.m()->state, ManagedPhase::running);
  EXPECT_EQ(w.m()->pid, 4242);
  w.sample(4242, 10 * GiB);
  EXPECT_EQ(w.bytes(), 10 * GiB);  // named by MainPID, though its cgroup says nothing

  w.feed(ServiceCommand{"comfy", Command::stop, 1, false});
  ASSERT_EQ(w.asked.size(), 1u);
  EXPECT_EQ(w.asked[0].via, Control::unit);
  EXPECT_EQ(w.asked[0].target, "comfyui.service");
  EXPECT_EQ(w.asked[0].action, Command::stop);
  w.feed(w.died(std::nullopt, SIGTERM, "success"));  // the stop it asked for: no crash
  EXPECT_TRUE(w.crashes.empty());
  w.feed(LifecycleDone{"comfy", Command::stop, true, "systemctl stop comfyui.service: done"});
  w.sample(4242, 10 * GiB);  // systemctl returned, the memory is still there: no answer yet
  EXPECT_TRUE(w.finished.empty());
  w.sample(0, 0);
  ASSERT_EQ(w.finished.size(), 1u);
  EXPECT_TRUE(w.finished[0].ok) << w.finished[0].message;
  EXPECT_EQ(w.m()->state, ManagedPhase::stopped);
  EXPECT_EQ(w.count("service.stopped"), 1u);
}

TEST(UnitSupervision, SystemdsOwnRestartIsRespectedAsItsTableSays) {
  struct Case {
    std::string restart;
    std::optional<int> code, sig;
    std::string result;
    bool systemd_restarts;
  };
  const Case cases[] = {
      {"always", 0, std::nullopt, "success", true},
      {"on-failure", 1, std::nullopt, "exit-code", true},
      {"on-failure", std::nullopt, SIGKILL, "signal", true},
      {"on-abnormal", 1, std::nullopt, "exit-code", false},
      {"on-abnormal", std::nullopt, SIGSEGV, "core-dump", true},
      {"on-abort", std::nullopt, SIGABRT, "signal", true},
      {"on-abort", 2, std::nullopt, "exit-code", false},
      {"on-success", 3, std::nullopt, "exit-code", false},
      {"on-watchdog", std::nullopt, SIGABRT, "watchdog", true},
      {"on-failure", 1, std::nullopt, "start-limit-hit", false},
  };
  for (const Case& c : cases) {
    ServiceConfig svc = comfy();
    svc.restart = RestartPolicy::on_failure;
    World w(svc);
    w.feed(w.read(true, c.restart, 10));
    w.feed(w.died(c.code, c.sig, c.result, c.restart));
    EXPECT_EQ(w.count("service.systemd_restarts"), c.systemd_restarts ? 1u : 0u)
        << c.restart << " " << c.result;
    if (c.systemd_restarts) {
      EXPECT_EQ(w.m()->state, ManagedPhase::stopped) << c.restart;  // systemd's to bring back
      w.tick(3s);
      EXPECT_TRUE(w.asked.empty()) << c.restart;  // vramd does not start it too
      w.feed(w.read(true, c.restart, 11));        // systemd's new run
      EXPECT_EQ(w.m()->state, ManagedPhase::starting);
      EXPECT_EQ(w.m()->pid, 11);
    }
  }
}

TEST(UnitSupervision, AKillBySignalIsACrashAndACleanSigtermIsAnExit) {
  {
    World w(comfy());
    w.feed(w.read(true, "no", 10));
    w.feed(w.died(std::nullopt, SIGKILL, ""));  // no Result=: derived from the signal
    ASSERT_EQ(w.crashes.size(), 1u);
    EXPECT_EQ(w.crashes[0].signal, SIGKILL);
    EXPECT_EQ(w.m()->last_signal, SIGKILL);
    EXPECT_EQ(w.count("service.crashed"), 1u);
  }
  {
    World w(comfy());
    w.feed(w.read(true, "no", 10));
    w.feed(w.died(std::nullopt, SIGTERM, "success"));  // someone else's `systemctl stop`
    EXPECT_TRUE(w.crashes.empty());
    EXPECT_EQ(w.count("service.exited"), 1u);
    EXPECT_EQ(w.m()->state, ManagedPhase::stopped);
  }
}

TEST(UnitSupervision, ARunThatEndedBetweenTwoReadsIsStillACrash) {
  World w(comfy());
  w.feed(w.read(true, "always", 10));
  // systemd restarted it before the next read: how the run ended is gone (ExecMainCode 0).
  w.feed(w.died(std::nullopt, std::nullopt, "", "always"));
  ASSERT_EQ(w.crashes.size(), 1u);
  EXPECT_EQ(w.count("service.systemd_restarts"), 1u);
}

}  // namespace supervision_units_test
}  // namespace vramd
