#include "store/event_store.h"

#include <SQLiteCpp/SQLiteCpp.h>
#include <fmt/format.h>

namespace vramd {

namespace {

class SqliteEventStore final : public EventStore {
 public:
  SqliteEventStore(std::unique_ptr<SQLite::Database> db, int64_t retention)
      : db_(std::move(db)), retention_(retention) {}
  Result<int64_t> append(const EventRecord& event, const nlohmann::json& data, int64_t id) override;
  Result<int64_t> max_id() const override;
  Result<std::vector<StoredEvent>> list(int64_t after_id, std::optional<TimePoint> since,
                                        size_t limit) const override;
  Result<int64_t> count() const override;

 private:
  std::unique_ptr<SQLite::Database> db_;
  int64_t retention_;
  int64_t appends_ = 0;
};

}  // namespace

Result<std::unique_ptr<EventStore>> EventStore::open(const std::string& path, int64_t retention) {
  try {
    auto db = std::make_unique<SQLite::Database>(path, SQLite::OPEN_READWRITE | SQLite::OPEN_CREATE);
    db->setBusyTimeout(5000);
    db->exec("PRAGMA journal_mode=WAL");
    // WAL with synchronous=NORMAL: a power cut may lose the last events, never corrupt the file.
    db->exec("PRAGMA synchronous=NORMAL");
    db->exec(
        "CREATE TABLE IF NOT EXISTS events ("
        " id INTEGER PRIMARY KEY AUTOINCREMENT,"
        " at_ms INTEGER NOT NULL,"
        " type TEXT NOT NULL,"
        " gpu INTEGER,"
        " subject TEXT NOT NULL,"
        " message TEXT NOT NULL,"
        " data TEXT)");
    db->exec("CREATE INDEX IF NOT EXISTS events_at ON events(at_ms)");
    return std::unique_ptr<EventStore>(new SqliteEventStore(std::move(db), retention));
  } catch (const std::exception& e) {
    return make_error(fmt::format("cannot open event store {}: {}", path, e.what()));
  }
}

namespace {

// One INSERT for both: `replace` for a write that may be repeated (a lease's events, written again
// with the lease after a failed try).
void insert_event(SQLite::Database& db, const EventRecord& e, const nlohmann::json& data,
                  int64_t id, bool replace) {
  SQLite::Statement insert(db, fmt::format("INSERT {}INTO events (at_ms, type, gpu, subject, "
                                           "message, data, id) VALUES (?, ?, ?, ?, ?, ?, ?)",
                                           replace ? "OR REPLACE " : ""));
  if (id > 0) insert.bind(7, id);
  else insert.bind(7);
  insert.bind(1, static_cast<int64_t>(e.at.time_since_epoch().count()));
  insert.bind(2, e.type);
  if (e.gpu) insert.bind(3, static_cast<int64_t>(*e.gpu));
  else insert.bind(3);
  insert.bind(4, e.subject);
  insert.bind(5, e.message);
  if (data.is_null()) insert.bind(6);
  else insert.bind(6, data.dump());
  insert.exec();
}

}  // namespace

void sqlite_put_event(SQLite::Database& db, const StoredEvent& e) {
  insert_event(db, e.event, e.data, e.id, true);
}

Result<int64_t> SqliteEventStore::append(const EventRecord& e, const nlohmann::json& data, int64_t id_in) {
  try {
    insert_event(*db_, e, data, id_in, false);
    int64_t id = db_->getLastInsertRowid();
    // Trim now and then rather than on every insert.
    if (++appends_ % 64 == 1) {
      SQLite::Statement trim(*db_, "DELETE FROM events WHERE id <= ?");
      trim.bind(1, id - retention_);
      trim.exec();
    }
    return id;
  } catch (const std::exception& ex) {
    return make_error(fmt::format("cannot store event: {}", ex.what()));
  }
}

Result<std::vector<StoredEvent>> SqliteEventStore::list(int64_t after_id, std::optional<TimePoint> since,
                                                        size_t limit) const {
  try {
    SQLite::Statement q(*db_,
                        "SELECT id, at_ms, type, gpu, subject, message, data FROM events "
                        "WHERE id > ? AND at_ms >= ? AND id > (SELECT COALESCE(MAX(id), 0) FROM events) - ? "
                        "ORDER BY id LIMIT ?");
    q.bind(1, after_id);
    q.bind(2, since ? static_cast<int64_t>(since->time_since_epoch().count()) : INT64_MIN);
    q.bind(3, retention_);
    q.bind(4, static_cast<int64_t>(limit));
    std::vector<StoredEvent> out;
    while (q.executeStep()) {
      StoredEvent s;
      s.id = q.getColumn(0).getInt64();
      s.event.at = TimePoint(Duration(q.getColumn(1).getInt64()));
      s.event.type = q.getColumn(2).getString();
      if (!q.getColumn(3).isNull()) s.event.gpu = static_cast<unsigned>(q.getColumn(3).getInt64());
      s.event.subject = q.getColumn(4).getString();
      s.event.message = q.getColumn(5).getString();
      if (!q.getColumn(6).isNull())
        s.data = nlohmann::json::parse(q.getColumn(6).getString(), nullptr, false);
      out.push_back(std::move(s));
    }
    return out;
  } catch (const std::exception& ex) {
    return make_error(fmt::format("cannot read events: {}", ex.what()));
  }
}

Result<int64_t> SqliteEventStore::max_id() const {
  try {
    SQLite::Statement q(*db_, "SELECT COALESCE(MAX(id), 0) FROM events");
    q.executeStep();
    return q.getColumn(0).getInt64();
  } catch (const std::exception& ex) {
    return make_error(fmt::format("cannot read events: {}", ex.what()));
  }
}

Result<int64_t> SqliteEventStore::count() const {
  try {
    SQLite::Statement q(*db_, "SELECT COUNT(*) FROM events WHERE id > (SELECT COALESCE(MAX(id), 0) FROM events) - ?");
    q.bind(1, retention_);
    q.executeStep();
    return q.getColumn(0).getInt64();
  } catch (const std::exception& ex) {
    return make_error(fmt::format("cannot count events: {}", ex.what()));
  }
}

}  // namespace vramd
