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
#include "core/lease.h"

namespace vramd {

// One GPU of this host as a claim sees it: what a new lease may take there now.
struct ClaimGpu {
  unsigned index = 0;
  Bytes free = 0;   // the budget: total − reserve − used − what granted leases still reserve
  Bytes total = 0;
  std::string holders;  // "comfyui holds 16.0 GiB, busy" (the largest few), for the reason
};

// This host's room at the start of a claim. Admission grants nothing else until the claim's
// answer comes back (ClusterSynced), so the room cannot be promised twice.
struct ClaimContext {
  std::string host;
  bool sampled = false;         // no sample yet: nothing is claimed
  std::vector<ClaimGpu> gpus;   // those that admit leases and have no local lease in line
  std::optional<Bytes> ram;     // host RAM not yet promised
};

struct ClaimDecision {
  std::vector<std::pair<uint64_t, unsigned>> grant;  // lease id -> GPU, in queue order
  std::map<uint64_t, std::string> reasons;           // why each other candidate waits here
};

// Which of `candidates` (queued leases of the shared queue this host may take, in priority then
// FIFO order) this host grants now, and on which GPU: each where it fits most tightly. A lease that
// fits no GPU holds the line on the GPU with the most free (as in the local queue): the leases
// behind it may use this host's other GPUs only. The others get this host's reason
// ("gpu1: needs 12.0 GiB; GPU 0: 9.5 GiB free of 24.0 GiB; comfyui holds 16.0 GiB, busy").
ClaimDecision choose_claims(const ClaimContext& ctx, const std::vector<Lease>& candidates);

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
};

// What a lost host's leases became, as the host that re-queued them reports it.
struct LostHost {
  std::string host;
  std::vector<Lease> requeued;  // now queued again (kept by this host)
  std::vector<Lease> ended;
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
};

}  // namespace vramd
