#include "store/peak_store.h"

#include <SQLiteCpp/SQLiteCpp.h>
#include <fmt/format.h>

namespace vramd {

namespace {

class SqlitePeakStore final : public PeakStore {
 public:
  explicit SqlitePeakStore(std::unique_ptr<SQLite::Database> db) : db_(std::move(db)) {}
  Status save(const LoadPeak& peak, TimePoint at) override;
  Result<std::vector<LoadPeak>> all() const override;
  Status save_wake(const WakeTime& t, TimePoint at) override;
  Result<std::vector<WakeTime>> wake_times() const override;
  Status save_demand(const DemandHistory& d) override;
  Result<std::vector<DemandHistory>> demand() const override;

 private:
  std::unique_ptr<SQLite::Database> db_;
};

}  // namespace

Result<std::unique_ptr<PeakStore>> PeakStore::open(const std::string& path) {
  try {
    auto db = std::make_unique<SQLite::Database>(path, SQLite::OPEN_READWRITE | SQLite::OPEN_CREATE);
    db->setBusyTimeout(5000);
    db->exec("PRAGMA journal_mode=WAL");
    db->exec(
        "CREATE TABLE IF NOT EXISTS load_peaks ("
        " service TEXT NOT NULL, model TEXT NOT NULL, bytes INTEGER NOT NULL,"
        " at_ms INTEGER NOT NULL, PRIMARY KEY (service, model))");
    db->exec(
        "CREATE TABLE IF NOT EXISTS wake_times ("
        " service TEXT NOT NULL, model TEXT NOT NULL, depth TEXT NOT NULL, ms INTEGER NOT NULL,"
        " at_ms INTEGER NOT NULL, PRIMARY KEY (service, model, depth))");
    db->exec(
        "CREATE TABLE IF NOT EXISTS demand ("
        " service TEXT NOT NULL PRIMARY KEY, since_ms INTEGER NOT NULL, counts TEXT NOT NULL)");
    return std::unique_ptr<PeakStore>(new SqlitePeakStore(std::move(db)));
  } catch (const std::exception& e) {
    return make_error(fmt::format("cannot open load peak store {}: {}", path, e.what()));
  }
}

Status SqlitePeakStore::save(const LoadPeak& peak, TimePoint at) {
  try {
    SQLite::Statement q(*db_,
                        "INSERT INTO load_peaks (service, model, bytes, at_ms) VALUES (?, ?, ?, ?)"
                        " ON CONFLICT (service, model) DO UPDATE SET"
                        " bytes = max(bytes, excluded.bytes), at_ms = excluded.at_ms");
    q.bind(1, peak.service);
    q.bind(2, peak.model);
    q.bind(3, static_cast<int64_t>(peak.bytes));
    q.bind(4, static_cast<int64_t>(
                  std::chrono::duration_cast<std::chrono::milliseconds>(at.time_since_epoch())
                      .count()));
    q.exec();
    return Ok{};
  } catch (const std::exception& e) {
    return make_error(fmt::format("cannot store the load peak of {}: {}", peak.service, e.what()));
  }
}

Result<std::vector<LoadPeak>> SqlitePeakStore::all() const {
  try {
    SQLite::Statement q(*db_, "SELECT service, model, bytes FROM load_peaks ORDER BY service, model");
    std::vector<LoadPeak> out;
    while (q.executeStep()) {
      int64_t bytes = q.getColumn(2).getInt64();
      if (bytes <= 0) continue;  // never written so; a damaged row is no peak
      out.push_back({q.getColumn(0).getString(), q.getColumn(1).getString(),
                     static_cast<Bytes>(bytes)});
    }
    return out;
  } catch (const std::exception& e) {
    return make_error(fmt::format("cannot read load peaks: {}", e.what()));
  }
}

Status SqlitePeakStore::save_wake(const WakeTime& t, TimePoint at) {
  try {
    SQLite::Statement q(*db_,
                        "INSERT INTO wake_times (service, model, depth, ms, at_ms)"
                        " VALUES (?, ?, ?, ?, ?) ON CONFLICT (service, model, depth) DO UPDATE SET"
                        " ms = excluded.ms, at_ms = excluded.at_ms");
    q.bind(1, t.service);
    q.bind(2, t.model);
    q.bind(3, to_string(t.depth));
    q.bind(4, static_cast<int64_t>(t.took.count()));
    q.bind(5, static_cast<int64_t>(
                  std::chrono::duration_cast<std::chrono::milliseconds>(at.time_since_epoch())
                      .count()));
    q.exec();
    return Ok{};
  } catch (const std::exception& e) {
    return make_error(fmt::format("cannot store the wake time of {}: {}", t.service, e.what()));
  }
}

Result<std::vector<WakeTime>> SqlitePeakStore::wake_times() const {
  try {
    SQLite::Statement q(*db_,
                        "SELECT service, model, depth, ms FROM wake_times"
                        " ORDER BY service, model, depth");
    std::vector<WakeTime> out;
    while (q.executeStep()) {
      auto depth = parse_sleep_depth(q.getColumn(2).getString());
      int64_t ms = q.getColumn(3).getInt64();
      if (!depth || ms <= 0) continue;  // never written so
      out.push_back({q.getColumn(0).getString(), q.getColumn(1).getString(), *depth,
                     Duration(ms)});
    }
    return out;
  } catch (const std::exception& e) {
    return make_error(fmt::format("cannot read wake times: {}", e.what()));
  }
}

Status SqlitePeakStore::save_demand(const DemandHistory& d) {
  try {
    SQLite::Statement q(*db_,
                        "INSERT INTO demand (service, since_ms, counts) VALUES (?, ?, ?)"
                        " ON CONFLICT (service) DO UPDATE SET"
                        " since_ms = excluded.since_ms, counts = excluded.counts");
    q.bind(1, d.service);
    q.bind(2, static_cast<int64_t>(d.since.time_since_epoch().count()));
    q.bind(3, encode_counts(d.counts));
    q.exec();
    return Ok{};
  } catch (const std::exception& e) {
    return make_error(fmt::format("cannot store the demand of {}: {}", d.service, e.what()));
  }
}

Result<std::vector<DemandHistory>> SqlitePeakStore::demand() const {
  try {
    SQLite::Statement q(*db_, "SELECT service, since_ms, counts FROM demand ORDER BY service");
    std::vector<DemandHistory> out;
    while (q.executeStep()) {
      auto counts = parse_counts(q.getColumn(2).getString());
      if (!counts) continue;  // never written so
      DemandHistory d;
      d.service = q.getColumn(0).getString();
      d.since = TimePoint(Duration(q.getColumn(1).getInt64()));
      d.counts = *counts;
      out.push_back(std::move(d));
    }
    return out;
  } catch (const std::exception& e) {
    return make_error(fmt::format("cannot read demand: {}", e.what()));
  }
}

}  // namespace vramd
