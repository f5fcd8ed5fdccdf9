// The stores in PostgreSQL ([daemon] store = "postgresql://..."), through libpq: the same four
// interfaces as the SQLite ones (events, leases and jobs, crashes, load peaks), each row keyed by
// the host that wrote it, so that several vramd hosts share one database. The schema is versioned
// (table vramd_schema) and migrated at start under an advisory lock; a schema newer than this
// binary knows is refused. A lost connection is opened again on the next call (each call that
// fails returns an error, which the daemon treats like a failing SQLite write: retried, never
// acknowledged before it lands). Blocking: the daemon calls it from its store thread.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/result.h"
#include "store/stores.h"

namespace vramd {

// The schema version this binary writes and knows (migrations 1..kPostgresSchemaVersion).
inline constexpr int kPostgresSchemaVersion = 2;

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

// The hosts table: heartbeats and status snapshots (store/postgres_store.cc).
class HostStore {
 public:
  HostStore(std::shared_ptr<PgConnection> conn, std::string host);
  // Writes this host's heartbeat (the database's clock) and, when not empty, its status.
  Status beat(const std::string& status_json);
  // Every host's row, by name.
  Result<std::vector<HostRow>> all() const;

 private:
  std::shared_ptr<PgConnection> conn_;
  std::string host_;
};

// `url` with any password replaced by "***" (for messages and logs).
std::string redact_url(const std::string& url);

}  // namespace vramd
