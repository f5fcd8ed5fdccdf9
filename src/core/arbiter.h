// The Arbiter: the pure core. It is fed events with the time they happened and returns the
// actions to take; queries return snapshots. No I/O, no clock reads, no threads (DESIGN.md).
//
// It only routes: each domain is a part with its own state and its own test (docs/ARCHITECTURE.md):
//   Ledger         owners, attribution, history                      core/ledger.h
//   ServicePolicy  probes, idle, TTL, verified unload, escalation     core/service_policy.h
//   Admission      the lease queue, the budget, grants, wait reasons  core/admission.h
//   Supervision    the state machine of services vramd runs           core/supervision.h
//   Wakes          held requests' wakes: plan, room, call, load      core/wakes.h
// A part reads the others through World and asks them to act through intents (core/intents.h),
// which the Arbiter hands to the part that owns the state.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "core/actions.h"
#include "core/admission.h"
#include "core/clock.h"
#include "core/config.h"
#include "core/events.h"
#include "core/ledger.h"
#include "core/service_policy.h"
#include "core/service_status.h"
#include "core/supervision.h"
#include "core/wakes.h"

namespace vramd {

class Arbiter {
 public:
  explicit Arbiter(Config config);
  Arbiter(const Arbiter&) = delete;
  Arbiter& operator=(const Arbiter&) = delete;

  // Feeds one event that happened at `now`. Returns the actions to take, in order.
  std::vector<Action> handle(const Event& event, const Now& now);

  // When the next deadline falls due (an unload's verification, a health check, a SIGKILL after
  // stop_timeout, a restart after backoff, a lease's heartbeat or wait timeout): the shell sends
  // a Tick then. nullopt: nothing is due until the next event.
  std::optional<MonoTime> next_deadline() const;

  // What the host scan must gather for owner resolution.
  HostScanRequest scan_request() const { return ledger_.scan_request(); }

  const StatusSnapshot& status() const { return ledger_.status(); }
  // Every configured service, in config order, with its `managed` part and idle_since filled.
  std::vector<ServiceStatus> services() const;
  // nullptr for an unknown name. The pointee is a snapshot, valid until the next call.
  const ServiceStatus* service(const std::string& name) const;
  // The service's status without its `managed` part, copying nothing: nullptr when unknown.
  const ServiceStatus* service_policy_status(const std::string& name) const {
    return services_.find(name);
  }
  bool fast_sampling() const { return services_.any_unloading(); }
  // REQUIRES: nothing; an unknown GPU gives an empty view.
  HistoryView history(unsigned gpu, MonoTime now, Duration window, size_t max_points) const {
    return ledger_.history(gpu, now, window, max_points);
  }
  const Config& config() const { return config_; }

  // Leases: active ones (queued in admission order, then granted), and recently ended ones.
  std::vector<Lease> leases() const { return admission_.leases(); }
  bool has_leases() const { return !admission_.empty(); }
  const Lease* lease(uint64_t id) const { return admission_.find(id); }
  // Queued leases ahead of this one on its GPU (0 = next); nullopt when not queued.
  std::optional<size_t> queue_position(uint64_t id) const { return admission_.queue_position(id); }
  // GPU -> the queued lease first in line there (as of the last admission pass).
  const std::map<unsigned, uint64_t>& queue_heads() const { return admission_.queue_heads(); }
  // Holder pids to watch: (lease id, pid, start ticks).
  std::vector<std::tuple<uint64_t, int, uint64_t>> lease_holders() const {
    return admission_.holders();
  }
  // Whether suspend is offered here, as probed at start (core/suspend.h).
  const SuspendOffer& suspend_offer() const { return admission_.suspend_offer(); }
  // Host RAM not yet promised to granted leases.
  std::optional<Bytes> ram_available() const {
    return admission_.ram_available(ledger_.mem_available());
  }
  // Brings back the active leases the store kept across a restart. `alive`: lease ids whose
  // holder pid still runs (same start time). Returns what changed (leases that end now).
  // `first_free_id`: the lowest id the store has never used.
  std::vector<Action> restore_leases(std::vector<Lease> leases, const std::vector<uint64_t>& alive,
                                     const Now& now, uint64_t first_free_id = 1);
  // Brings back the load peaks the store kept (core/wake.h); before the first event.
  void restore_load_peaks(const std::vector<LoadPeak>& peaks) {
    services_.restore_load_peaks(peaks);
  }
  // Brings back the wake times the store kept (core/sleep.h); before the first event.
  void restore_wake_times(const std::vector<WakeTime>& times) { services_.restore_wake_times(times); }
  // Brings back the demand histograms the store kept (core/demand.h); before the first event.
  void restore_demand(const std::vector<DemandHistory>& demand) { services_.restore_demand(demand); }
  void restore_variants(const std::vector<ServiceVariant>& latest) {
    services_.restore_variants(latest);
  }
  // Whether a request for `service` (naming `model`) can go through now, without a wake
  // (core/wake.h plan_wake). Unknown services: true (the caller answers for them).
  bool ready_for(const std::string& service, const std::string& model, bool can_wake) const;
  // The host RAM a new sleeper may keep now: MemAvailable, less what granted leases were
  // promised, less [host] ram_reserve. nullopt: unknown.
  std::optional<Bytes> sleep_ram_room() const;
  const Wakes& wakes() const { return wakes_; }
  // The id the next LeaseRequested should carry (vramd's own start leases take ids from the
  // same counter).
  uint64_t next_lease_id() const { return admission_.next_id(); }

  // Several hosts on one store (core/cluster.h): this host's room for a claim from the shared
  // queue (no local grant until the ClusterSynced that answers it), the cluster leases queued
  // (the first `limit`) and granted here, and the id space of this host's leases.
  ClaimContext begin_claim(const std::string& host, const Now& now) {
    return admission_.claim_context(world(), host, now.mono);
  }
  bool claiming() const { return admission_.claiming(); }
  std::vector<uint64_t> cluster_queued(size_t limit) const { return admission_.cluster_queued(limit); }
  std::vector<uint64_t> cluster_granted() const { return admission_.cluster_granted(); }
  // When the store last took this host's heartbeat (sent then); nullopt: never (or no store).
  std::optional<MonoTime> store_contact() const { return admission_.store_contact(); }
  // Shared leases this host gave up while cut off, for the next claim round to re-queue.
  std::vector<uint64_t> cluster_fenced() const {
    return {admission_.fenced().begin(), admission_.fenced().end()};
  }
  void set_lease_id_space(uint64_t stride, uint64_t offset) { admission_.set_id_space(stride, offset); }

 private:
  World world() const { return {config_, ledger_, services_, supervision_, admission_, wakes_}; }
  // Hands each intent to the part that owns its state, until none is left.
  void route(Intents& intents, const Now& now, std::vector<Action>& actions);
  void on_sample(const SampleTaken& s, const Now& now, std::vector<Action>& actions,
                 Intents& intents);
  // ServiceDiscovered: a service joins the config (and every part) at run time.
  void add_discovered(ServiceConfig cfg, const Now& now, std::vector<Action>& actions);

  Config config_;
  Ledger ledger_;
  ServicePolicy services_;
  Admission admission_;
  Supervision supervision_;
  Wakes wakes_;
  bool fast_sampling_on_ = false;
  mutable std::map<std::string, ServiceStatus> views_;  // what service() last returned, by name
};

}  // namespace vramd
