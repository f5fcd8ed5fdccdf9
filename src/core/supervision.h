// Supervision: the state machine of each service vramd runs (`start`): start (through start
// admission when its size is known: core/wake.h load_need), health checks, restarts with exponential backoff,
// crash loops, stop with SIGKILL after stop_timeout and a check that its GPU memory went,
// exclusive groups. Starts, stops and restarts of containers and units are handed to the shell.
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

  // nullptr unless vramd runs this service.
  const ManagedState* find(const std::string& service) const;
  // (service, root pid) of every child: the ledger names their processes' memory.
  std::vector<std::pair<std::string, int>> children() const;
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

  const Config& config_;
  std::map<std::string, ManagedState> managed_;  // services with `start`, by name
};

}  // namespace vramd
