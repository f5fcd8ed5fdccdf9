// Supervision: the state machine of each service vramd runs (`start`): start (through start
// admission when its size is known: core/wake.h load_need), health checks, restarts with exponential backoff,
// crash loops, stop with SIGKILL after stop_timeout and a check that its GPU memory went,
// exclusive groups. Containers (match.container, no `start`) the same way through their engine
// (core/supervision_containers.cc): start, stop with stop_timeout, restart, health, restarts per
// policy unless Docker's own restart policy restarts them, crash records from their exits. Units
// (match.unit, no `start`) by the same code through systemd: its state read for their exits,
// its Restart= respected as Docker's policy is.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/actions.h"
#include "core/clock.h"
#include "core/config.h"
#include "core/events.h"
#include "core/intents.h"
#include "core/service_status.h"

namespace vramd {

class Supervision {
 public:
  // REQUIRES: `config` outlives it (the Arbiter owns both).
  explicit Supervision(const Config& config);

  // A start, stop or restart, asked by a client (request_id != 0 gets a CommandFinished) or by
  // another part (an escalation, a group, a lease: request_id 0).
  // REQUIRES: `service` is configured.
  void command(const std::string& service, Command action, uint64_t request_id, bool force,
               const World& world, const Now& now, std::vector<Action>& actions, Intents& intents);
  // Admission queued the start lease of `service` (id `lease`).
  void start_lease_queued(const std::string& service, uint64_t lease, const LeaseRequest& r,
                          const Now& now, std::vector<Action>& actions);
  // The start lease of `service` was granted: launch it if it still waits.
  void launch_granted(const std::string& service, uint64_t lease, const World& world,
                      const Now& now, std::vector<Action>& actions, Intents& intents);
  // A granted lease names `service`: start it if it is down (the lease holds its room).
  void start_for_lease(const StartForLeaseIntent& i, const World& world, const Now& now,
                       std::vector<Action>& actions, Intents& intents);

  void on_child_started(const ChildStarted& e, const Now& now, std::vector<Action>& actions,
                        Intents& intents);
  void on_child_exited(const ChildExited& e, const World& world, const Now& now,
                       std::vector<Action>& actions, Intents& intents);
  void on_health_checked(const HealthChecked& e, const World& world, const Now& now,
                         std::vector<Action>& actions, Intents& intents);
  // Deadlines: start timeouts, SIGKILL after stop_timeout, restarts after backoff, health checks.
  void on_tick(const World& world, const Now& now, std::vector<Action>& actions, Intents& intents);
  // After a sample: stops whose memory is gone (or whose verification ran out).
  void verify_stops(const World& world, const Now& now, std::vector<Action>& actions);
  // A container's engine did a start, stop or restart that Lifecycle asked for.
  void on_lifecycle_done(const LifecycleDone& e, const Now& now, std::vector<Action>& actions);
  // The engine (or systemd) says a container (a unit) runs, or died.
  void on_container_changed(const ContainerChanged& e, const World& world, const Now& now,
                            std::vector<Action>& actions);

  // vramd stops: the services it runs whose on_shutdown is `stop` get SIGTERM (their process
  // group; vramd does not wait for them); the others are left running, to be adopted again.
  void on_shutdown(const Now& now, std::vector<Action>& actions) const;

  // nullptr unless vramd runs this service, or it is a container whose state the engine told.
  const ManagedState* find(const std::string& service) const;
  // (service, root pid) of every child: the ledger names their processes' memory.
  std::vector<std::pair<std::string, int>> children() const;
  // (service, MainPID) of every unit systemd says runs.
  std::vector<std::pair<std::string, int>> unit_main_pids() const;
  // The earliest moment a deadline of supervise falls due; nullopt when none.
  std::optional<MonoTime> next_deadline() const;

 private:
  void spawn(const std::string& service, ManagedState& m, bool force, const World& world,
             const Now& now, std::vector<Action>& actions, Intents& intents);
  void launch(const std::string& service, ManagedState& m, const World& world, const Now& now,
              std::vector<Action>& actions, Intents& intents);
  void end_start_lease(const std::string& service, ManagedState& m, const std::string& why,
                       Intents& intents);
  void stop_child(const std::string& service, ManagedState& m, const World& world, const Now& now,
                  std::vector<Action>& actions);
  void finish_waiters(ManagedState& m, std::optional<Command> kind, bool ok,
                      const std::string& message, std::vector<Action>& actions);

  void verify_stop(const std::string& service, ManagedState& m, const World& world, const Now& now,
                   std::vector<Action>& actions);

  // A container or a unit: its phase as vramd last saw or asked for it, kept in a ManagedState
  // (pid: a unit's MainPID; unset for a container: the engine runs it).
  struct ContainerState {
    Control via = Control::container;  // container | unit
    std::string target;                // match.container, or match.unit
    ManagedState m;
    bool known = false;      // the engine has told its state at least once
    int expected_exits = 0;  // stops and restarts vramd asked for whose die has not come yet
    // The stop under way was counted in expected_exits (it was up, or not known yet). A unit's
    // die comes from a state read, maybe after systemctl's answer: a stop that was not counted
    // must not take the count of one that was.
    bool stop_counted = false;
  };
  void container_command(const std::string& service, ContainerState& c, Command action,
                         uint64_t request_id, const World& world, const Now& now,
                         std::vector<Action>& actions);
  void container_health(const HealthChecked& e, ContainerState& c, const World& world,
                        const Now& now, std::vector<Action>& actions);
  void container_tick(const World& world, const Now& now, std::vector<Action>& actions);
  void container_deadlines(std::optional<MonoTime>& out) const;

  const Config& config_;
  std::map<std::string, ManagedState> managed_;      // services with `start`, by name
  std::map<std::string, ContainerState> containers_;  // match.container or .unit, no `start`
};

}  // namespace vramd
