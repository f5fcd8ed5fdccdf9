// Several hosts, one queue (issue 17; DESIGN in docs/ARCHITECTURE.md "Several hosts on one
// store"). With a PostgreSQL store a client's lease goes to a queue every host shares; each host
// claims from it, in one transaction of its store thread (SELECT ... FOR UPDATE SKIP LOCKED), the
// leases it can grant now. Which ones it can is decided here, by pure functions the store thread
// calls inside that transaction on a snapshot of this host's room that Admission took on the
// event loop (Admission::claim_context): no I/O, no clock, the same answer for the same rows.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/clock.h"
#include "core/eviction.h"
#include "core/lease.h"

namespace vramd {

// One GPU of this host as a claim sees it: what a new lease may take there now.
struct ClaimGpu {
  unsigned index = 0;
  Bytes free = 0;   // the budget: total − reserve − used − what granted leases still reserve
  Bytes total = 0;
  std::string holders;  // "comfyui holds 16.0 GiB, busy" (the largest few), for the reason
  // Idle services here that may be unloaded to make room for a shared lease (core/eviction.h:
  // evictable, not in use by a lease, not being unloaded already), with what each holds here.
  std::vector<EvictionCandidate> evictable;
};

// Services this host unloads to make room for one lease of the shared queue.
struct ClaimEviction {
  uint64_t lease = 0;
  unsigned gpu = 0;
  std::vector<std::string> services;  // least recently used first
};

// This host's room at the start of a claim. Admission grants nothing else until the claim's
// answer comes back (ClusterSynced), so the room cannot be promised twice.
struct ClaimContext {
  std::string host;
  bool sampled = false;         // no sample yet: nothing is claimed
  // This host cannot vouch for a shared lease now (no heartbeat written to the store recently
  // enough, Admission::in_touch): nothing is claimed. The text says since when.
  std::string cut_off;
  std::vector<ClaimGpu> gpus;   // those that admit leases and have no local lease in line
  std::optional<Bytes> ram;     // host RAM not yet promised
  MonoTime at{};                // when it was taken (what a candidate has waited is told from it)
  // How long a live host that has not yet looked at a lease (no reason of its own for it) holds
  // up an eviction for it: [daemon] host_timeout.
  Duration patience = std::chrono::seconds(30);
  std::map<uint64_t, ClaimEviction> evicting;  // shared leases this host is unloading for now
};

// What the store says of one candidate beyond its row: the other live hosts' word on it.
struct ClaimPeers {
  std::string making_room;  // the live host (maybe this one) marked as unloading for it; "": none
  // Live hosts besides this one that may take it and have not yet said why they cannot (no
  // reason of theirs is stored): one of them may have room for it as it is.
  size_t unconsidered = 0;
  // Other live hosts that could take it after unloading idle services: the reload cost of that
  // (ms, the sum of the services' reload costs), as each last wrote it.
  std::map<std::string, int64_t> evict_costs;
};

struct ClaimDecision {
  std::vector<std::pair<uint64_t, unsigned>> grant;  // lease id -> GPU, in queue order
  std::map<uint64_t, std::string> reasons;           // why each other candidate waits here
  // This host's cost (ms of reload) of making room for each candidate it could take after
  // unloading idle services; stored beside its reason for the other hosts to compare.
  std::map<uint64_t, int64_t> evict_costs;
  std::vector<ClaimEviction> evict;  // make room for these now (marked as this host's in the store)
  std::vector<uint64_t> unmark;      // this host made room for these and is done: others' turn
};

// Which of `candidates` (queued leases of the shared queue this host may take, in priority then
// FIFO order) this host grants now, and on which GPU: each where it fits most tightly. A lease that
// fits no GPU holds the line on the GPU with the most free (as in the local queue): the leases
// behind it may use this host's other GPUs only. The others get this host's reason
// ("gpu1: needs 12.0 GiB; GPU 0: 9.5 GiB free of 24.0 GiB; comfyui holds 16.0 GiB, busy").
//
// Room by eviction: a lease that holds the line here and would fit after unloading idle services
// (choose_eviction over the GPU's `evictable`, the cheapest set) is one this host makes room for,
// once no other host can take it as it is and this host is the cheapest that could: no live host
// is marked as making room for it, and either every other live host that may take it has said why
// it cannot (`peers.unconsidered == 0`; a host with room grants it instead of writing a reason, so
// hosts that fit it win) or it waited `patience`, or it names this host; and no other host wrote
// a lower cost (ties: the lower host name). The store marks it as this host's in the same
// transaction (one host at a time). A lease marked as this host's that it no longer unloads for
// (the unloads have their verdicts) and that still does not fit is unmarked: back to every host,
// and its reason says the unload freed too little.
ClaimDecision choose_claims(const ClaimContext& ctx, const std::vector<Lease>& candidates,
                            const std::map<uint64_t, ClaimPeers>& peers = {});

// A granted lease of a host whose heartbeat lapsed, as the store keeps it from now on: queued
// again (on_host_lost = requeue: its place by its first request kept, no GPU, no holder pid: the
// holder was on the lost host) or ended (on_host_lost = end). `now`: the clocks of the host that
// does it.
Lease after_host_lost(Lease l, const std::string& lost_host, const Now& now);

// One lease this host queued that another host now holds (or held and ended).
struct MovedLease {
  uint64_t id = 0;
  std::string host;
  std::optional<unsigned> gpu;
  bool ended = false;
  // Still queued, kept by `host` now: it re-queued this host's queue while this one was taken
  // for lost (cut off). This host stops keeping it; its API reads it from the store.
  bool kept_there = false;
};

// What a lost host's leases became, as the host that re-queued them reports it.
struct LostHost {
  std::string host;
  std::vector<Lease> requeued;  // now queued again (kept by this host)
  std::vector<Lease> ended;     // on_host_lost = end
  std::vector<Lease> released;  // their holders asked another host's API for it meanwhile
};

// The answer of one claim round (and of a heartbeat's look at lost hosts), fed to the Arbiter.
struct ClusterSynced {
  bool ok = true;               // false: the store failed; only the claim pause is lifted
  bool answers_claim = true;    // false: only lost_hosts (a heartbeat's), no claim was asked
  std::vector<Lease> claimed;   // granted on this host now (written so in the store)
  std::vector<MovedLease> moved;
  // Granted here as this host believes, no longer so in the store (re-queued while this host
  // was taken for lost): dropped, never granted twice.
  std::vector<uint64_t> lost;
  std::vector<std::pair<uint64_t, std::string>> releases;  // ended from another host's API
  std::vector<uint64_t> heard;  // heartbeats another host's API heard for leases held here
  std::map<uint64_t, std::string> reasons;  // every host's reason for leases queued here
  std::vector<LostHost> lost_hosts;
  std::vector<ClaimEviction> evict;  // unload these to make room for these shared leases
  std::vector<uint64_t> unmarked;    // this host made room for these, too little: others' turn
  // Self-fencing: shared leases this host gave up while cut off (on_host_lost = requeue) whose
  // rows were still granted here, now queued again in the store and kept here (as a lost host's
  // are kept by the host that re-queues them); and every fenced id the round took care of.
  std::vector<Lease> requeued_here;
  std::vector<uint64_t> fence_done;
  // Fenced leases whose holder asked another host's API to release them meanwhile: each as the
  // store had it (state `released`, its end_reason the one asked). Its row is left granted here,
  // with its `release`, for this host to end with its `lease.released` (one write, as any end).
  std::vector<Lease> fence_released;
};

}  // namespace vramd
