// Events kept in SQLite (state_dir/vramd.db, WAL) with a retention limit. Blocking: the daemon
// calls it from its store thread, never from the event loop.
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

class EventStore {
 public:
  // Opens or creates the database. `retention`: events kept; older ones are deleted.
  static Result<std::unique_ptr<EventStore>> open(const std::string& path, int64_t retention);
  ~EventStore();

  // `id`: 0 lets the store number it; the daemon numbers events itself (from max_id() on) so
  // that its live stream and the store agree on ids.
  Result<int64_t> append(const EventRecord& event, const nlohmann::json& data = nullptr,
                         int64_t id = 0);
  Result<int64_t> max_id() const;
  // Events after `after_id` (0: from the oldest kept) and at or after `since`, oldest first.
  Result<std::vector<StoredEvent>> list(int64_t after_id, std::optional<TimePoint> since,
                                        size_t limit) const;
  Result<int64_t> count() const;

 private:
  EventStore(std::unique_ptr<SQLite::Database> db, int64_t retention);
  std::unique_ptr<SQLite::Database> db_;
  int64_t retention_;
  int64_t appends_ = 0;
};

}  // namespace vramd
