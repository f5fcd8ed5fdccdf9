#include "store/duration_store.h"

#include <cmath>

#include <SQLiteCpp/SQLiteCpp.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace vramd {

namespace {

int64_t duration_ms_of(TimePoint t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
}

// SQLite keeps a NaN as NULL: a time that is no number is no time (an optional one is stored as
// NULL; a record whose `seconds` is none is not stored).
std::optional<double> finite_or_null(std::optional<double> v) {
  if (v && !std::isfinite(*v)) return std::nullopt;
  return v;
}

void bind_real(SQLite::Statement& q, int i, std::optional<double> v) {
  if (v)
    q.bind(i, *v);
  else
    q.bind(i);
}

std::optional<double> column_real(const SQLite::Column& c) {
  if (c.isNull()) return std::nullopt;
  return c.getDouble();
}

// Rows per INSERT: a request's record is written for every proxied request, and a statement's
// run costs about as much again as the row it inserts (callgrind: 18.8k instructions a record
// one by one, bench/RESULTS.md). 64 rows x 16 columns stay far below SQLite's 32,766 variables.
constexpr size_t kRowsPerInsert = 64;
constexpr int kColumns = 16;

std::string insert_sql(size_t rows) {
  std::string sql =
      "INSERT INTO durations (kind, service, at_ms, key, model, workflow, outcome, status,"
      " wait_s, first_byte_s, seconds, tokens_per_s, cached_nodes, version, args_fp, gpu)"
      " VALUES ";
  for (size_t i = 0; i < rows; ++i) {
    if (i) sql += ',';
    sql += "(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)";
  }
  return sql + " ON CONFLICT DO NOTHING";  // a prompt already kept: that row alone is skipped
}

// One record's 16 values from variable `at` + 1 on. Not copied by SQLite (SQLITE_STATIC): the
// records and the names of kinds and outcomes outlive the statement's run.
void bind_record(SQLite::Statement& q, int at, const DurationRecord& r) {
  q.bindNoCopy(at + 1, to_string(r.kind));
  q.bindNoCopy(at + 2, r.service);
  q.bind(at + 3, duration_ms_of(r.at));
  q.bindNoCopy(at + 4, r.key);
  q.bindNoCopy(at + 5, r.model);
  q.bindNoCopy(at + 6, r.workflow);
  q.bindNoCopy(at + 7, r.outcome ? to_string(*r.outcome) : "");
  q.bind(at + 8, r.status);
  bind_real(q, at + 9, finite_or_null(r.wait_s));
  bind_real(q, at + 10, finite_or_null(r.first_byte_s));
  q.bind(at + 11, r.seconds);
  bind_real(q, at + 12, finite_or_null(r.tokens_per_s));
  q.bind(at + 13, r.cached_nodes);
  q.bindNoCopy(at + 14, r.version);
  q.bindNoCopy(at + 15, r.args_fp);
  if (r.gpu)
    q.bind(at + 16, static_cast<int64_t>(*r.gpu));
  else
    q.bind(at + 16);
}


class SqliteDurationStore final : public DurationStore {
 public:
  explicit SqliteDurationStore(std::unique_ptr<SQLite::Database> db) : db_(std::move(db)) {}
  Status add(const std::vector<DurationRecord>& records) override;
  Result<std::vector<DurationRecord>> list(const DurationQuery& q) const override;
  Status save_variant(const ServiceVariant& v) override;
  Result<std::vector<ServiceVariant>> variants(const std::string& service) const override;
  Result<int64_t> prune(TimePoint before) override;

 private:
  std::unique_ptr<SQLite::Database> db_;
};

}  // namespace

Result<std::unique_ptr<DurationStore>> DurationStore::open(const std::string& path) {
  try {
    auto db = std::make_unique<SQLite::Database>(path, SQLite::OPEN_READWRITE | SQLite::OPEN_CREATE);
    db->setBusyTimeout(5000);
    db->exec("PRAGMA journal_mode=WAL");
    db->exec(
        "CREATE TABLE IF NOT EXISTS durations ("
        " id INTEGER PRIMARY KEY, kind TEXT NOT NULL, service TEXT NOT NULL,"
        " at_ms INTEGER NOT NULL, key TEXT NOT NULL, model TEXT NOT NULL,"
        " workflow TEXT NOT NULL, outcome TEXT NOT NULL, status INTEGER NOT NULL, wait_s REAL,"
        " first_byte_s REAL, seconds REAL NOT NULL, tokens_per_s REAL,"
        " cached_nodes INTEGER NOT NULL, version TEXT NOT NULL, args_fp TEXT NOT NULL,"
        " gpu INTEGER)");
    // A prompt (its key is ComfyUI's prompt id) is kept once; requests (no key) all are.
    db->exec(
        "CREATE UNIQUE INDEX IF NOT EXISTS durations_key ON durations (service, kind, key)"
        " WHERE key <> ''");
    db->exec("CREATE INDEX IF NOT EXISTS durations_at ON durations (service, at_ms)");
    db->exec(
        "CREATE TABLE IF NOT EXISTS service_variants ("
        " service TEXT NOT NULL, version TEXT NOT NULL, args_fp TEXT NOT NULL,"
        " args_json TEXT NOT NULL, first_seen_ms INTEGER NOT NULL,"
        " last_seen_ms INTEGER NOT NULL DEFAULT 0,"
        " PRIMARY KEY (service, version, args_fp))");
    return std::unique_ptr<DurationStore>(new SqliteDurationStore(std::move(db)));
  } catch (const std::exception& e) {
    return make_error(fmt::format("cannot open durations store {}: {}", path, e.what()));
  }
}

Status SqliteDurationStore::add(const std::vector<DurationRecord>& records) {
  std::vector<const DurationRecord*> rows;
  rows.reserve(records.size());
  for (const DurationRecord& r : records)
    if (std::isfinite(r.seconds)) rows.push_back(&r);
  if (rows.empty()) return Ok{};
  try {
    SQLite::Transaction tx(*db_);
    std::optional<SQLite::Statement> full;  // kRowsPerInsert rows, prepared once a call
    for (size_t i = 0; i < rows.size(); i += kRowsPerInsert) {
      const size_t n = std::min(kRowsPerInsert, rows.size() - i);
      std::optional<SQLite::Statement> rest;
      if (n == kRowsPerInsert && !full) full.emplace(*db_, insert_sql(n));
      if (n < kRowsPerInsert) rest.emplace(*db_, insert_sql(n));
      SQLite::Statement& q = n == kRowsPerInsert ? *full : *rest;
      for (size_t k = 0; k < n; ++k) bind_record(q, static_cast<int>(k) * kColumns, *rows[i + k]);
      q.exec();
      q.reset();
    }
    tx.commit();
    return Ok{};
  } catch (const std::exception& e) {
    return make_error(fmt::format("cannot store {} durations: {}", records.size(), e.what()));
  }
}

Result<std::vector<DurationRecord>> SqliteDurationStore::list(const DurationQuery& dq) const {
  try {
    std::string sql =
        "SELECT kind, service, at_ms, key, model, workflow, outcome, status, wait_s,"
        " first_byte_s, seconds, tokens_per_s, cached_nodes, version, args_fp, gpu"
        " FROM durations WHERE at_ms >= ?";
    if (!dq.service.empty()) sql += " AND service = ?";
    if (dq.kind) sql += " AND kind = ?";
    if (!dq.workflow.empty()) sql += " AND workflow = ?";
    if (!dq.model.empty()) sql += " AND model = ?";
    sql += " ORDER BY at_ms DESC, id DESC LIMIT ?";
    SQLite::Statement q(*db_, sql);
    int i = 1;
    q.bind(i++, duration_ms_of(dq.since));
    if (!dq.service.empty()) q.bind(i++, dq.service);
    if (dq.kind) q.bind(i++, to_string(*dq.kind));
    if (!dq.workflow.empty()) q.bind(i++, dq.workflow);
    if (!dq.model.empty()) q.bind(i++, dq.model);
    q.bind(i++, static_cast<int64_t>(dq.limit));
    std::vector<DurationRecord> out;
    while (q.executeStep()) {
      auto kind = record_kind_from(q.getColumn(0).getString());
      if (!kind) continue;  // never written so
      DurationRecord r;
      r.kind = *kind;
      r.service = q.getColumn(1).getString();
      r.at = TimePoint(Duration(q.getColumn(2).getInt64()));
      r.key = q.getColumn(3).getString();
      r.model = q.getColumn(4).getString();
      r.workflow = q.getColumn(5).getString();
      r.outcome = prompt_outcome_from(q.getColumn(6).getString());
      r.status = q.getColumn(7).getInt();
      r.wait_s = column_real(q.getColumn(8));
      r.first_byte_s = column_real(q.getColumn(9));
      r.seconds = q.getColumn(10).getDouble();
      r.tokens_per_s = column_real(q.getColumn(11));
      r.cached_nodes = q.getColumn(12).getInt();
      r.version = q.getColumn(13).getString();
      r.args_fp = q.getColumn(14).getString();
      if (!q.getColumn(15).isNull()) r.gpu = static_cast<unsigned>(q.getColumn(15).getInt64());
      out.push_back(std::move(r));
    }
    return out;
  } catch (const std::exception& e) {
    return make_error(fmt::format("cannot read durations: {}", e.what()));
  }
}

Status SqliteDurationStore::save_variant(const ServiceVariant& v) {
  try {
    SQLite::Statement q(*db_,
                        "INSERT INTO service_variants (service, version, args_fp, args_json,"
                        " first_seen_ms, last_seen_ms) VALUES (?, ?, ?, ?, ?, ?)"
                        " ON CONFLICT (service, version, args_fp) DO UPDATE SET last_seen_ms ="
                        " MAX(last_seen_ms, excluded.last_seen_ms)");
    q.bind(1, v.service);
    q.bind(2, v.version);
    q.bind(3, v.args_fp);
    q.bind(4, nlohmann::json(v.args).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    q.bind(5, duration_ms_of(v.first_seen));
    q.bind(6, duration_ms_of(std::max(v.last_seen, v.first_seen)));
    q.exec();
    return Ok{};
  } catch (const std::exception& e) {
    return make_error(fmt::format("cannot store a variant of {}: {}", v.service, e.what()));
  }
}

Result<std::vector<ServiceVariant>> SqliteDurationStore::variants(const std::string& service) const {
  try {
    SQLite::Statement q(*db_,
                        "SELECT service, version, args_fp, args_json, first_seen_ms, last_seen_ms"
                        " FROM service_variants WHERE (? = '' OR service = ?)"
                        " ORDER BY first_seen_ms, service, version, args_fp");
    q.bind(1, service);
    q.bind(2, service);
    std::vector<ServiceVariant> out;
    while (q.executeStep()) {
      auto args = nlohmann::json::parse(q.getColumn(3).getString(), nullptr, false);
      if (!args.is_array()) continue;  // never written so
      ServiceVariant v;
      v.service = q.getColumn(0).getString();
      v.version = q.getColumn(1).getString();
      v.args_fp = q.getColumn(2).getString();
      for (const auto& a : args)
        if (a.is_string()) v.args.push_back(a.get<std::string>());
      v.first_seen = TimePoint(Duration(q.getColumn(4).getInt64()));
      v.last_seen = TimePoint(Duration(q.getColumn(5).getInt64()));
      out.push_back(std::move(v));
    }
    return out;
  } catch (const std::exception& e) {
    return make_error(fmt::format("cannot read service variants: {}", e.what()));
  }
}

Result<int64_t> SqliteDurationStore::prune(TimePoint before) {
  try {
    SQLite::Statement q(*db_, "DELETE FROM durations WHERE at_ms < ?");
    q.bind(1, duration_ms_of(before));
    return static_cast<int64_t>(q.exec());
  } catch (const std::exception& e) {
    return make_error(fmt::format("cannot prune durations: {}", e.what()));
  }
}

}  // namespace vramd
