// Supervision: one state machine for each service vramd supervises: a process it runs (`start`),
// a container (match.container, no `start`) through its engine, or a unit (match.unit, no
// `start`) through systemd. Start (a process's through start admission when its size is known:
// core/wake.h load_need), health checks, restarts with exponential backoff, crash loops, stop
// (SIGKILL after stop_timeout for a process; the engine's stop_timeout otherwise) and a check
// that its GPU memory went, exclusive groups. What differs by backend is data
// (supervision_detail::traits); the engines' answers and states, and their own restart policies
// (Docker's, a unit's Restart=), are read in core/supervision_containers.cc.
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
#include "core/supervised.h"

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

  // What it is now (Supervised::view): nullopt unless vramd runs this service, or it is a
  // container or unit whose state the engine told.
  std::optional<ManagedState> find(const std::string& service) const;
  // (service, root pid) of every child: the ledger names their processes' memory.
  std::vector<std::pair<std::string, int>> children() const;
  // (service, MainPID) of every unit systemd says runs.
  std::vector<std::pair<std::string, int>> unit_main_pids() const;
  // The earliest moment a deadline of supervise falls due; nullopt when none.
  std::optional<MonoTime> next_deadline() const;

 private:
  using Supervised = supervision_detail::Supervised;  // core/supervised.h
  // The entry of `service` when vramd runs its process (engine_run: when an engine runs it), else
  // null.
  Supervised* process(const std::string& service);
  Supervised* engine_run(const std::string& service);

  void spawn(const std::string& service, Supervised& s, bool force, const World& world,
             const Now& now, std::vector<Action>& actions, Intents& intents);
  void launch(const std::string& service, Supervised& s, const World& world, const Now& now,
              std::vector<Action>& actions, Intents& intents);
  void end_start_lease(const std::string& service, Supervised& s, const std::string& why,
                       Intents& intents);
  // A stop asked by a client or another part: waits with one under way.
  void stop(const std::string& service, Supervised& s, uint64_t request_id, const World& world,
            const Now& now, std::vector<Action>& actions, Intents& intents);
  // Ends what runs, its backend's way: SIGTERM to a process (SIGKILL at stop_timeout), a stop
  // asked of the engine (with stop_timeout).
  void stop_child(const std::string& service, Supervised& s, const World& world, const Now& now,
                  std::vector<Action>& actions);
  void finish_waiters(Supervised& s, std::optional<Command> kind, bool ok,
                      const std::string& message, std::vector<Action>& actions);
  void verify_stop(const std::string& service, Supervised& s, const World& world, const Now& now,
                   std::vector<Action>& actions);

  // The phase's deadline or the next health check, whichever comes first (nullopt: none).
  std::optional<MonoTime> due(const std::string& service, const Supervised& s) const;
  // Its backoff ran out: started again, its own way.
  void restart_after_backoff(const std::string& service, Supervised& s, const World& world,
                             const Now& now, std::vector<Action>& actions, Intents& intents);
  // It did not answer a health check within start_timeout.
  void start_timed_out(const std::string& service, Supervised& s, const World& world,
                       const Now& now, std::vector<Action>& actions);
  // health_failures checks in a row failed while it ran: `why`.
  void unhealthy(const std::string& service, Supervised& s, const std::string& why,
                 const World& world, const Now& now, std::vector<Action>& actions);
  // "comfy (pid 501)", "comfy (container comfyui)", "comfy (unit comfy.service)".
  static std::string label(const std::string& service, const Supervised& s);

  const Config& config_;
  std::map<std::string, Supervised> supervised_;  // by service name
};

}  // namespace vramd
