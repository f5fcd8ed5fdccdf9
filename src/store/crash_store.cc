#include "store/crash_store.h"

#include <SQLiteCpp/SQLiteCpp.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace vramd {

using nlohmann::json;

namespace {

class SqliteCrashStore final : public CrashStore {
 public:
  explicit SqliteCrashStore(std::unique_ptr<SQLite::Database> db) : db_(std::move(db)) {}
  Result<int64_t> add(const CrashRecord& c) override;
  Result<std::vector<CrashRecord>> list(const std::string& service, size_t limit) const override;

 private:
  std::unique_ptr<SQLite::Database> db_;
};

}  // namespace

std::string crash_data_json(const CrashRecord& c) {
  json holders = json::array();
  for (const auto& [owner, bytes] : c.gpu_holders) holders.push_back({{"owner", owner}, {"bytes", bytes}});
  json data = {{"pid", c.pid},
               {"exit_code", c.exit_code ? json(*c.exit_code) : json(nullptr)},
               {"signal", c.signal ? json(*c.signal) : json(nullptr)},
               {"reason", c.reason},
               {"signature", c.signature},
               {"title", c.title},
               {"explanation", c.explanation},
               {"suggestion", c.suggestion},
               {"evidence", c.evidence},
               {"log_tail", c.log_tail},
               {"gpu_holders", holders},
               {"version", c.version},
               {"args_fp", c.args_fp}};
  return data.dump(-1, ' ', false, json::error_handler_t::replace);
}

bool crash_data_from_json(const std::string& text, CrashRecord& c) {
  json d = json::parse(text, nullptr, false);
  if (d.is_discarded() || !d.is_object()) return false;
  c.pid = d.value("pid", 0);
  if (d["exit_code"].is_number()) c.exit_code = d["exit_code"].get<int>();
  if (d["signal"].is_number()) c.signal = d["signal"].get<int>();
  c.reason = d.value("reason", "");
  c.signature = d.value("signature", "");
  c.title = d.value("title", "");
  c.explanation = d.value("explanation", "");
  c.suggestion = d.value("suggestion", "");
  c.evidence = d.value("evidence", std::vector<std::string>{});
  c.log_tail = d.value("log_tail", std::vector<std::string>{});
  if (d.contains("version") && d["version"].is_string()) c.version = d["version"].get<std::string>();
  if (d.contains("args_fp") && d["args_fp"].is_string()) c.args_fp = d["args_fp"].get<std::string>();
  for (const auto& h : d.value("gpu_holders", json::array()))
    c.gpu_holders.emplace_back(h.value("owner", ""), h.value("bytes", Bytes{0}));
  return true;
}

Result<std::unique_ptr<CrashStore>> CrashStore::open(const std::string& path) {
  try {
    auto db = std::make_unique<SQLite::Database>(path, SQLite::OPEN_READWRITE | SQLite::OPEN_CREATE);
    db->setBusyTimeout(5000);
    db->exec("PRAGMA journal_mode=WAL");
    db->exec(
        "CREATE TABLE IF NOT EXISTS crashes ("
        " id INTEGER PRIMARY KEY AUTOINCREMENT, service TEXT NOT NULL, at_ms INTEGER NOT NULL,"
        " data TEXT NOT NULL)");
    db->exec("CREATE INDEX IF NOT EXISTS crashes_service ON crashes(service, id)");
    return std::unique_ptr<CrashStore>(new SqliteCrashStore(std::move(db)));
  } catch (const std::exception& e) {
    return make_error(fmt::format("cannot open crash store {}: {}", path, e.what()));
  }
}

Result<int64_t> SqliteCrashStore::add(const CrashRecord& c) {
  try {
    SQLite::Statement q(*db_, "INSERT INTO crashes (service, at_ms, data) VALUES (?, ?, ?)");
    q.bind(1, c.service);
    q.bind(2, static_cast<int64_t>(c.at.time_since_epoch().count()));
    q.bind(3, crash_data_json(c));
    q.exec();
    // Keep the newest 1,000 per service.
    SQLite::Statement trim(*db_,
                           "DELETE FROM crashes WHERE service = ? AND id NOT IN (SELECT id FROM crashes "
                           "WHERE service = ? ORDER BY id DESC LIMIT 1000)");
    trim.bind(1, c.service);
    trim.bind(2, c.service);
    trim.exec();
    return db_->getLastInsertRowid();
  } catch (const std::exception& e) {
    return make_error(fmt::format("cannot store crash: {}", e.what()));
  }
}

Result<std::vector<CrashRecord>> SqliteCrashStore::list(const std::string& service, size_t limit) const {
  try {
    SQLite::Statement q(*db_,
                        "SELECT id, service, at_ms, data FROM crashes WHERE (? = '' OR service = ?) "
                        "ORDER BY id DESC LIMIT ?");
    q.bind(1, service);
    q.bind(2, service);
    q.bind(3, static_cast<int64_t>(limit));
    std::vector<CrashRecord> out;
    while (q.executeStep()) {
      CrashRecord c;
      c.id = q.getColumn(0).getInt64();
      c.service = q.getColumn(1).getString();
      c.at = TimePoint(Duration(q.getColumn(2).getInt64()));
      if (!crash_data_from_json(q.getColumn(3).getString(), c)) continue;
      out.push_back(std::move(c));
    }
    return out;
  } catch (const std::exception& e) {
    return make_error(fmt::format("cannot read crashes: {}", e.what()));
  }
}

}  // namespace vramd
