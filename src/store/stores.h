// The daemon's stores: events, leases and jobs, crashes, load peaks, durations. By default all in one SQLite
// file (state_dir/vramd.db); with [daemon] store = "postgresql://..." all in PostgreSQL
// (store/postgres_store.h), shared by several hosts. One place opens them.
#pragma once

#include <memory>
#include <string>

#include "core/config.h"
#include "core/result.h"
#include "store/crash_store.h"
#include "store/duration_store.h"
#include "store/event_store.h"
#include "store/lease_store.h"
#include "store/peak_store.h"

namespace vramd {

class HostStore;

struct Stores {
  std::shared_ptr<EventStore> events;
  std::shared_ptr<LeaseStore> leases;
  std::shared_ptr<CrashStore> crashes;
  std::shared_ptr<PeakStore> peaks;
  std::shared_ptr<DurationStore> durations;
  std::shared_ptr<HostStore> hosts;  // PostgreSQL only: heartbeats and status snapshots; else null
};

// The SQLite schema version this binary writes and knows (PRAGMA user_version). Bumped only when
// an older vramd would misbehave on the file: new tables made IF NOT EXISTS (the durations
// history's `durations` and `service_variants`) are not, since an older vramd never reads them
// and keeps working on a file that has them, so they stay version 1.
inline constexpr int kSqliteSchemaVersion = 1;

// Opens (creating when new) the stores in `state_dir`/vramd.db; `events_retention` events kept.
// A database whose schema is newer than this binary knows is refused.
// REQUIRES: `state_dir` exists.
Result<Stores> open_stores(const std::string& state_dir, int64_t events_retention);

// The stores [daemon] names: SQLite in state_dir unless `store` (or `store_url_file`) names a
// PostgreSQL database, whose rows this daemon keys by `host`.
// REQUIRES: `d.state_dir` exists.
Result<Stores> open_configured_stores(const DaemonConfig& d, const std::string& host);

// The PostgreSQL URL [daemon] names (`store`, or the first line of `store_url_file`); empty for
// SQLite.
Result<std::string> store_url(const DaemonConfig& d);

}  // namespace vramd
