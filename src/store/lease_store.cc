#include "store/lease_store.h"

#include <SQLiteCpp/SQLiteCpp.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace vramd {

using nlohmann::json;

namespace {

int64_t ms(TimePoint t) { return std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count(); }
TimePoint from_ms(int64_t v) { return TimePoint(std::chrono::milliseconds(v)); }
// The store keeps wall times (they outlive the monotonic clock across a reboot); the core keeps
// monotonic ones, converted by the clocks' offset at the moment of writing or reading.
int64_t ms(const Now& now, MonoTime t) { return ms(now.wall_of(t)); }
MonoTime from_ms(const Now& now, int64_t v) { return now.mono_of(from_ms(v)); }
template <typename T>
json opt(const std::optional<T>& v) {
  return v ? json(*v) : json(nullptr);
}

}  // namespace

std::string lease_to_json(const Lease& l, const Now& now) {
  const LeaseRequest& r = l.request;
  json j = {{"id", l.id},
            {"seq", l.seq},
            {"state", to_string(l.state)},
            {"gpu", opt(l.gpu)},
            {"requested_ms", ms(now, l.requested_at)},
            {"granted_ms", l.granted_at ? json(ms(now, *l.granted_at)) : json(nullptr)},
            {"ended_ms", l.ended_at ? json(ms(now, *l.ended_at)) : json(nullptr)},
            {"end_reason", l.end_reason},
            {"token", l.token},
            {"peak_vram", l.peak_vram},
            {"exit_status", opt(l.exit_status)},
            {"request",
             {{"gpu", opt(r.gpu)},
              {"vram", r.vram},
              {"ram", opt(r.ram)},
              {"holder", r.holder},
              {"pid", opt(r.pid)},
              {"pid_start_ticks", r.pid_start_ticks},
              {"priority", r.priority},
              {"label", r.label},
              {"service", r.service},
              {"group", r.group},
              {"wait_timeout_ms", r.wait_timeout ? json(r.wait_timeout->count()) : json(nullptr)},
              {"command", r.command},
              {"start", r.start},
              {"wake", r.wake},
              {"cluster", r.cluster},
              {"host", r.host},
              {"on_host_lost", to_string(r.on_host_lost)},
              {"preemptible", r.preemptible}}}};
  if (!l.suspend_refused.empty()) j["suspend_refused"] = l.suspend_refused;
  if (const auto& s = l.suspension)
    j["suspension"] = {{"step", to_string(s->step)},
                       {"pids", s->pids},
                       {"bytes", s->bytes},
                       {"for", s->for_whom},
                       {"at_ms", s->at ? json(ms(now, *s->at)) : json(nullptr)}};
  return j.dump();
}

Result<Lease> lease_from_json(const std::string& text, const Now& now) {
  try {
    json j = json::parse(text);
    Lease l;
    l.id = j.at("id").get<uint64_t>();
    l.seq = j.at("seq").get<uint64_t>();
    auto st = parse_lease_state(j.at("state").get<std::string>());
    if (!st) return make_error("bad lease state");
    l.state = *st;
    if (!j["gpu"].is_null()) l.gpu = j["gpu"].get<unsigned>();
    l.requested_at = from_ms(now, j.at("requested_ms").get<int64_t>());
    if (!j["granted_ms"].is_null()) l.granted_at = from_ms(now, j["granted_ms"].get<int64_t>());
    if (!j["ended_ms"].is_null()) l.ended_at = from_ms(now, j["ended_ms"].get<int64_t>());
    l.end_reason = j.value("end_reason", "");
    l.token = j.value("token", uint64_t{0});
    l.peak_vram = j.value("peak_vram", Bytes{0});
    if (!j["exit_status"].is_null()) l.exit_status = j["exit_status"].get<int>();
    const json& r = j.at("request");
    if (!r["gpu"].is_null()) l.request.gpu = r["gpu"].get<unsigned>();
    l.request.vram = r.at("vram").get<Bytes>();
    if (!r["ram"].is_null()) l.request.ram = r["ram"].get<Bytes>();
    l.request.holder = r.value("holder", "");
    if (!r["pid"].is_null()) l.request.pid = r["pid"].get<int>();
    l.request.pid_start_ticks = r.value("pid_start_ticks", uint64_t{0});
    l.request.priority = r.value("priority", 0);
    l.request.label = r.value("label", "");
    l.request.service = r.value("service", "");
    l.request.group = r.value("group", "");
    if (!r["wait_timeout_ms"].is_null())
      l.request.wait_timeout = Duration(r["wait_timeout_ms"].get<int64_t>());
    l.request.command = r.value("command", "");
    l.request.start = r.value("start", false);
    l.request.wake = r.value("wake", false);
    l.request.cluster = r.value("cluster", false);
    l.request.host = r.value("host", "");
    l.request.on_host_lost =
        parse_on_host_lost(r.value("on_host_lost", "requeue")).value_or(OnHostLost::requeue);
    l.request.preemptible = r.value("preemptible", false);
    l.suspend_refused = j.value("suspend_refused", "");
    if (j.contains("suspension") && j["suspension"].is_object()) {
      const json& s = j["suspension"];
      LeaseSuspension susp;
      auto step = parse_suspension_step(s.value("step", ""));
      if (!step) return make_error("bad suspension step");
      susp.step = *step;
      susp.pids = s.at("pids").get<std::vector<int>>();
      susp.bytes = s.value("bytes", Bytes{0});
      susp.for_whom = s.value("for", "");
      if (s.contains("at_ms") && !s["at_ms"].is_null())
        susp.at = from_ms(now, s["at_ms"].get<int64_t>());
      l.suspension = std::move(susp);
    }
    return l;
  } catch (const std::exception& e) {
    return make_error(fmt::format("bad stored lease: {}", e.what()));
  }
}

JobRecord job_record(const Lease& l, const Now& now) {
  JobRecord j;
  MonoTime end = l.ended_at.value_or(l.requested_at);
  j.id = l.id;
  j.label = l.request.label;
  j.command = l.request.command;
  j.holder = l.request.holder;
  j.state = l.state;
  j.gpu = l.gpu;
  j.vram = l.request.vram;
  j.requested_at = from_ms(ms(now, l.requested_at));  // to the millisecond, as stored
  j.wait = std::chrono::duration_cast<std::chrono::milliseconds>(l.granted_at.value_or(end) - l.requested_at);
  if (l.granted_at) j.run = std::chrono::duration_cast<std::chrono::milliseconds>(end - *l.granted_at);
  j.peak_vram = l.peak_vram;
  j.exit_status = l.exit_status;
  j.end_reason = l.end_reason;
  return j;
}

namespace {

class SqliteLeaseStore final : public LeaseStore {
 public:
  explicit SqliteLeaseStore(std::unique_ptr<SQLite::Database> db) : db_(std::move(db)) {}
  using LeaseStore::save;
  Status save(const Lease& lease, const Now& now, const std::vector<StoredEvent>& events) override;
  Result<std::vector<Lease>> active(const Now& now) const override;
  Result<uint64_t> max_id() const override;
  Result<std::vector<JobRecord>> jobs(const std::string& label, size_t limit) const override;
  Result<std::optional<JobRecord>> job(uint64_t id) const override;

 private:
  std::unique_ptr<SQLite::Database> db_;
};

}  // namespace

Result<std::unique_ptr<LeaseStore>> LeaseStore::open(const std::string& path) {
  try {
    auto db = std::make_unique<SQLite::Database>(path, SQLite::OPEN_READWRITE | SQLite::OPEN_CREATE);
    db->setBusyTimeout(5000);
    db->exec("PRAGMA journal_mode=WAL");
    db->exec("PRAGMA synchronous=NORMAL");  // survives kill -9; a power cut may lose the last write
    db->exec("CREATE TABLE IF NOT EXISTS leases (id INTEGER PRIMARY KEY, data TEXT NOT NULL)");
    db->exec(
        "CREATE TABLE IF NOT EXISTS jobs ("
        " id INTEGER PRIMARY KEY, label TEXT NOT NULL, command TEXT NOT NULL, holder TEXT NOT NULL,"
        " state TEXT NOT NULL, gpu INTEGER, vram INTEGER NOT NULL, requested_ms INTEGER NOT NULL,"
        " wait_ms INTEGER NOT NULL, run_ms INTEGER, peak_vram INTEGER NOT NULL,"
        " exit_status INTEGER, end_reason TEXT NOT NULL)");
    db->exec("CREATE INDEX IF NOT EXISTS jobs_label ON jobs(label, id)");
    return std::unique_ptr<LeaseStore>(new SqliteLeaseStore(std::move(db)));
  } catch (const std::exception& e) {
    return make_error(fmt::format("cannot open lease store {}: {}", path, e.what()));
  }
}

Status SqliteLeaseStore::save(const Lease& l, const Now& now,
                              const std::vector<StoredEvent>& events) {
  try {
    SQLite::Transaction tx(*db_);
    for (const auto& e : events) sqlite_put_event(*db_, e);
    if (is_active(l.state)) {
      SQLite::Statement q(*db_, "INSERT OR REPLACE INTO leases (id, data) VALUES (?, ?)");
      q.bind(1, static_cast<int64_t>(l.id));
      q.bind(2, lease_to_json(l, now));
      q.exec();
    } else {
      SQLite::Statement del(*db_, "DELETE FROM leases WHERE id = ?");
      del.bind(1, static_cast<int64_t>(l.id));
      del.exec();
      SQLite::Statement q(*db_,
                          "INSERT OR REPLACE INTO jobs (id, label, command, holder, state, gpu, vram,"
                          " requested_ms, wait_ms, run_ms, peak_vram, exit_status, end_reason)"
                          " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
      JobRecord j = job_record(l, now);
      q.bind(1, static_cast<int64_t>(j.id));
      q.bind(2, j.label);
      q.bind(3, j.command);
      q.bind(4, j.holder);
      q.bind(5, to_string(j.state));
      if (j.gpu) q.bind(6, static_cast<int64_t>(*j.gpu));
      else q.bind(6);
      q.bind(7, static_cast<int64_t>(j.vram));
      q.bind(8, ms(j.requested_at));
      q.bind(9, static_cast<int64_t>(j.wait.count()));
      if (j.run) q.bind(10, static_cast<int64_t>(j.run->count()));
      else q.bind(10);
      q.bind(11, static_cast<int64_t>(j.peak_vram));
      if (j.exit_status) q.bind(12, *j.exit_status);
      else q.bind(12);
      q.bind(13, j.end_reason);
      q.exec();
    }
    tx.commit();
    return Ok{};
  } catch (const std::exception& e) {
    return make_error(fmt::format("cannot store lease {}: {}", l.id, e.what()));
  }
}

Result<std::vector<Lease>> SqliteLeaseStore::active(const Now& now) const {
  try {
    std::vector<Lease> out;
    SQLite::Statement q(*db_, "SELECT data FROM leases ORDER BY id");
    while (q.executeStep()) {
      auto l = lease_from_json(q.getColumn(0).getString(), now);
      if (!l) return make_error(l.error());
      out.push_back(std::move(*l));
    }
    return out;
  } catch (const std::exception& e) {
    return make_error(fmt::format("cannot read leases: {}", e.what()));
  }
}

Result<uint64_t> SqliteLeaseStore::max_id() const {
  try {
    SQLite::Statement q(*db_,
                        "SELECT MAX(COALESCE((SELECT MAX(id) FROM leases), 0),"
                        " COALESCE((SELECT MAX(id) FROM jobs), 0))");
    q.executeStep();
    return static_cast<uint64_t>(q.getColumn(0).getInt64());
  } catch (const std::exception& e) {
    return make_error(fmt::format("cannot read leases: {}", e.what()));
  }
}


namespace {
// One row of the jobs table, columns in the order jobs() and job() select them.
JobRecord job_from_row(SQLite::Statement& q) {
  JobRecord j;
  j.id = static_cast<uint64_t>(q.getColumn(0).getInt64());
  j.label = q.getColumn(1).getString();
  j.command = q.getColumn(2).getString();
  j.holder = q.getColumn(3).getString();
  j.state = parse_lease_state(q.getColumn(4).getString()).value_or(LeaseState::released);
  if (!q.getColumn(5).isNull()) j.gpu = static_cast<unsigned>(q.getColumn(5).getInt64());
  j.vram = static_cast<Bytes>(q.getColumn(6).getInt64());
  j.requested_at = from_ms(q.getColumn(7).getInt64());
  j.wait = std::chrono::milliseconds(q.getColumn(8).getInt64());
  if (!q.getColumn(9).isNull()) j.run = std::chrono::milliseconds(q.getColumn(9).getInt64());
  j.peak_vram = static_cast<Bytes>(q.getColumn(10).getInt64());
  if (!q.getColumn(11).isNull()) j.exit_status = q.getColumn(11).getInt();
  j.end_reason = q.getColumn(12).getString();
  return j;
}
}  // namespace

Result<std::vector<JobRecord>> SqliteLeaseStore::jobs(const std::string& label, size_t limit) const {
  try {
    SQLite::Statement q(*db_,
                        "SELECT id, label, command, holder, state, gpu, vram, requested_ms, wait_ms,"
                        " run_ms, peak_vram, exit_status, end_reason FROM jobs"
                        " WHERE (? = '' OR label = ?) ORDER BY id DESC LIMIT ?");
    q.bind(1, label);
    q.bind(2, label);
    q.bind(3, static_cast<int64_t>(limit));
    std::vector<JobRecord> out;
    while (q.executeStep()) {
      JobRecord j = job_from_row(q);
      out.push_back(std::move(j));
    }
    return out;
  } catch (const std::exception& e) {
    return make_error(fmt::format("cannot read jobs: {}", e.what()));
  }
}

Result<std::optional<JobRecord>> SqliteLeaseStore::job(uint64_t id) const {
  try {
    SQLite::Statement q(*db_,
                        "SELECT id, label, command, holder, state, gpu, vram, requested_ms, wait_ms,"
                        " run_ms, peak_vram, exit_status, end_reason FROM jobs WHERE id = ?");
    q.bind(1, static_cast<int64_t>(id));
    if (!q.executeStep()) return std::optional<JobRecord>();
    return std::optional<JobRecord>(job_from_row(q));
  } catch (const std::exception& e) {
    return make_error(fmt::format("cannot read job {}: {}", id, e.what()));
  }
}

}  // namespace vramd
