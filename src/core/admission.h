// Admission (DESIGN.md "Budget", "Admission"): the lease queue in priority then FIFO order per
// GPU, the budget, grants, exclusive groups, why each waiting lease waits (one function), and the
// lifetimes of leases (heartbeats, holders, wait timeouts). What it needs done elsewhere, an
// eviction, a group member stopped, a start launched, it returns as intents.
#pragma once

#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "core/actions.h"
#include "core/cluster.h"
#include "core/clock.h"
#include "core/config.h"
#include "core/events.h"
#include "core/eviction.h"
#include "core/intents.h"
#include "core/lease.h"
#include "core/ledger.h"

namespace vramd {

class Admission {
 public:
  // REQUIRES: `config` outlives it (the Arbiter owns both).
  explicit Admission(const Config& config);

  // A client's lease. Ids never repeat; an id seen before is ignored.
  void on_requested(const LeaseRequested& e, const Now& now, std::vector<Action>& actions);
  // vramd's own lease for starting a service (start admission). Returns its id.
  uint64_t queue_start(LeaseRequest request, const Now& now, std::vector<Action>& actions);
  // vramd's own claim for the room of a request's wake (core/wakes.h). Returns its id.
  uint64_t queue_wake(LeaseRequest request, const Now& now, std::vector<Action>& actions);
  void on_released(const LeaseReleased& e, const Now& now, std::vector<Action>& actions);
  void on_heartbeat(const LeaseHeartbeat& e, const Now& now);
  void on_holder_exited(const HolderExited& e, const Now& now, std::vector<Action>& actions);
  // Ends a lease: granted → released, queued → cancelled. Unknown ids are ignored.
  void end(uint64_t id, const std::string& why, const Now& now, std::vector<Action>& actions);
  // Heartbeats and wait timeouts (at most one walk a second).
  void check_deadlines(const Now& now, std::vector<Action>& actions);
  // After a sample: what each granted lease's holder uses (and overuse).
  void update_holdings(const World& world, const Now& now, std::vector<Action>& actions);
  // One admission pass: grants what fits, plans evictions for the rest and says why each waits.
  void admit(const World& world, const Now& now, std::vector<Action>& actions, Intents& intents);
  bool wants_admission() const {
    return !queue_.empty() || !evicting_for_.empty() || !suspended_.empty();
  }
  // Someone wants room: a lease queued (other than a prewarm's claim), an eviction under way, a
  // shared lease queued here. A prewarm waits for none of these.
  bool wants_room() const;
  // What a new lease could be granted on `gpu` now (the budget); nullopt: not admitting there.
  std::optional<Bytes> room_on(const World& world, unsigned gpu) const;

  // Several hosts (core/cluster.h). This host's room for a claim from the shared queue; until
  // on_cluster_synced, admit() grants nothing (the room is the claim's).
  ClaimContext claim_context(const World& world, const std::string& host, MonoTime now);
  // Also starts the unloads the claim chose to make room for shared leases (those still evictable).
  void on_cluster_synced(const ClusterSynced& e, const World& world, const Now& now,
                         std::vector<Action>& actions, Intents& intents);
  bool claiming() const { return claiming_; }
  // Cluster leases: the first `limit` queued here (in order), and those granted here.
  std::vector<uint64_t> cluster_queued(size_t limit) const;
  std::vector<uint64_t> cluster_granted() const;
  // Ids this host gives are `offset` modulo `stride` (hosts on one store never share an id).
  void set_id_space(uint64_t stride, uint64_t offset);
  // Whether suspend is offered here (issue 28): said once, as an event.
  void on_suspend_probed(const SuspendProbed& e, const Now& now, std::vector<Action>& actions);
  const SuspendOffer& suspend_offer() const { return suspend_; }
  // Preemptible leases (issue 28, core/admission_suspend.cc): the utility's answers.
  void on_suspend_done(const LeaseSuspendDone& e, const Now& now, std::vector<Action>& actions);
  void on_resume_done(const LeaseResumeDone& e, const Now& now, std::vector<Action>& actions);
  void on_suspension_checked(const SuspensionChecked& e, const Now& now,
                             std::vector<Action>& actions);
  // Leases being suspended, suspended or being resumed.
  const std::set<uint64_t>& suspensions() const { return suspended_; }
  // A suspend or resume under way (its bytes are watched leaving or coming back).
  bool moving_memory() const;
  // Self-fencing (docs/api.md "Guarantees"). The store took a heartbeat sent at `e.sent`.
  void on_store_contact(const StoreContact& e);
  // A host cut off from the store for host_timeout × 0.5 (or never in touch since it started)
  // gives up each shared lease granted here before any other host may re-queue it (after
  // host_timeout by the store's clock): it ends `lost`, and with on_host_lost = requeue it is
  // left for the store to re-queue (fenced()).
  void check_fence(const Now& now, std::vector<Action>& actions);
  // Shared leases fenced here (on_host_lost = requeue) whose rows the store has not yet been
  // told about: the next claim round re-queues those still granted here.
  const std::set<uint64_t>& fenced() const { return fenced_; }
  // Whether this host may vouch for its shared leases now (its last heartbeat is recent enough).
  bool in_touch(MonoTime now) const;
  std::optional<MonoTime> store_contact() const { return store_contact_; }

  // Brings back the active leases the store kept across a restart. `alive`: lease ids whose
  // holder pid still runs (same start time). `first_free_id`: the lowest id never used.
  void restore(std::vector<Lease> leases, const std::vector<uint64_t>& alive, const Now& now,
               uint64_t first_free_id, std::vector<Action>& actions);

  // Active leases (queued in admission order, then granted).
  std::vector<Lease> leases() const;
  bool empty() const { return leases_.empty(); }
  const Lease* find(uint64_t id) const;  // active or recently ended
  std::optional<size_t> queue_position(uint64_t id) const;
  const std::map<unsigned, uint64_t>& queue_heads() const { return heads_; }
  std::vector<std::tuple<uint64_t, int, uint64_t>> holders() const;
  // (owner name, holder pid) of granted leases: the ledger names their memory.
  std::vector<std::pair<std::string, int>> granted_holder_pids() const;
  // Services a granted lease works through: never evicted, never unloaded by TTL.
  std::set<std::string> services_in_use() const;
  bool evicting(const std::string& service) const { return evicting_for_.count(service) > 0; }
  std::optional<Bytes> ram_available(std::optional<Bytes> mem_available) const;
  uint64_t next_id() const { return next_id_; }
  // The earliest heartbeat, wait timeout or fence; nullopt when no lease has one.
  std::optional<MonoTime> next_deadline() const;

 private:
  using QueueKey = std::tuple<int, uint64_t, uint64_t>;  // (-priority, seq, id)
  static QueueKey queue_key(const Lease& l) { return {-l.request.priority, l.seq, l.id}; }
  void queue(uint64_t id, LeaseRequest request, const Now& now, std::vector<Action>& actions);
  void end_as(uint64_t id, LeaseState state, const std::string& why, const Now& now,
              std::vector<Action>& actions);
  // What lease `l` still needs on `gpu` (a lease for a service counts what it holds already).
  Bytes needs_on(const Lease& l, unsigned gpu, const World& world) const;
  // Where a waiting lease means to go and which idle services to evict there.
  // REQUIRES: `choices` not empty, each in `free`.
  struct EvictionPlan {
    unsigned gpu = 0;
    std::vector<std::string> evict;  // least recently used first
    std::vector<uint64_t> suspend;   // preemptible leases to suspend (issue 28)
    bool feasible = false;           // evicting (and suspending) them frees enough
  };
  EvictionPlan plan_evictions(const Lease& l, const std::vector<unsigned>& choices,
                              const std::map<unsigned, Bytes>& free,
                              const std::vector<std::string>& group_members, const World& world,
                              MonoTime now, bool may_suspend = true) const;
  // Free for a new lease on a GPU: total − reserve − used − what granted leases still reserve.
  Bytes budget(const GpuStatus& g) const;
  std::string group_of(const LeaseRequest& r) const;

  uint64_t align_id(uint64_t at_least) const;

  const Config& config_;
  std::set<QueueKey> cluster_queue_;  // cluster leases queued here: any host may claim them
  bool claiming_ = false;
  uint64_t id_stride_ = 1, id_offset_ = 0;
  std::map<uint64_t, Lease> leases_;                      // active, by id
  std::set<QueueKey> queue_;                              // queued ones, in admission order
  std::set<uint64_t> granted_;                            // granted ones
  std::map<std::optional<unsigned>, size_t> queued_for_;  // queued per GPU asked (nullopt: any)
  std::optional<MonoTime> last_deadline_check_;
  std::deque<Lease> ended_;  // the last ones that ended, newest last
  uint64_t next_seq_ = 1;
  uint64_t next_id_ = 1;
  std::map<std::string, uint64_t> evicting_for_;  // service being unloaded -> lease id
  std::map<unsigned, uint64_t> heads_;            // GPU -> the queued lease first in line there
  // Shared leases (maybe queued on another host) this host is unloading services for; pruned
  // when none of their unloads is under way any more.
  std::map<uint64_t, ClaimEviction> cluster_evicting_;
  // When the write of the last heartbeat the store took began (nullopt: none since the start).
  std::optional<MonoTime> store_contact_;
  SuspendOffer suspend_;
  std::set<uint64_t> fenced_;
  uint64_t last_token_ = 0;  // the last fencing token this host gave (local grants)
  // When the shared leases granted here are given up; nullopt: none is granted here.
  // Suspend (core/admission_suspend.cc). May `l` suspend others' work? Which granted leases
  // on `gpu` it may suspend, as eviction candidates (lease set), within the host RAM `ram_room`.
  bool may_preempt(const Lease& l) const;
  void suspend_candidates(const Lease& l, unsigned gpu, const World& world,
                          std::vector<EvictionCandidate>& out) const;
  Bytes suspending_on(unsigned gpu) const;  // bytes on their way off `gpu`
  std::optional<Bytes> suspend_ram_room(const World& world) const;
  void start_suspend(uint64_t id, const Lease& for_lease, const World& world, const Now& now,
                     std::vector<Action>& actions);
  // Resumes what fits, in priority order, and unloads idle services for one that does not; the
  // GPUs where one waits, with its priority and id: work of no higher priority does not take
  // them first.
  std::map<unsigned, std::pair<int, uint64_t>> resume_suspended(std::map<unsigned, Bytes>& free,
                                                                const World& world, const Now& now,
                                                                std::vector<Action>& actions,
                                                                Intents& intents);
  void settle_suspends(const Now& now, std::vector<Action>& actions);
  void verify_suspends(const Now& now, std::vector<Action>& actions);
  std::optional<MonoTime> suspend_deadline() const;
  // Its processes that hold memory on its GPU (the holdings the ledger gave it).
  std::vector<int> lease_pids(const Lease& l, const World& world) const;
  std::set<uint64_t> suspended_;       // leases with a suspension under way or in force
  double copy_bytes_per_s_ = 0;        // learned from suspends and resumes (0: not yet)

  std::optional<MonoTime> fence_due() const;
  void end_settled_evictions(const World& world);
  void prune_cluster_evictions();
};

// Why a lease waits on `gpu`: what it needs, what is free, and everyone in the way (the one
// place a wait reason is written). `group_members`: other members of its exclusive group that
// hold memory; `evicting`: services being unloaded for it now.
struct WaitContext {
  const Lease* lease = nullptr;
  unsigned gpu = 0;
  Bytes free = 0;
  std::string group;
  bool group_lease_running = false;
  std::optional<Bytes> ram_short_of;  // host RAM available when short of it
  std::vector<std::string> group_members;
  std::set<std::string> evicting;
  bool eviction_planned = false;  // a set of idle services that frees enough was found
};
LeaseReason wait_reason(const WaitContext& c, const World& world, MonoTime now);

}  // namespace vramd
