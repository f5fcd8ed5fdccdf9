// Events kept in the store with a retention limit: SQLite (state_dir/vramd.db, WAL) by default,
// PostgreSQL (store/postgres_store.h) when [daemon] store names one. Blocking: the daemon calls it
// from its store thread, never from the event loop.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/arbiter.h"
#include "core/result.h"

namespace SQLite {
class Database;
}

namespace vramd {

struct StoredEvent {
  int64_t id = 0;
  EventRecord event;
  nlohmann::json data;  // structured details (an unload verdict, ...); null when none
};

// Writes `e` (its id given) into the SQLite events table of `db`, replacing one of the same id:
// the lease store writes a lease's events with it, in its transaction (LeaseStore::save).
void sqlite_put_event(SQLite::Database& db, const StoredEvent& e);

// One host's events (with PostgreSQL, each host numbers and reads its own).
class EventStore {
 public:
  // Opens or creates the SQLite database. `retention`: events kept; older ones are deleted.
  static Result<std::unique_ptr<EventStore>> open(const std::string& path, int64_t retention);
  virtual ~EventStore() = default;

  // `id`: 0 lets the store number it; the daemon numbers events itself (from max_id() on) so
  // that its live stream and the store agree on ids.
  virtual Result<int64_t> append(const EventRecord& event, const nlohmann::json& data = nullptr,
                                 int64_t id = 0) = 0;
  virtual Result<int64_t> max_id() const = 0;
  // Events after `after_id` (0: from the oldest kept) and at or after `since`, oldest first.
  virtual Result<std::vector<StoredEvent>> list(int64_t after_id, std::optional<TimePoint> since,
                                                size_t limit) const = 0;
  virtual Result<int64_t> count() const = 0;
};

}  // namespace vramd
