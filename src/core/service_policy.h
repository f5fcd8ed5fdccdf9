// Service policy: what each service's API says (probes), how much it holds, how long it has been
// idle, its idle TTL, verified unloads with their verdict, escalation and backoff, and its learned
// reload cost. It owns every ServiceStatus but the `managed` part (supervision's).
#pragma once

#include <map>
#include <optional>
#include <set>
#include <utility>
#include <string>
#include <vector>

#include "core/actions.h"
#include "core/clock.h"
#include "core/config.h"
#include "core/demand.h"
#include "core/events.h"
#include "core/intents.h"
#include "core/ledger.h"
#include "core/probe_pacing.h"
#include "core/service_status.h"
#include "core/unload.h"

namespace vramd {

class ServicePolicy {
 public:
  // REQUIRES: `config` outlives it (the Arbiter owns both).
  explicit ServicePolicy(const Config& config);
  // A service added at run time (ServiceDiscovered). REQUIRES: `svc` is in the config now.
  void add(const ServiceConfig& svc);

  // Answers with ScheduleProbe (core/probe_pacing.h). `decisions_pending`: an eviction may soon
  // be decided on the services' answers (a lease queued, a shared store): no backing off.
  void on_probe(const ProbeDone& e, const Now& now, bool decisions_pending,
                std::vector<Action>& actions);
  void on_requests(const RequestsInFlight& e, const Now& now, std::vector<Action>& actions);
  // Something changed the service (a start, an exit, an unload, requests): its probes go back to
  // probe_interval, counted from its last probe (ScheduleProbe when that is sooner).
  void reset_pace(const std::string& service, bool decisions_pending, const Now& now,
                  std::vector<Action>& actions);
  // A health check (Supervision's) that disagrees with the last probe: probed at once.
  void on_health_seen(const HealthChecked& e, const Now& now, std::vector<Action>& actions);
  // After the ledger attributed a sample: each service's bytes and activity, reload costs, the
  // verification of unloads under way, and idle TTLs. `in_use`: services a granted lease works
  // through (never unloaded by TTL).
  // Also brings a backed-off probe forward (ScheduleProbe) once what the sample shows, or a
  // decision now pending, wants it sooner.
  void on_sample(const Ledger& ledger, const std::set<std::string>& in_use, bool decisions_pending,
                 const Now& now, std::vector<Action>& actions, Intents& intents);
  // Time passes: unloads whose verification timed out get their verdict.
  void on_tick(const Now& now, std::vector<Action>& actions, Intents& intents);

  void on_unload_requested(const UnloadRequested& e, const Now& now, std::vector<Action>& actions);
  void on_unload_call_done(const UnloadCallDone& e, const Now& now, std::vector<Action>& actions,
                           Intents& intents);
  // Starts an unload (for an eviction, an exclusive group) without the checks a request gets.
  // REQUIRES: `service` is configured.
  void start_unload(const std::string& service, UnloadReason reason, uint64_t request_id,
                    const Now& now, std::vector<Action>& actions);

  // Brings back the load peaks the store kept (services no longer configured are skipped).
  void restore_load_peaks(const std::vector<LoadPeak>& peaks);
  // Brings back the wake times the store kept.
  void restore_wake_times(const std::vector<WakeTime>& times);
  // The host RAM a new sleeper may keep now (core/wake.h choose_depth); the Arbiter sets it
  // before each event from the ledger, the leases and [host] ram_reserve.
  void set_ram_room(std::optional<Bytes> room) { ram_room_ = room; }
  std::optional<Bytes> ram_room() const { return ram_room_; }
  // A wake finished (core/wakes.h): the service is awake; its time is learned.
  void on_woken(const WokenIntent& w, const Now& now, std::vector<Action>& actions);
  // Brings back what each service last ran with (the store's latest variant of each): a change
  // seen by the first probe after a restart of vramd is told as one.
  void restore_variants(const std::vector<ServiceVariant>& latest);
  // vramd started the service's process: what it runs is `start` (a change of it is told).
  void on_started(const std::string& service, const Now& now, std::vector<Action>& actions);
  // Brings back the demand histograms the store kept (core/demand.h).
  void restore_demand(const std::vector<DemandHistory>& demand);
  // When the service is asked for; nullptr before its first busy spell.
  const Demand* demand(const std::string& name) const;
  // Host RAM is short: the sleeper keeping the most host RAM is put deeper (stopped), if vramd
  // can stop it. Returns whether one was.
  bool deepen(const DeepenIntent& d, const Now& now, std::vector<Action>& actions,
              Intents& intents);

  // Whether NVIDIA's cuda-checkpoint works here (SuspendProbed): suspend is then a depth for a
  // service without an unload call or refused one (docs/proxy.md "Depths").
  void set_suspend_offered(bool offered) { suspend_offered_ = offered; }
  // Suspend is a depth this service may sleep at: offered, its GPU processes known, and no
  // unload call of its own (or its last was refused), nor a suspend that failed before.
  bool may_suspend(const ServiceStatus& st) const;
  // vramd has a way to free what the service holds: its unload call, a stop (vramd runs it, or
  // knows its container or unit), or a suspend. One it has none for is never evicted nor
  // unloaded by its idle TTL, and a lease's reason says so (core/eviction.h).
  bool can_free(const ServiceStatus& st) const {
    return st.can_unload || st.control != Control::none || may_suspend(st);
  }
  // What the utility says of a service's processes at vramd's start (CheckSuspension): those
  // checkpointed make it asleep at suspend, woken by a restore.
  void on_suspension_checked(const SuspensionChecked& e, const Now& now,
                             std::vector<Action>& actions);

  // nullptr for an unknown name. `managed` is not filled here (the Arbiter joins it).
  const ServiceStatus* find(const std::string& name) const;
  // REQUIRES: `name` is configured.
  const ServiceStatus& at(const std::string& name) const { return services_.at(name); }
  bool unloading(const std::string& name) const;
  bool any_unloading() const { return !unloads_.empty(); }
  // Services' own memory figures that cover their processes (core/service_kinds).
  std::map<Owner, Bytes> self_reports() const;
  // What a service holds on one GPU.
  Bytes bytes_on(const std::string& service, unsigned gpu) const;
  // The earliest moment an unload's verification times out; nullopt when none runs.
  std::optional<MonoTime> next_deadline() const;

 private:
  PaceContext pace_context(const ServiceStatus& st, bool decisions_pending) const;
  void apply_probe(ServiceStatus& st, const ServiceProbe& p, const Now& now,
                   std::vector<Action>& actions);
  // What the probe says it runs (version, arguments), and the prompts it finished
  // (core/service_variants.cc).
  void note_variant(ServiceStatus& st, const ServiceProbe& p, const Now& now,
                    std::vector<Action>& actions);
  void note_finished(ServiceStatus& st, const ServiceProbe& p, std::vector<Action>& actions);
  void bring_probes_forward(bool decisions_pending, const Now& now, std::vector<Action>& actions);
  void bring_forward(ServiceStatus& st, bool decisions_pending, const Now& now,
                     std::vector<Action>& actions);
  // An unload in progress: from the call to the verdict.
  struct UnloadRun {
    uint64_t id = 0;
    uint64_t request_id = 0;
    std::string service;
    UnloadReason reason = UnloadReason::manual;
    MonoTime requested_at{};
    std::map<unsigned, Bytes> before;  // per GPU
    std::optional<Bytes> rss_before;
    std::optional<UnloadVerification> verification;  // set once the call returned
    Duration timeout{0};
    Duration call_duration{0};
    SleepDepth depth = SleepDepth::sleep2;
    std::vector<int> pids;  // suspend: the processes the utility checkpoints
    // suspend chosen after the server's call: what would have become of the unload without it
    std::optional<IneffectiveUnload> fallback;
    // Its unload is a stop (it has no unload call): the stop was asked, and the verdict is the
    // GPU's numbers after it, as for any unload. `why`: why a stop (the adapter's words).
    bool stopped = false;
    std::string why;
  };
  // A server without an unload call (or whose suspend failed) that vramd can stop: the stop is
  // its unload, asked now and verified from the GPU's numbers (stop_timeout longer than the
  // kind's unload_timeout). False, and nothing done, when vramd cannot stop it.
  bool unload_by_stop(UnloadRun& run, ServiceStatus& st, const std::string& why, const Now& now,
                      std::vector<Action>& actions, Intents& intents);
  // Asks for `action` (stop, restart) its backend's way: Supervision for a process or a
  // container, systemd for a unit. REQUIRES: st.control is not none.
  void ask_lifecycle(const ServiceStatus& st, const ServiceConfig& cfg, Command action,
                     std::vector<Action>& actions, Intents& intents) const;
  // Sends the run's call: its server's unload, or at `suspend` the utility's.
  void call_unload(UnloadRun& run, const ServiceStatus& st, std::vector<Action>& actions);
  // Services holding nothing whose processes may be checkpointed from before vramd's start:
  // their CUDA state is read once (CheckSuspension).
  void check_suspended_at_start(std::vector<Action>& actions);
  void update_holdings(const Ledger& ledger, const Now& now);
  // A request or a busy probe: a new busy spell when it had been idle kSpellGap; the end of a
  // prewarm's wait (used).
  void on_asked(ServiceStatus& st, const Now& now, std::vector<Action>& actions);
  void learn_reload_costs(const Now& now);
  void learn_load_peaks(std::vector<Action>& actions);
  void check_idle_ttl(const std::set<std::string>& in_use, const Now& now,
                      std::vector<Action>& actions);
  void advance_unloads(const Now& now, std::vector<Action>& actions, Intents& intents);
  // escalate: none (by outcome and on_ineffective_unload) or the action wanted (stop).
  void finish_unload(UnloadRun& run, UnloadOutcome outcome, const std::string& message,
                     std::optional<IneffectiveUnload> escalate, const Now& now,
                     std::vector<Action>& actions,
                     Intents& intents);

  const Config& config_;
  std::map<std::string, ServiceStatus> services_;  // by name
  std::map<uint64_t, UnloadRun> unloads_;          // in progress, by id
  uint64_t next_unload_id_ = 1;
  std::map<std::string, Bytes> last_bytes_;  // each service's bytes in the previous sample
  // (service, model) -> the load peak the store last heard of (RememberLoadPeak).
  std::map<std::pair<std::string, std::string>, Bytes> saved_peaks_;
  std::optional<MonoTime> last_sample_at_;
  std::optional<Bytes> ram_room_;
  std::optional<MonoTime> last_deepen_;  // one shortage deepens one sleeper at a time
  std::set<std::string> cannot_deepen_told_;  // said once per service
  std::map<std::string, Demand> demand_;      // by service
  bool suspend_offered_ = false;
  std::set<std::string> suspension_checked_;  // services whose CUDA state was read at start
};

}  // namespace vramd
