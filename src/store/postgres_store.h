// The stores in PostgreSQL ([daemon] store = "postgresql://..."), through libpq: the same five
// interfaces as the SQLite ones (events, leases and jobs, crashes, load peaks, durations), each
// row keyed by the host that wrote it, so that several vramd hosts share one database. The schema
// is versioned (table vramd_schema) and migrated at start under an advisory lock; a schema newer
// than this binary knows is refused. A lost connection is opened again on the next call (each
// call that fails returns an error, which the daemon treats like a failing SQLite write: retried,
// never acknowledged before it lands). Blocking: the daemon calls it from its store thread.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/cluster.h"
#include "core/result.h"
#include "store/stores.h"

namespace vramd {

// The schema version this binary writes and knows (migrations 1..kPostgresSchemaVersion).
inline constexpr int kPostgresSchemaVersion = 9;

// One row of the hosts table: a host's heartbeat and its last status snapshot (JSON).
struct HostRow {
  std::string host;
  TimePoint heartbeat{};  // wall time of the host's last write, by the database's clock
  Duration age{0};        // how long ago that was, by the database's clock at the read
  std::string status;     // the host's /v1/status as JSON text; empty when none written yet
};

// The connection all of one daemon's PostgreSQL stores share (they run on one thread).
class PgConnection;

// Opens the stores at `url` (a libpq connection URI or key=value string) for `host`, applying
// the schema's migrations. An error names the URL without its password.
Result<Stores> open_postgres_stores(const std::string& url, const std::string& host,
                                    int64_t events_retention);

// A lease as another host holds it (or held it), read for this host's API.
struct ElsewhereLease {
  std::string host;
  std::optional<Lease> lease;    // still active there
  std::optional<JobRecord> job;  // ended there
};

// One lease row of another host (GET /v1/leases?host=all).
struct HostLease {
  std::string host;  // the host whose row it is: the one that holds it, or keeps it queued
  Lease lease;       // while queued in the shared queue, `reason.text` is every live host's reason
};

// The hosts table (heartbeats and status snapshots) and the shared queue of several hosts
// (core/cluster.h): claims, the liveness of hosts, leases held elsewhere.
class HostStore {
 public:
  HostStore(std::shared_ptr<PgConnection> conn, std::string host);
  // Writes this host's heartbeat (the database's clock) and, when not empty, its status.
  Status beat(const std::string& status_json);
  // Every host's row, by name.
  Result<std::vector<HostRow>> all() const;

  // This host's slot (1..1023): its lease ids are slot modulo kLeaseIdStride, so that no two
  // hosts give one id.
  Result<uint64_t> slot();
  // One claim round: in one transaction, the first queued cluster leases this host may take
  // (SELECT ... FOR UPDATE SKIP LOCKED, priority then FIFO across the cluster), those
  // choose_claims grants moved to this host as granted; then what became of the leases this
  // host queued (`queued`: claimed elsewhere?) and granted (`granted`: still its own?), releases
  // asked from other hosts, and every live host's reason for the queued ones. Room by eviction
  // (choose_claims): the other live hosts' reasons and costs are read for the candidates; a lease
  // this host makes room for is marked as its own (`evict_host`) in the same transaction, so no
  // two hosts unload for one lease, and unmarked when that is over.
  // `pending`: leases whose last write has not landed (neither checked nor taken up). A lease
  // the store has as granted here that this host does not know (a claim whose commit answered
  // with an error but landed) is taken up as claimed. After the claim commits, a failing read
  // leaves the rest to the next round: the claims are answered anyway.
  // Self-fencing: nothing is claimed unless this host's own heartbeat in the store is younger
  // than host_timeout × 0.5 (by the store's clock); `fenced` (leases this host gave up while cut
  // off, on_host_lost = requeue) whose rows are still granted here are queued again, kept here
  // (`requeued_here`), after the claims so that none is granted again in the same round. Each
  // grant takes a fencing token from the sequence lease_tokens.
  Result<ClusterSynced> sync(const ClaimContext& ctx, const std::vector<uint64_t>& queued,
                             const std::vector<uint64_t>& granted,
                             const std::vector<uint64_t>& pending, const Now& now,
                             Duration host_timeout, const std::vector<uint64_t>& fenced = {});
  // Hosts whose heartbeat is older than `host_timeout`: under an advisory lock (one live host
  // does it), their granted cluster leases re-queued or ended (after_host_lost) and their
  // queued ones kept by this host. Empty when another host holds the lock or none is lost.
  Result<std::vector<LostHost>> handle_lost_hosts(Duration host_timeout, const Now& now);
  // Lease `id` wherever it is (this host's first); nullopt when no host has it. A queued one
  // carries every live host's reason (heartbeat within `host_timeout`), joined.
  Result<std::optional<ElsewhereLease>> find(uint64_t id, const Now& now,
                                             Duration host_timeout) const;
  // Every lease row of the hosts other than this one (`only`, when not empty: of that host
  // alone), by host then id; `host_timeout` says which hosts' reasons still count (live ones).
  Result<std::vector<HostLease>> leases_elsewhere(const std::string& only, const Now& now,
                                                  Duration host_timeout) const;
  // Asks the host that holds lease `id` (not this one) to end it; false when none holds it.
  Result<bool> ask_release(uint64_t id, const std::string& why);
  // A heartbeat for lease `id`, heard here but held by another host (granted there, or queued in
  // its keeping): marked on its row, taken up by that host's next claim round (ClusterSynced::
  // heard). The host that holds it; nullopt when no other host does.
  Result<std::optional<std::string>> beat_lease(uint64_t id);

 private:
  void read_after_claim(const std::vector<uint64_t>& queued, const std::vector<uint64_t>& granted,
                        const std::vector<uint64_t>& pending, const Now& now,
                        Duration host_timeout, ClusterSynced& out);

  std::shared_ptr<PgConnection> conn_;
  std::string host_;
};

// Hosts on one store number leases in steps of this (a host's slot is the remainder).
inline constexpr uint64_t kLeaseIdStride = 1024;

// `url` with any password replaced by "***" (for messages and logs).
std::string redact_url(const std::string& url);

}  // namespace vramd
