#include "store/stores.h"

#include <filesystem>
#include <fstream>

#include <SQLiteCpp/SQLiteCpp.h>
#include <fmt/format.h>

#include "store/postgres_store.h"

namespace vramd {

namespace {

// The SQLite file's schema version: 0 (a file from before versions, the same tables) or 1 are
// this binary's; a newer one is refused before any store touches it.
Status check_sqlite_schema(const std::string& db) {
  try {
    SQLite::Database conn(db, SQLite::OPEN_READWRITE | SQLite::OPEN_CREATE);
    conn.setBusyTimeout(5000);
    int version = conn.execAndGet("PRAGMA user_version").getInt();
    if (version > kSqliteSchemaVersion)
      return make_error(fmt::format(
          "{}: the store's schema is version {}, newer than this vramd knows ({}): a newer vramd "
          "wrote it; run that version (or newer)",
          db, version, kSqliteSchemaVersion));
    return Ok{};
  } catch (const std::exception& e) {
    return make_error(fmt::format("cannot open store {}: {}", db, e.what()));
  }
}

Status mark_sqlite_schema(const std::string& db) {
  try {
    SQLite::Database conn(db, SQLite::OPEN_READWRITE);
    conn.setBusyTimeout(5000);
    if (conn.execAndGet("PRAGMA user_version").getInt() < kSqliteSchemaVersion)
      conn.exec(fmt::format("PRAGMA user_version = {}", kSqliteSchemaVersion));
    return Ok{};
  } catch (const std::exception& e) {
    return make_error(fmt::format("cannot open store {}: {}", db, e.what()));
  }
}

}  // namespace

Result<Stores> open_stores(const std::string& state_dir, int64_t events_retention) {
  std::string db = (std::filesystem::path(state_dir) / "vramd.db").string();
  if (auto s = check_sqlite_schema(db); !s) return make_error(s.error());
  Stores out;
  auto events = EventStore::open(db, events_retention);
  if (!events) return make_error(events.error());
  out.events = std::move(*events);
  auto leases = LeaseStore::open(db);
  if (!leases) return make_error(leases.error());
  out.leases = std::move(*leases);
  auto crashes = CrashStore::open(db);
  if (!crashes) return make_error(crashes.error());
  out.crashes = std::move(*crashes);
  auto peaks = PeakStore::open(db);
  if (!peaks) return make_error(peaks.error());
  out.peaks = std::move(*peaks);
  auto durations = DurationStore::open(db);
  if (!durations) return make_error(durations.error());
  out.durations = std::move(*durations);
  if (auto s = mark_sqlite_schema(db); !s) return make_error(s.error());
  return out;
}

Result<std::string> store_url(const DaemonConfig& d) {
  if (!d.store.empty()) return d.store;
  if (d.store_url_file.empty()) return std::string();
  std::ifstream in(d.store_url_file);
  std::string line;
  if (!in || !std::getline(in, line))
    return make_error(fmt::format("daemon.store_url_file: cannot read {}", d.store_url_file));
  while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t'))
    line.pop_back();
  if (line.rfind("postgresql://", 0) != 0 && line.rfind("postgres://", 0) != 0)
    return make_error(fmt::format(
        "daemon.store_url_file: {} must hold a postgresql:// URL on its first line",
        d.store_url_file));
  return line;
}

Result<Stores> open_configured_stores(const DaemonConfig& d, const std::string& host) {
  auto url = store_url(d);
  if (!url) return make_error(url.error());
  if (url->empty()) return open_stores(d.state_dir, d.events_retention);
  return open_postgres_stores(*url, host, d.events_retention);
}

}  // namespace vramd
