#include "store/postgres_store.h"

#include <libpq-fe.h>

#include <dlfcn.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <regex>
#include <set>
#include <stdexcept>

namespace vramd {

namespace {

// libpq is loaded when a PostgreSQL store is opened, from the system's libpq5 (Debian: apt
// install libpq5): `make dist` links nothing but glibc, and a daemon on the SQLite default does
// not map libpq and the TLS, Kerberos and LDAP libraries it pulls in (~5 MiB of RSS).
struct LibPq {
  decltype(&::PQconnectdbParams) PQconnectdbParams = nullptr;
  decltype(&::PQstatus) PQstatus = nullptr;
  decltype(&::PQfinish) PQfinish = nullptr;
  decltype(&::PQerrorMessage) PQerrorMessage = nullptr;
  decltype(&::PQsetNoticeProcessor) PQsetNoticeProcessor = nullptr;
  decltype(&::PQexecParams) PQexecParams = nullptr;
  decltype(&::PQexec) PQexec = nullptr;
  decltype(&::PQresultStatus) PQresultStatus = nullptr;
  decltype(&::PQresultErrorMessage) PQresultErrorMessage = nullptr;
  decltype(&::PQclear) PQclear = nullptr;
  decltype(&::PQntuples) PQntuples = nullptr;
  decltype(&::PQgetisnull) PQgetisnull = nullptr;
  decltype(&::PQgetvalue) PQgetvalue = nullptr;
  decltype(&::PQtransactionStatus) PQtransactionStatus = nullptr;
};

const LibPq* libpq() {
  static const LibPq* api = [] () -> const LibPq* {
    void* h = dlopen("libpq.so.5", RTLD_NOW | RTLD_LOCAL);
    if (!h) return nullptr;
    static LibPq l;
    l.PQconnectdbParams = reinterpret_cast<decltype(l.PQconnectdbParams)>(dlsym(h, "PQconnectdbParams"));
    if (!l.PQconnectdbParams) return nullptr;
    l.PQstatus = reinterpret_cast<decltype(l.PQstatus)>(dlsym(h, "PQstatus"));
    if (!l.PQstatus) return nullptr;
    l.PQfinish = reinterpret_cast<decltype(l.PQfinish)>(dlsym(h, "PQfinish"));
    if (!l.PQfinish) return nullptr;
    l.PQerrorMessage = reinterpret_cast<decltype(l.PQerrorMessage)>(dlsym(h, "PQerrorMessage"));
    if (!l.PQerrorMessage) return nullptr;
    l.PQsetNoticeProcessor = reinterpret_cast<decltype(l.PQsetNoticeProcessor)>(dlsym(h, "PQsetNoticeProcessor"));
    if (!l.PQsetNoticeProcessor) return nullptr;
    l.PQexecParams = reinterpret_cast<decltype(l.PQexecParams)>(dlsym(h, "PQexecParams"));
    if (!l.PQexecParams) return nullptr;
    l.PQexec = reinterpret_cast<decltype(l.PQexec)>(dlsym(h, "PQexec"));
    if (!l.PQexec) return nullptr;
    l.PQresultStatus = reinterpret_cast<decltype(l.PQresultStatus)>(dlsym(h, "PQresultStatus"));
    if (!l.PQresultStatus) return nullptr;
    l.PQresultErrorMessage = reinterpret_cast<decltype(l.PQresultErrorMessage)>(dlsym(h, "PQresultErrorMessage"));
    if (!l.PQresultErrorMessage) return nullptr;
    l.PQclear = reinterpret_cast<decltype(l.PQclear)>(dlsym(h, "PQclear"));
    if (!l.PQclear) return nullptr;
    l.PQntuples = reinterpret_cast<decltype(l.PQntuples)>(dlsym(h, "PQntuples"));
    if (!l.PQntuples) return nullptr;
    l.PQgetisnull = reinterpret_cast<decltype(l.PQgetisnull)>(dlsym(h, "PQgetisnull"));
    if (!l.PQgetisnull) return nullptr;
    l.PQgetvalue = reinterpret_cast<decltype(l.PQgetvalue)>(dlsym(h, "PQgetvalue"));
    if (!l.PQgetvalue) return nullptr;
    l.PQtransactionStatus = reinterpret_cast<decltype(l.PQtransactionStatus)>(dlsym(h, "PQtransactionStatus"));
    if (!l.PQtransactionStatus) return nullptr;
    return &l;
  }();
  return api;
}
#define PQ(fn) (libpq()->fn)

// A failed call: its message is the store's error.
struct PgError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

int64_t ms_of(TimePoint t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
}

// One parameter of a query, in libpq's text form; nullopt is SQL NULL.
struct Param {
  std::optional<std::string> text;
  Param(std::nullopt_t) {}  // NOLINT
  Param(const std::string& s) : text(s) {}  // NOLINT
  Param(const char* s) : text(s) {}  // NOLINT
  Param(int64_t v) : text(std::to_string(v)) {}  // NOLINT
  Param(uint64_t v) : text(std::to_string(v)) {}  // NOLINT
  Param(int v) : text(std::to_string(v)) {}  // NOLINT
  template <typename T>
  Param(const std::optional<T>& v) {  // NOLINT
    if (v) text = std::to_string(*v);
  }
};

// A query's result; cleared when it goes.
class PgResult {
 public:
  explicit PgResult(PGresult* r) : r_(r) {}
  PgResult(PgResult&& o) noexcept : r_(std::exchange(o.r_, nullptr)) {}
  PgResult(const PgResult&) = delete;
  ~PgResult() {
    if (r_) PQ(PQclear)(r_);
  }
  int rows() const { return PQ(PQntuples)(r_); }
  bool null(int row, int col) const { return PQ(PQgetisnull)(r_, row, col); }
  std::string text(int row, int col) const { return PQ(PQgetvalue)(r_, row, col); }
  int64_t integer(int row, int col) const {
    if (null(row, col)) return 0;
    return std::stoll(PQ(PQgetvalue)(r_, row, col));
  }

 private:
  PGresult* r_;
};

}  // namespace

std::string redact_url(const std::string& url) {
  // postgresql://user:secret@host/db and password=secret in key=value strings.
  static const std::regex uri_pw(R"(^(postgres(?:ql)?://[^:/@]*:)[^@]*@)");
  static const std::regex kv_pw(R"((password\s*=\s*)('[^']*'|\S+))");
  std::string out = std::regex_replace(url, uri_pw, "$1***@");
  return std::regex_replace(out, kv_pw, "$1***");
}

class PgConnection {
 public:
  explicit PgConnection(std::string url) : url_(std::move(url)) {}
  ~PgConnection() {
    if (conn_) PQ(PQfinish)(conn_);
  }

  // Connects when not connected (or the connection broke). Throws PgError.
  void ensure() {
    if (!libpq())
      throw PgError("a PostgreSQL store needs libpq (libpq.so.5; Debian: apt install libpq5)");
    if (conn_ && PQ(PQstatus)(conn_) == CONNECTION_OK) return;
    if (conn_) PQ(PQfinish)(conn_);
    // A server that does not answer is an error in seconds, never a stuck store thread: a
    // connect timeout, TCP keepalives, a limit on unacknowledged data (tcp_user_timeout: lost
    // packets end the call in 20 s rather than the kernel's 15 min of retransmits), and a
    // statement timeout on every query. None of them can be counted on across a partition that
    // still ACKs (a middlebox's buffer): self-fencing counts on this host's own clock alone.
    const char* keys[] = {"dbname",           "connect_timeout",  "keepalives_idle",
                          "keepalives_interval", "keepalives_count", "tcp_user_timeout",
                          "application_name", nullptr};
    const char* values[] = {url_.c_str(), "5", "10", "5", "3", "20000", "vramd", nullptr};
    conn_ = PQ(PQconnectdbParams)(keys, values, /*expand_dbname=*/1);
    if (!conn_ || PQ(PQstatus)(conn_) != CONNECTION_OK) {
      std::string why = conn_ ? PQ(PQerrorMessage)(conn_) : "out of memory";
      while (!why.empty() && (why.back() == '\n' || why.back() == ' ')) why.pop_back();
      if (conn_) PQ(PQfinish)(conn_);
      conn_ = nullptr;
      throw PgError(fmt::format("cannot connect to PostgreSQL: {}", why));
    }
    PQ(PQsetNoticeProcessor)(conn_, [](void*, const char*) {}, nullptr);  // "already exists" notices
    exec_raw("SET statement_timeout = '10s'");
    // Events, heartbeats, crashes and peaks promise nothing to a client: their commits do not
    // wait for the WAL to reach the disk (a crash of the server may lose the last few, never
    // corrupt). A lease's write is acknowledged to its client: it commits synchronously (below).
    exec_raw("SET synchronous_commit = off");
  }

  // Runs one statement with parameters ($1, $2, ...). Throws PgError.
  PgResult exec(const std::string& sql, const std::vector<Param>& params = {}) {
    ensure();
    std::vector<const char*> values;
    values.reserve(params.size());
    for (const auto& p : params) values.push_back(p.text ? p.text->c_str() : nullptr);
    PGresult* r = PQ(PQexecParams)(conn_, sql.c_str(), static_cast<int>(values.size()), nullptr,
                               values.data(), nullptr, nullptr, 0);
    return check(r);
  }

  // Runs several statements without parameters (a migration). Throws PgError.
  void exec_script(const std::string& sql) {
    ensure();
    exec_raw(sql);
  }

  const std::string& url() const { return url_; }

 private:
  PgResult exec_raw(const std::string& sql) { return check(PQ(PQexec)(conn_, sql.c_str())); }

  PgResult check(PGresult* r) {
    ExecStatusType st = r ? PQ(PQresultStatus)(r) : PGRES_FATAL_ERROR;
    if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK) return PgResult(r);
    std::string why = r ? PQ(PQresultErrorMessage)(r) : PQ(PQerrorMessage)(conn_);
    while (!why.empty() && (why.back() == '\n' || why.back() == ' ')) why.pop_back();
    if (r) PQ(PQclear)(r);
    // A connection that broke mid-call is opened again on the next one.
    if (PQ(PQstatus)(conn_) != CONNECTION_OK) {
      PQ(PQfinish)(conn_);
      conn_ = nullptr;
    } else if (PQ(PQtransactionStatus)(conn_) == PQTRANS_INERROR) {
      PQ(PQclear)(PQ(PQexec)(conn_, "ROLLBACK"));
    }
    throw PgError(why.empty() ? "PostgreSQL failed without a message" : why);
  }

  std::string url_;
  PGconn* conn_ = nullptr;
};

namespace {

// A transaction: committed by commit(), rolled back when left without it.
class PgTransaction {
 public:
  explicit PgTransaction(PgConnection& c) : c_(c) { c_.exec("BEGIN"); }
  ~PgTransaction() {
    if (done_) return;
    try {
      c_.exec("ROLLBACK");
    } catch (const std::exception&) {
      // The connection is gone: so is the transaction.
    }
  }
  void commit() {
    c_.exec("COMMIT");
    done_ = true;
  }

 private:
  PgConnection& c_;
  bool done_ = false;
};

// The schema, one migration per version; never edit a released one, add the next.
const std::vector<std::string> kMigrations = {
    // 1: the four stores, every row keyed by the host that wrote it.
    "CREATE TABLE events ("
    " host TEXT NOT NULL, id BIGINT NOT NULL, at_ms BIGINT NOT NULL, type TEXT NOT NULL,"
    " gpu INTEGER, subject TEXT NOT NULL, message TEXT NOT NULL, data TEXT,"
    " PRIMARY KEY (host, id));"
    "CREATE INDEX events_at ON events (host, at_ms);"
    "CREATE TABLE leases ("
    " host TEXT NOT NULL, id BIGINT NOT NULL, state TEXT NOT NULL, data TEXT NOT NULL,"
    " PRIMARY KEY (host, id));"
    "CREATE TABLE jobs ("
    " host TEXT NOT NULL, id BIGINT NOT NULL, label TEXT NOT NULL, command TEXT NOT NULL,"
    " holder TEXT NOT NULL, state TEXT NOT NULL, gpu INTEGER, vram BIGINT NOT NULL,"
    " requested_ms BIGINT NOT NULL, wait_ms BIGINT NOT NULL, run_ms BIGINT,"
    " peak_vram BIGINT NOT NULL, exit_status INTEGER, end_reason TEXT NOT NULL,"
    " PRIMARY KEY (host, id));"
    "CREATE INDEX jobs_label ON jobs (host, label, id);"
    "CREATE TABLE crashes ("
    " id BIGSERIAL PRIMARY KEY, host TEXT NOT NULL, service TEXT NOT NULL,"
    " at_ms BIGINT NOT NULL, data TEXT NOT NULL);"
    "CREATE INDEX crashes_service ON crashes (host, service, id);"
    "CREATE TABLE load_peaks ("
    " host TEXT NOT NULL, service TEXT NOT NULL, model TEXT NOT NULL, bytes BIGINT NOT NULL,"
    " at_ms BIGINT NOT NULL, PRIMARY KEY (host, service, model));",
    // 2: each host's heartbeat and last status snapshot (one view of every host).
    // Each migration is one string of statements, split over lines on purpose:
    // NOLINTNEXTLINE(bugprone-suspicious-missing-comma)
    "CREATE TABLE hosts ("
    " host TEXT PRIMARY KEY, heartbeat TIMESTAMPTZ NOT NULL, status TEXT NOT NULL DEFAULT '');",
    // 3: one queue across hosts (core/cluster.h): a lease row moves to the host that claims it;
    // ids are unique across hosts (each host's slot); each host's reason per queued lease; when
    // a lost host's leases were taken care of.
    "ALTER TABLE leases ADD COLUMN cluster BOOLEAN NOT NULL DEFAULT false,"
    " ADD COLUMN want_host TEXT, ADD COLUMN priority INTEGER NOT NULL DEFAULT 0,"
    " ADD COLUMN qseq BIGINT, ADD COLUMN release TEXT;"
    "CREATE SEQUENCE lease_qseq;"
    "CREATE INDEX leases_queue ON leases (priority DESC, qseq) WHERE state = 'queued' AND cluster;"
    "CREATE INDEX leases_by_id ON leases (id);"
    "CREATE INDEX jobs_by_id ON jobs (id);"
    "CREATE TABLE lease_reasons ("
    " id BIGINT NOT NULL, host TEXT NOT NULL, text TEXT NOT NULL, PRIMARY KEY (id, host));"
    "CREATE TABLE host_slots (host TEXT PRIMARY KEY, slot SERIAL UNIQUE);"
    "ALTER TABLE hosts ADD COLUMN lost_at TIMESTAMPTZ;",
    // 4: room for shared leases by eviction: the host making room for a queued lease, and each
    // host's reload cost of doing so beside its reason (NULL: it cannot).
    "ALTER TABLE leases ADD COLUMN evict_host TEXT;"
    "ALTER TABLE lease_reasons ADD COLUMN evict_cost BIGINT;",
    // 5: a heartbeat heard by another host's API for this row's lease, not yet taken up by the
    // host that holds it (HostStore::beat_lease, read and cleared in its claim round).
    "ALTER TABLE leases ADD COLUMN heard BOOLEAN NOT NULL DEFAULT false;",
    // 6: learned wake times (core/sleep.h WakeTime), beside the load peaks.
    "CREATE TABLE wake_times ("
    " host TEXT NOT NULL, service TEXT NOT NULL, model TEXT NOT NULL, depth TEXT NOT NULL,"
    " ms BIGINT NOT NULL, at_ms BIGINT NOT NULL, PRIMARY KEY (host, service, model, depth));",
    // 7: when each service is asked for (core/demand.h): its time-of-week histogram.
    "CREATE TABLE demand ("
    " host TEXT NOT NULL, service TEXT NOT NULL, since_ms BIGINT NOT NULL, counts TEXT NOT NULL,"
    " PRIMARY KEY (host, service));",
    // 8: fencing tokens (issue 30): every grant of a shared lease takes the next one.
    "CREATE SEQUENCE lease_tokens;",
    // 9: durations history (issue 29, store/duration_store.h): what each prompt and request
    // took, a prompt once per (host, service, key); and the versions and argument sets each
    // service ran with.
    "CREATE TABLE durations ("
    " id BIGSERIAL PRIMARY KEY, host TEXT NOT NULL, kind TEXT NOT NULL, service TEXT NOT NULL,"
    " at_ms BIGINT NOT NULL, key TEXT NOT NULL, model TEXT NOT NULL, workflow TEXT NOT NULL,"
    " outcome TEXT NOT NULL, status INTEGER NOT NULL, wait_s DOUBLE PRECISION,"
    " first_byte_s DOUBLE PRECISION, seconds DOUBLE PRECISION NOT NULL,"
    " tokens_per_s DOUBLE PRECISION, cached_nodes INTEGER NOT NULL, version TEXT NOT NULL,"
    " args_fp TEXT NOT NULL, gpu INTEGER);"
    "CREATE UNIQUE INDEX durations_key ON durations (host, service, kind, key) WHERE key <> '';"
    "CREATE INDEX durations_at ON durations (host, service, at_ms);"
    "CREATE TABLE service_variants ("
    " host TEXT NOT NULL, service TEXT NOT NULL, version TEXT NOT NULL, args_fp TEXT NOT NULL,"
    " args_json TEXT NOT NULL, first_seen_ms BIGINT NOT NULL, last_seen_ms BIGINT NOT NULL,"
    " PRIMARY KEY (host, service, version, args_fp));",
};
static_assert(kPostgresSchemaVersion == 9);

// A list of ids as one PostgreSQL array parameter ($1::bigint[]).
std::string id_array(const std::vector<uint64_t>& ids) {
  std::string out = "{";
  for (size_t i = 0; i < ids.size(); ++i) out += (i ? "," : "") + std::to_string(ids[i]);
  return out + "}";
}

// Writes lease `l` (ended) as a job record of `host`, in the caller's transaction.
void insert_job(PgConnection& c, const std::string& host, const Lease& l, const Now& now);

// Brings the schema to kPostgresSchemaVersion, one transaction under an advisory lock so that
// hosts starting together migrate once. Throws PgError.
void migrate(PgConnection& c) {
  PgTransaction tx(c);
  c.exec("SELECT pg_advisory_xact_lock(7100)");  // 7100: vramd's port, as good a key as any
  c.exec("CREATE TABLE IF NOT EXISTS vramd_schema (version INTEGER NOT NULL)");
  PgResult r = c.exec("SELECT COALESCE(MAX(version), 0) FROM vramd_schema");
  int64_t have = r.integer(0, 0);
  if (have > kPostgresSchemaVersion)
    throw PgError(fmt::format(
        "the database's schema is version {}, newer than this vramd knows ({}): a newer vramd "
        "wrote it; run that version (or newer) here too",
        have, kPostgresSchemaVersion));
  for (int64_t v = have + 1; v <= kPostgresSchemaVersion; ++v) {
    c.exec_script(kMigrations[static_cast<size_t>(v - 1)]);
    c.exec("INSERT INTO vramd_schema (version) VALUES ($1)", {v});
  }
  tx.commit();
}

template <typename F>
auto guarded(const std::string& what, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const std::exception& e) {
    return make_error(fmt::format("{}: {}", what, e.what()));
  }
}

// Writes event `id` of `host` (replacing one of that id), in the caller's transaction if any.
void put_event(PgConnection& c, const std::string& host, const EventRecord& e,
               const nlohmann::json& data, int64_t id) {
  c.exec(
      "INSERT INTO events (host, id, at_ms, type, gpu, subject, message, data)"
      " VALUES ($1, $2, $3, $4, $5, $6, $7, $8)"
      " ON CONFLICT (host, id) DO UPDATE SET at_ms = excluded.at_ms, type = excluded.type,"
      " gpu = excluded.gpu, subject = excluded.subject, message = excluded.message,"
      " data = excluded.data",
      {host, id, static_cast<int64_t>(e.at.time_since_epoch().count()), e.type, e.gpu, e.subject,
       e.message,
       data.is_null()
           ? Param(std::nullopt)
           : Param(data.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace))});
}

class PgEventStore final : public EventStore {
 public:
  PgEventStore(std::shared_ptr<PgConnection> c, std::string host, int64_t retention)
      : c_(std::move(c)), host_(std::move(host)), retention_(retention) {}

  Result<int64_t> append(const EventRecord& e, const nlohmann::json& data, int64_t id) override {
    return guarded("cannot store event", [&]() -> Result<int64_t> {
      if (id <= 0) id = next_id();
      put_event(*c_, host_, e, data, id);
      if (++appends_ % 64 == 1)
        c_->exec("DELETE FROM events WHERE host = $1 AND id <= $2", {host_, id - retention_});
      return id;
    });
  }

  Result<int64_t> max_id() const override {
    return guarded("cannot read events", [&]() -> Result<int64_t> { return next_id() - 1; });
  }

  Result<std::vector<StoredEvent>> list(int64_t after_id, std::optional<TimePoint> since,
                                        size_t limit) const override {
    return guarded("cannot read events", [&]() -> Result<std::vector<StoredEvent>> {
      PgResult r = c_->exec(
          "SELECT id, at_ms, type, gpu, subject, message, data FROM events"
          " WHERE host = $1 AND id > $2 AND at_ms >= $3"
          " AND id > (SELECT COALESCE(MAX(id), 0) FROM events WHERE host = $1) - $4"
          " ORDER BY id LIMIT $5",
          {host_, after_id,
           since ? static_cast<int64_t>(since->time_since_epoch().count()) : INT64_MIN,
           retention_, static_cast<int64_t>(limit)});
      std::vector<StoredEvent> out;
      for (int i = 0; i < r.rows(); ++i) {
        StoredEvent s;
        s.id = r.integer(i, 0);
        s.event.at = TimePoint(Duration(r.integer(i, 1)));
        s.event.type = r.text(i, 2);
        if (!r.null(i, 3)) s.event.gpu = static_cast<unsigned>(r.integer(i, 3));
        s.event.subject = r.text(i, 4);
        s.event.message = r.text(i, 5);
        if (!r.null(i, 6)) s.data = nlohmann::json::parse(r.text(i, 6), nullptr, false);
        out.push_back(std::move(s));
      }
      return out;
    });
  }

  Result<int64_t> count() const override {
    return guarded("cannot count events", [&]() -> Result<int64_t> {
      PgResult r = c_->exec(
          "SELECT COUNT(*) FROM events WHERE host = $1"
          " AND id > (SELECT COALESCE(MAX(id), 0) FROM events WHERE host = $1) - $2",
          {host_, retention_});
      return r.integer(0, 0);
    });
  }

 private:
  int64_t next_id() const {
    PgResult r = c_->exec("SELECT COALESCE(MAX(id), 0) + 1 FROM events WHERE host = $1", {host_});
    return r.integer(0, 0);
  }

  std::shared_ptr<PgConnection> c_;
  std::string host_;
  int64_t retention_;
  int64_t appends_ = 0;
};

constexpr const char* kJobColumns =
    "id, label, command, holder, state, gpu, vram, requested_ms, wait_ms, run_ms, peak_vram,"
    " exit_status, end_reason";

JobRecord job_from_row(const PgResult& r, int i) {
  JobRecord j;
  j.id = static_cast<uint64_t>(r.integer(i, 0));
  j.label = r.text(i, 1);
  j.command = r.text(i, 2);
  j.holder = r.text(i, 3);
  j.state = parse_lease_state(r.text(i, 4)).value_or(LeaseState::released);
  if (!r.null(i, 5)) j.gpu = static_cast<unsigned>(r.integer(i, 5));
  j.vram = static_cast<Bytes>(r.integer(i, 6));
  j.requested_at = TimePoint(std::chrono::milliseconds(r.integer(i, 7)));
  j.wait = std::chrono::milliseconds(r.integer(i, 8));
  if (!r.null(i, 9)) j.run = std::chrono::milliseconds(r.integer(i, 9));
  j.peak_vram = static_cast<Bytes>(r.integer(i, 10));
  if (!r.null(i, 11)) j.exit_status = static_cast<int>(r.integer(i, 11));
  j.end_reason = r.text(i, 12);
  return j;
}

class PgLeaseStore final : public LeaseStore {
 public:
  PgLeaseStore(std::shared_ptr<PgConnection> c, std::string host)
      : c_(std::move(c)), host_(std::move(host)) {}

  using LeaseStore::save;
  Status save(const Lease& l, const Now& now, const std::vector<StoredEvent>& events) override {
    return guarded(fmt::format("cannot store lease {}", l.id), [&]() -> Status {
      int64_t id = static_cast<int64_t>(l.id);
      PgTransaction tx(*c_);
      c_->exec("SET LOCAL synchronous_commit = on");  // on disk before the client hears of it
      for (const auto& e : events) put_event(*c_, host_, e.event, e.data, e.id);
      // A shared lease given up while cut off with on_host_lost = requeue: its row is left as it
      // is, for a claim round of this host (HostStore::sync's `fenced`) or a lost host's
      // handling elsewhere to queue again. Ending it here would take it from the queue.
      if (l.state == LeaseState::lost && l.request.cluster &&
          l.request.on_host_lost == OnHostLost::requeue) {
        tx.commit();
        return Ok{};
      }
      // The row may have moved to another host (claimed there, or re-queued while this host was
      // taken for lost): it is that host's now. An end from here asks that host to end it.
      PgResult where = c_->exec(
          "SELECT host FROM leases WHERE id = $2 ORDER BY (host = $1) DESC LIMIT 1 FOR UPDATE",
          {host_, id});
      // No row, and another host wrote its end: a shared lease this host kept while cut off,
      // taken over and ended elsewhere. Its end (or any state) from here is stale: dropped.
      if (where.rows() == 0 && l.request.cluster &&
          c_->exec("SELECT 1 FROM jobs WHERE id = $1 AND host <> $2 LIMIT 1", {id, host_}).rows() > 0) {
        tx.commit();
        return Ok{};
      }
      if (where.rows() > 0 && where.text(0, 0) != host_) {
        // A lost lease is this host's word on its own grant only: never an end of another's.
        if (!is_active(l.state) && l.state != LeaseState::lost)
          c_->exec("UPDATE leases SET release = $3 WHERE host = $1 AND id = $2",
                   {where.text(0, 0), id, l.end_reason.empty() ? std::string("released") : l.end_reason});
        tx.commit();
        return Ok{};
      }
      if (is_active(l.state)) {
        c_->exec(
            "INSERT INTO leases (host, id, state, data, cluster, want_host, priority, qseq)"
            " VALUES ($1, $2, $3, $4, $5, $6, $7, CASE WHEN $5 THEN nextval('lease_qseq') END)"
            " ON CONFLICT (host, id) DO UPDATE SET state = excluded.state, data = excluded.data",
            {host_, id, std::string(to_string(l.state)), lease_to_json(l, now),
             std::string(l.request.cluster ? "true" : "false"),
             l.request.host.empty() ? Param(std::nullopt) : Param(l.request.host),
             l.request.priority});
        tx.commit();
        return Ok{};
      }
      c_->exec("DELETE FROM lease_reasons WHERE id = $1", {id});
      insert_job(*c_, host_, l, now);
      c_->exec("DELETE FROM leases WHERE host = $1 AND id = $2", {host_, id});
      tx.commit();
      return Ok{};
    });
  }

  static void write_job(PgConnection& c, const std::string& host, const Lease& l, const Now& now) {
      int64_t id = static_cast<int64_t>(l.id);
      JobRecord j = job_record(l, now);
      c.exec(
          "INSERT INTO jobs (host, id, label, command, holder, state, gpu, vram, requested_ms,"
          " wait_ms, run_ms, peak_vram, exit_status, end_reason)"
          " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)"
          " ON CONFLICT (host, id) DO UPDATE SET label = excluded.label,"
          " command = excluded.command, holder = excluded.holder, state = excluded.state,"
          " gpu = excluded.gpu, vram = excluded.vram, requested_ms = excluded.requested_ms,"
          " wait_ms = excluded.wait_ms, run_ms = excluded.run_ms,"
          " peak_vram = excluded.peak_vram, exit_status = excluded.exit_status,"
          " end_reason = excluded.end_reason",
          {host, id, j.label, j.command, j.holder, std::string(to_string(j.state)), j.gpu,
           static_cast<int64_t>(j.vram), ms_of(j.requested_at),
           static_cast<int64_t>(j.wait.count()),
           j.run ? Param(static_cast<int64_t>(j.run->count())) : Param(std::nullopt),
           static_cast<int64_t>(j.peak_vram), j.exit_status, j.end_reason});
  }

  Result<std::vector<Lease>> active(const Now& now) const override {
    return guarded("cannot read leases", [&]() -> Result<std::vector<Lease>> {
      PgResult r = c_->exec("SELECT data FROM leases WHERE host = $1 ORDER BY id", {host_});
      std::vector<Lease> out;
      for (int i = 0; i < r.rows(); ++i) {
        auto l = lease_from_json(r.text(i, 0), now);
        if (!l) return make_error(l.error());
        out.push_back(std::move(*l));
      }
      return out;
    });
  }

  Result<uint64_t> max_id() const override {
    return guarded("cannot read leases", [&]() -> Result<uint64_t> {
      // This host's and those of its id space (its slot, modulo kLeaseIdStride) wherever they
      // went: a lease queued here and claimed by another host is that host's row (or job) now,
      // and its id must not be given again.
      PgResult r = c_->exec(
          "WITH mine AS (SELECT slot FROM host_slots WHERE host = $1)"
          " SELECT GREATEST(COALESCE((SELECT MAX(id) FROM leases WHERE host = $1"
          " OR id % $2 = (SELECT slot FROM mine)), 0),"
          " COALESCE((SELECT MAX(id) FROM jobs WHERE host = $1"
          " OR id % $2 = (SELECT slot FROM mine)), 0))",
          {host_, static_cast<int64_t>(kLeaseIdStride)});
      return static_cast<uint64_t>(r.integer(0, 0));
    });
  }

  Result<std::vector<JobRecord>> jobs(const std::string& label, size_t limit) const override {
    return guarded("cannot read jobs", [&]() -> Result<std::vector<JobRecord>> {
      PgResult r = c_->exec(fmt::format("SELECT {} FROM jobs WHERE host = $1 AND ($2 = '' OR"
                                        " label = $2) ORDER BY id DESC LIMIT $3",
                                        kJobColumns),
                            {host_, label, static_cast<int64_t>(limit)});
      std::vector<JobRecord> out;
      out.reserve(static_cast<std::size_t>(r.rows()));
      for (int i = 0; i < r.rows(); ++i) out.push_back(job_from_row(r, i));
      return out;
    });
  }

  Result<std::optional<JobRecord>> job(uint64_t id) const override {
    return guarded(fmt::format("cannot read job {}", id), [&]() -> Result<std::optional<JobRecord>> {
      PgResult r = c_->exec(
          fmt::format("SELECT {} FROM jobs WHERE host = $1 AND id = $2", kJobColumns),
          {host_, static_cast<int64_t>(id)});
      if (r.rows() == 0) return std::optional<JobRecord>();
      return std::optional<JobRecord>(job_from_row(r, 0));
    });
  }

 private:
  std::shared_ptr<PgConnection> c_;
  std::string host_;
};

void insert_job(PgConnection& c, const std::string& host, const Lease& l, const Now& now) {
  PgLeaseStore::write_job(c, host, l, now);
}

class PgCrashStore final : public CrashStore {
 public:
  PgCrashStore(std::shared_ptr<PgConnection> c, std::string host)
      : c_(std::move(c)), host_(std::move(host)) {}

  Result<int64_t> add(const CrashRecord& c) override {
    return guarded("cannot store crash", [&]() -> Result<int64_t> {
      PgTransaction tx(*c_);
      PgResult r = c_->exec(
          "INSERT INTO crashes (host, service, at_ms, data) VALUES ($1, $2, $3, $4) RETURNING id",
          {host_, c.service, static_cast<int64_t>(c.at.time_since_epoch().count()),
           crash_data_json(c)});
      // Keep the newest 1,000 per service.
      c_->exec(
          "DELETE FROM crashes WHERE host = $1 AND service = $2 AND id NOT IN (SELECT id FROM"
          " crashes WHERE host = $1 AND service = $2 ORDER BY id DESC LIMIT 1000)",
          {host_, c.service});
      tx.commit();
      return r.integer(0, 0);
    });
  }

  Result<std::vector<CrashRecord>> list(const std::string& service, size_t limit) const override {
    return guarded("cannot read crashes", [&]() -> Result<std::vector<CrashRecord>> {
      PgResult r = c_->exec(
          "SELECT id, service, at_ms, data FROM crashes WHERE host = $1 AND ($2 = '' OR"
          " service = $2) ORDER BY id DESC LIMIT $3",
          {host_, service, static_cast<int64_t>(limit)});
      std::vector<CrashRecord> out;
      for (int i = 0; i < r.rows(); ++i) {
        CrashRecord c;
        c.id = r.integer(i, 0);
        c.service = r.text(i, 1);
        c.at = TimePoint(Duration(r.integer(i, 2)));
        if (!crash_data_from_json(r.text(i, 3), c)) continue;
        out.push_back(std::move(c));
      }
      return out;
    });
  }

 private:
  std::shared_ptr<PgConnection> c_;
  std::string host_;
};

class PgPeakStore final : public PeakStore {
 public:
  PgPeakStore(std::shared_ptr<PgConnection> c, std::string host)
      : c_(std::move(c)), host_(std::move(host)) {}

  Status save(const LoadPeak& peak, TimePoint at) override {
    return guarded(fmt::format("cannot store the load peak of {}", peak.service), [&]() -> Status {
      c_->exec(
          "INSERT INTO load_peaks (host, service, model, bytes, at_ms) VALUES ($1, $2, $3, $4, $5)"
          " ON CONFLICT (host, service, model) DO UPDATE SET"
          " bytes = GREATEST(load_peaks.bytes, excluded.bytes), at_ms = excluded.at_ms",
          {host_, peak.service, peak.model, static_cast<int64_t>(peak.bytes), ms_of(at)});
      return Ok{};
    });
  }

  Result<std::vector<LoadPeak>> all() const override {
    return guarded("cannot read load peaks", [&]() -> Result<std::vector<LoadPeak>> {
      PgResult r = c_->exec(
          "SELECT service, model, bytes FROM load_peaks WHERE host = $1 ORDER BY service, model",
          {host_});
      std::vector<LoadPeak> out;
      for (int i = 0; i < r.rows(); ++i) {
        int64_t bytes = r.integer(i, 2);
        if (bytes <= 0) continue;  // never written so; a damaged row is no peak
        out.push_back({r.text(i, 0), r.text(i, 1), static_cast<Bytes>(bytes)});
      }
      return out;
    });
  }

  Status save_wake(const WakeTime& t, TimePoint at) override {
    return guarded(fmt::format("cannot store the wake time of {}", t.service), [&]() -> Status {
      c_->exec(
          "INSERT INTO wake_times (host, service, model, depth, ms, at_ms)"
          " VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (host, service, model, depth) DO UPDATE"
          " SET ms = excluded.ms, at_ms = excluded.at_ms",
          {host_, t.service, t.model, std::string(to_string(t.depth)),
           static_cast<int64_t>(t.took.count()), ms_of(at)});
      return Ok{};
    });
  }

  Result<std::vector<WakeTime>> wake_times() const override {
    return guarded("cannot read wake times", [&]() -> Result<std::vector<WakeTime>> {
      PgResult r = c_->exec(
          "SELECT service, model, depth, ms FROM wake_times WHERE host = $1"
          " ORDER BY service, model, depth",
          {host_});
      std::vector<WakeTime> out;
      for (int i = 0; i < r.rows(); ++i) {
        auto depth = parse_sleep_depth(r.text(i, 2));
        int64_t ms = r.integer(i, 3);
        if (!depth || ms <= 0) continue;  // never written so
        out.push_back({r.text(i, 0), r.text(i, 1), *depth, Duration(ms)});
      }
      return out;
    });
  }

  Status save_demand(const DemandHistory& d) override {
    return guarded(fmt::format("cannot store the demand of {}", d.service), [&]() -> Status {
      c_->exec(
          "INSERT INTO demand (host, service, since_ms, counts) VALUES ($1, $2, $3, $4)"
          " ON CONFLICT (host, service) DO UPDATE"
          " SET since_ms = excluded.since_ms, counts = excluded.counts",
          {host_, d.service, static_cast<int64_t>(d.since.time_since_epoch().count()),
           encode_counts(d.counts)});
      return Ok{};
    });
  }

  Result<std::vector<DemandHistory>> demand() const override {
    return guarded("cannot read demand", [&]() -> Result<std::vector<DemandHistory>> {
      PgResult r = c_->exec(
          "SELECT service, since_ms, counts FROM demand WHERE host = $1 ORDER BY service",
          {host_});
      std::vector<DemandHistory> out;
      for (int i = 0; i < r.rows(); ++i) {
        auto counts = parse_counts(r.text(i, 2));
        if (!counts) continue;  // never written so
        DemandHistory d;
        d.service = r.text(i, 0);
        d.since = TimePoint(Duration(r.integer(i, 1)));
        d.counts = *counts;
        out.push_back(std::move(d));
      }
      return out;
    });
  }

 private:
  std::shared_ptr<PgConnection> c_;
  std::string host_;
};

}  // namespace

HostStore::HostStore(std::shared_ptr<PgConnection> conn, std::string host)
    : conn_(std::move(conn)), host_(std::move(host)) {}

Status HostStore::beat(const std::string& status_json) {
  return guarded("cannot write the host's heartbeat", [&]() -> Status {
    if (status_json.empty())
      conn_->exec(
          "INSERT INTO hosts (host, heartbeat) VALUES ($1, now())"
          " ON CONFLICT (host) DO UPDATE SET heartbeat = now(), lost_at = NULL",
          {host_});
    else
      conn_->exec(
          "INSERT INTO hosts (host, heartbeat, status) VALUES ($1, now(), $2)"
          " ON CONFLICT (host) DO UPDATE SET heartbeat = now(), status = excluded.status,"
          " lost_at = NULL",
          {host_, status_json});
    return Ok{};
  });
}

Result<std::vector<HostRow>> HostStore::all() const {
  return guarded("cannot read hosts", [&]() -> Result<std::vector<HostRow>> {
    PgResult r = conn_->exec(
        "SELECT host, (EXTRACT(EPOCH FROM heartbeat) * 1000)::BIGINT,"
        " (EXTRACT(EPOCH FROM now() - heartbeat) * 1000)::BIGINT, status FROM hosts ORDER BY host");
    std::vector<HostRow> out;
    out.reserve(static_cast<std::size_t>(r.rows()));
    for (int i = 0; i < r.rows(); ++i)
      out.push_back({r.text(i, 0), TimePoint(std::chrono::milliseconds(r.integer(i, 1))),
                     Duration(r.integer(i, 2)), r.text(i, 3)});
    return out;
  });
}

Result<uint64_t> HostStore::slot() {
  return guarded("cannot read this host's slot", [&]() -> Result<uint64_t> {
    conn_->exec("INSERT INTO host_slots (host) VALUES ($1) ON CONFLICT (host) DO NOTHING", {host_});
    PgResult r = conn_->exec("SELECT slot FROM host_slots WHERE host = $1", {host_});
    int64_t slot = r.rows() ? r.integer(0, 0) : 0;
    if (slot < 1 || static_cast<uint64_t>(slot) >= kLeaseIdStride)
      return make_error(fmt::format("host {} has slot {}: at most {} hosts share a store", host_,
                                    slot, kLeaseIdStride - 1));
    return static_cast<uint64_t>(slot);
  });
}

namespace {
// Claimed at most this many candidates a round (the rest wait their turn, in order).
constexpr int kClaimBatch = 256;

std::string millis(Duration d) { return std::to_string(d.count()); }

// Every live host's reason for each of `ids` (a PostgreSQL array), joined in host order: "gpu1:
// needs 12.0 GiB; ...; gpu2: needs 12.0 GiB; ...". A lost host's word counts no more.
std::map<uint64_t, std::string> combined_reasons(PgConnection& c, const std::string& ids,
                                                 Duration host_timeout) {
  std::map<uint64_t, std::string> out;
  PgResult why = c.exec(
      "SELECT r.id, r.host, r.text FROM lease_reasons r JOIN hosts h ON h.host = r.host"
      " WHERE r.id = ANY($1::bigint[])"
      " AND h.heartbeat > now() - $2::bigint * interval '1 millisecond'"
      " ORDER BY r.id, r.host",
      {ids, millis(host_timeout)});
  for (int i = 0; i < why.rows(); ++i) {
    std::string& text = out[static_cast<uint64_t>(why.integer(i, 0))];
    text += (text.empty() ? "" : "; ") + why.text(i, 2);
  }
  return out;
}
}  // namespace

Result<ClusterSynced> HostStore::sync(const ClaimContext& ctx, const std::vector<uint64_t>& queued,
                                      const std::vector<uint64_t>& granted,
                                      const std::vector<uint64_t>& pending, const Now& now,
                                      Duration host_timeout, const std::vector<uint64_t>& fenced) {
  return guarded("cannot claim from the shared queue", [&]() -> Result<ClusterSynced> {
    ClusterSynced out;
    {
      PgTransaction tx(*conn_);
      conn_->exec("SET LOCAL synchronous_commit = on");  // a grant is told to its client
      // A host whose own heartbeat is not recent by the store's clock claims nothing: the others
      // may be about to take it for lost (the core's own check is on this host's clock).
      PgResult fresh = conn_->exec(
          "SELECT count(*) FROM hosts WHERE host = $1"
          " AND heartbeat > now() - $2::bigint * interval '1 millisecond'",
          {host_, millis(host_timeout / 2)});
      const bool in_touch = fresh.integer(0, 0) > 0;
      PgResult r = conn_->exec(
          "SELECT host, id, data, evict_host FROM leases WHERE state = 'queued' AND cluster"
          " AND (want_host IS NULL OR want_host = $1) ORDER BY priority DESC, qseq"
          " LIMIT $2 FOR UPDATE SKIP LOCKED",
          {host_, kClaimBatch});
      std::vector<Lease> candidates;
      std::map<uint64_t, std::string> origin;
      std::map<uint64_t, std::string> marked;  // evict_host, as the row has it
      std::vector<uint64_t> ids;
      for (int i = 0; i < r.rows(); ++i) {
        auto l = lease_from_json(r.text(i, 2), now);
        if (!l) continue;  // a damaged row is claimed by no one
        origin[l->id] = r.text(i, 0);
        if (!r.null(i, 3)) marked[l->id] = r.text(i, 3);
        ids.push_back(l->id);
        candidates.push_back(std::move(*l));
      }
      // The other live hosts' word on the candidates (their reasons and costs), and this host's
      // own rows (written again only when they changed).
      std::map<uint64_t, ClaimPeers> peers;
      std::map<uint64_t, std::pair<std::string, std::optional<int64_t>>> own;
      if (!ids.empty()) {
        PgResult live = conn_->exec(
            "SELECT host FROM hosts WHERE host <> $1"
            " AND heartbeat > now() - $2::bigint * interval '1 millisecond'",
            {host_, millis(host_timeout)});
        std::set<std::string> others;
        for (int i = 0; i < live.rows(); ++i) others.insert(live.text(i, 0));
        PgResult said = conn_->exec(
            "SELECT id, host, text, evict_cost FROM lease_reasons WHERE id = ANY($1::bigint[])",
            {id_array(ids)});
        std::map<uint64_t, std::set<std::string>> considered;
        for (int i = 0; i < said.rows(); ++i) {
          uint64_t id = static_cast<uint64_t>(said.integer(i, 0));
          std::string host = said.text(i, 1);
          std::optional<int64_t> cost;
          if (!said.null(i, 3)) cost = said.integer(i, 3);
          if (host == host_) {
            own[id] = {said.text(i, 2), cost};
          } else if (others.count(host)) {
            considered[id].insert(host);
            if (cost) peers[id].evict_costs[host] = *cost;
          }
        }
        for (const Lease& l : candidates) {
          ClaimPeers& p = peers[l.id];
          if (l.request.host.empty())
            for (const auto& h : others)
              if (!considered[l.id].count(h)) ++p.unconsidered;
          // A mark of a lost host counts for nothing (handle_lost_hosts lifts it).
          if (auto m = marked.find(l.id);
              m != marked.end() && (m->second == host_ || others.count(m->second)))
            p.making_room = m->second;
        }
      }
      ClaimContext checked = ctx;
      if (!in_touch && checked.cut_off.empty())
        checked.cut_off = "its heartbeat in the store is older than half of host_timeout";
      ClaimDecision d = choose_claims(checked, candidates, peers);
      std::map<uint64_t, unsigned> grant(d.grant.begin(), d.grant.end());
      std::vector<uint64_t> claimed_ids;
      for (Lease& l : candidates) {
        auto g = grant.find(l.id);
        if (g == grant.end()) continue;
        l.state = LeaseState::granted;
        l.gpu = g->second;
        l.granted_at = now.mono;
        l.reason = LeaseReason{};
        l.token = static_cast<uint64_t>(conn_->exec("SELECT nextval('lease_tokens')").integer(0, 0));
        if (origin[l.id] != host_) {  // its holder pid is on the host that queued it
          l.request.pid.reset();
          l.request.pid_start_ticks = 0;
        }
        // The row is locked (FOR UPDATE): the update takes it; the check is a second guard.
        PgResult moved = conn_->exec(
            "UPDATE leases SET host = $1, state = 'granted', data = $4, release = NULL,"
            " evict_host = NULL WHERE host = $2 AND id = $3 AND state = 'queued' RETURNING id",
            {host_, origin[l.id], static_cast<int64_t>(l.id), lease_to_json(l, now)});
        if (moved.rows() != 1) continue;
        claimed_ids.push_back(l.id);
        out.claimed.push_back(l);
      }
      if (!claimed_ids.empty())
        conn_->exec("DELETE FROM lease_reasons WHERE id = ANY($1::bigint[])", {id_array(claimed_ids)});
      // Room by eviction: the mark is taken under the row's lock, so one host at a time.
      for (const ClaimEviction& ev : d.evict) {
        PgResult m = conn_->exec(
            "UPDATE leases SET evict_host = $1 WHERE host = $2 AND id = $3 AND state = 'queued'"
            " RETURNING id",
            {host_, origin[ev.lease], static_cast<int64_t>(ev.lease)});
        if (m.rows() == 1) out.evict.push_back(ev);
      }
      for (uint64_t id : d.unmark) {
        PgResult m = conn_->exec(
            "UPDATE leases SET evict_host = NULL WHERE host = $2 AND id = $3 AND evict_host = $1"
            " RETURNING id",
            {host_, origin[id], static_cast<int64_t>(id)});
        if (m.rows() == 1) out.unmarked.push_back(id);
      }
      for (const auto& [id, text] : d.reasons) {
        std::optional<int64_t> cost;
        if (auto c = d.evict_costs.find(id); c != d.evict_costs.end()) cost = c->second;
        if (auto it = own.find(id);
            it != own.end() && it->second.first == text && it->second.second == cost)
          continue;
        conn_->exec(
            "INSERT INTO lease_reasons (id, host, text, evict_cost) VALUES ($1, $2, $3, $4)"
            " ON CONFLICT (id, host) DO UPDATE SET text = excluded.text,"
            " evict_cost = excluded.evict_cost",
            {static_cast<int64_t>(id), host_, text, cost});
      }
      // Leases this host gave up while cut off: a row still granted here goes back to the queue,
      // kept here; one that moved (another host re-queued it) is that host's.
      for (uint64_t id : fenced) {
        PgResult f = conn_->exec(
            "SELECT data, release FROM leases WHERE host = $1 AND id = $2 AND state = 'granted'"
            " FOR UPDATE",
            {host_, static_cast<int64_t>(id)});
        if (f.rows() == 1 && !f.null(0, 1)) {
          // Its holder asked another host's API to release it meanwhile: it ends so, by this
          // host's write of its end with its event (an end written here would have none). The
          // row stays as it is until then (a kill meanwhile: the restart ends it so).
          if (auto l = lease_from_json(f.text(0, 0), now)) {
            l->state = LeaseState::released;
            l->ended_at = now.mono;
            l->end_reason = f.text(0, 1);
            out.fence_released.push_back(std::move(*l));
          } else {
            conn_->exec("DELETE FROM leases WHERE host = $1 AND id = $2",
                        {host_, static_cast<int64_t>(id)});  // a damaged row: no one's
          }
        } else if (f.rows() == 1)
          if (auto l = lease_from_json(f.text(0, 0), now)) {
            Lease after = after_host_lost(std::move(*l), host_, now);
            after.reason.text = fmt::format("needs {}; re-queued: host {} gave it up while cut off "
                                            "from the store",
                                            format_size(after.request.vram), host_);
            conn_->exec(
                "UPDATE leases SET state = 'queued', data = $3, release = NULL, evict_host = NULL"
                " WHERE host = $1 AND id = $2",
                {host_, static_cast<int64_t>(id), lease_to_json(after, now)});
            out.requeued_here.push_back(std::move(after));
          }
        out.fence_done.push_back(id);
      }
      tx.commit();
    }
    try {
      read_after_claim(queued, granted, pending, now, host_timeout, out);
    } catch (const std::exception&) {
      // The claims are committed and answered; what else the round reads, the next one does.
    }
    return out;
  });
}

void HostStore::read_after_claim(const std::vector<uint64_t>& queued,
                                 const std::vector<uint64_t>& granted,
                                 const std::vector<uint64_t>& pending, const Now& now,
                                 Duration host_timeout, ClusterSynced& out) {
  {
    std::set<uint64_t> known(granted.begin(), granted.end());
    known.insert(pending.begin(), pending.end());
    known.insert(queued.begin(), queued.end());
    for (const auto& l : out.claimed) known.insert(l.id);
    for (const auto& l : out.fence_released) known.insert(l.id);  // ended by this host next
    PgResult orphans = conn_->exec(
        "SELECT id, data FROM leases WHERE host = $1 AND state = 'granted' AND cluster", {host_});
    for (int i = 0; i < orphans.rows(); ++i) {
      if (known.count(static_cast<uint64_t>(orphans.integer(i, 0)))) continue;
      if (auto l = lease_from_json(orphans.text(i, 1), now)) out.claimed.push_back(std::move(*l));
    }
  }
  {
    if (!queued.empty()) {
      std::string ids = id_array(queued);
      PgResult m = conn_->exec(
          "SELECT id, host, data FROM leases WHERE id = ANY($1::bigint[]) AND host <> $2", {ids, host_});
      for (int i = 0; i < m.rows(); ++i) {
        MovedLease ml;
        ml.id = static_cast<uint64_t>(m.integer(i, 0));
        ml.host = m.text(i, 1);
        auto l = lease_from_json(m.text(i, 2), now);
        if (l) {
          // Still queued, kept by another host: it took this host's queue while this one was
          // taken for lost. Kept here too, its heartbeats would never reach that host.
          ml.kept_there = l->state == LeaseState::queued;
          ml.gpu = l->gpu;
        }
        out.moved.push_back(std::move(ml));
      }
      PgResult e = conn_->exec(
          "SELECT id, host, gpu FROM jobs WHERE id = ANY($1::bigint[]) AND host <> $2"
          " AND id NOT IN (SELECT id FROM leases WHERE id = ANY($1::bigint[]))",
          {ids, host_});
      for (int i = 0; i < e.rows(); ++i) {
        MovedLease ml;
        ml.id = static_cast<uint64_t>(e.integer(i, 0));
        ml.host = e.text(i, 1);
        if (!e.null(i, 2)) ml.gpu = static_cast<unsigned>(e.integer(i, 2));
        ml.ended = true;
        out.moved.push_back(std::move(ml));
      }
      out.reasons = combined_reasons(*conn_, ids, host_timeout);
    }
    if (!granted.empty()) {
      PgResult g = conn_->exec(
          "SELECT id FROM leases WHERE host = $1 AND state = 'granted' AND id = ANY($2::bigint[])",
          {host_, id_array(granted)});
      std::set<uint64_t> still;
      for (int i = 0; i < g.rows(); ++i) still.insert(static_cast<uint64_t>(g.integer(i, 0)));
      for (uint64_t id : granted)
        if (!still.count(id)) out.lost.push_back(id);
    }
    PgResult rel = conn_->exec("SELECT id, release FROM leases WHERE host = $1 AND release IS NOT NULL",
                               {host_});
    for (int i = 0; i < rel.rows(); ++i)
      out.releases.emplace_back(static_cast<uint64_t>(rel.integer(i, 0)), rel.text(i, 1));
    // Heartbeats other hosts' APIs heard for leases this host holds: taken up (and cleared) at
    // once, so that each is counted here once; one lost with the answer is followed by the next.
    PgResult heard = conn_->exec(
        "UPDATE leases SET heard = false WHERE host = $1 AND heard RETURNING id", {host_});
    for (int i = 0; i < heard.rows(); ++i) out.heard.push_back(static_cast<uint64_t>(heard.integer(i, 0)));
  }
}

Result<std::vector<LostHost>> HostStore::handle_lost_hosts(Duration host_timeout, const Now& now) {
  return guarded("cannot look after lost hosts", [&]() -> Result<std::vector<LostHost>> {
    std::vector<LostHost> out;
    PgTransaction tx(*conn_);
    conn_->exec("SET LOCAL synchronous_commit = on");
    // One live host at a time (7101: beside the migrations' 7100); the others skip this beat.
    PgResult lock = conn_->exec("SELECT pg_try_advisory_xact_lock(7101)");
    if (lock.text(0, 0) != "t") return out;
    PgResult hosts = conn_->exec(
        "SELECT host, lost_at IS NULL FROM hosts WHERE host <> $1"
        " AND heartbeat < now() - $2::bigint * interval '1 millisecond'",
        {host_, millis(host_timeout)});
    for (int h = 0; h < hosts.rows(); ++h) {
      LostHost lost;
      lost.host = hosts.text(h, 0);
      bool first = hosts.text(h, 1) == "t";
      PgResult rows = conn_->exec(
          "SELECT id, data, release FROM leases WHERE host = $1 AND cluster FOR UPDATE",
          {lost.host});
      for (int i = 0; i < rows.rows(); ++i) {
        auto l = lease_from_json(rows.text(i, 1), now);
        if (!l) continue;
        int64_t id = rows.integer(i, 0);
        if (l->state == LeaseState::granted && !rows.null(i, 2)) {
          // Its holder asked another host's API to release it while its host was cut off: it
          // ends so (queued again, it would be granted to no one until it expired).
          l->state = LeaseState::released;
          l->ended_at = now.mono;
          l->end_reason = fmt::format("{} (its host {} was lost)", rows.text(i, 2), lost.host);
          insert_job(*conn_, lost.host, *l, now);
          conn_->exec("DELETE FROM leases WHERE host = $1 AND id = $2", {lost.host, id});
          lost.released.push_back(std::move(*l));
          continue;
        }
        if (l->state == LeaseState::queued) {  // its queue is kept here from now on
          l->request.pid.reset();
          l->request.pid_start_ticks = 0;
          conn_->exec("UPDATE leases SET host = $1, data = $4 WHERE host = $2 AND id = $3",
                      {host_, lost.host, id, lease_to_json(*l, now)});
          lost.requeued.push_back(std::move(*l));
          continue;
        }
        Lease after = after_host_lost(std::move(*l), lost.host, now);
        if (after.state == LeaseState::queued) {
          conn_->exec(
              "UPDATE leases SET host = $1, state = 'queued', data = $4, release = NULL"
              " WHERE host = $2 AND id = $3",
              {host_, lost.host, id, lease_to_json(after, now)});
          lost.requeued.push_back(std::move(after));
        } else {
          insert_job(*conn_, lost.host, after, now);
          conn_->exec("DELETE FROM leases WHERE host = $1 AND id = $2", {lost.host, id});
          lost.ended.push_back(std::move(after));
        }
      }
      // Its word on queued leases is void: its reasons go, and a lease it was making room for is
      // every host's again.
      conn_->exec("DELETE FROM lease_reasons WHERE host = $1", {lost.host});
      conn_->exec("UPDATE leases SET evict_host = NULL WHERE evict_host = $1", {lost.host});
      if (!first && lost.requeued.empty() && lost.ended.empty() && lost.released.empty()) continue;
      conn_->exec("UPDATE hosts SET lost_at = now() WHERE host = $1", {lost.host});
      out.push_back(std::move(lost));
    }
    tx.commit();
    return out;
  });
}

Result<std::optional<ElsewhereLease>> HostStore::find(uint64_t id, const Now& now,
                                                      Duration host_timeout) const {
  return guarded(fmt::format("cannot read lease {}", id),
                 [&]() -> Result<std::optional<ElsewhereLease>> {
    ElsewhereLease out;
    PgResult r = conn_->exec(
        "SELECT host, data FROM leases WHERE id = $2 ORDER BY (host = $1) DESC LIMIT 1",
        {host_, static_cast<int64_t>(id)});
    if (r.rows() > 0) {
      auto l = lease_from_json(r.text(0, 1), now);
      if (!l) return make_error(l.error());
      out.host = r.text(0, 0);
      out.lease = std::move(*l);
      // Queued: its reason is every live host's (the row keeps only what its keeper last wrote).
      if (out.lease->state == LeaseState::queued && out.lease->request.cluster) {
        auto why = combined_reasons(*conn_, id_array({id}), host_timeout);
        if (auto it = why.find(id); it != why.end()) {
          out.lease->reason.text = it->second;
          out.lease->reason.considered = true;
        }
      }
      return std::optional<ElsewhereLease>(std::move(out));
    }
    PgResult j = conn_->exec(
        fmt::format("SELECT host, {} FROM jobs WHERE id = $2 ORDER BY (host = $1) DESC LIMIT 1",
                    kJobColumns),
        {host_, static_cast<int64_t>(id)});
    if (j.rows() == 0) return std::optional<ElsewhereLease>();
    out.host = j.text(0, 0);
    // job_from_row reads its columns from 0: read them past the host column.
    JobRecord rec;
    rec.id = static_cast<uint64_t>(j.integer(0, 1));
    rec.label = j.text(0, 2);
    rec.command = j.text(0, 3);
    rec.holder = j.text(0, 4);
    rec.state = parse_lease_state(j.text(0, 5)).value_or(LeaseState::released);
    if (!j.null(0, 6)) rec.gpu = static_cast<unsigned>(j.integer(0, 6));
    rec.vram = static_cast<Bytes>(j.integer(0, 7));
    rec.requested_at = TimePoint(std::chrono::milliseconds(j.integer(0, 8)));
    rec.wait = std::chrono::milliseconds(j.integer(0, 9));
    if (!j.null(0, 10)) rec.run = std::chrono::milliseconds(j.integer(0, 10));
    rec.peak_vram = static_cast<Bytes>(j.integer(0, 11));
    if (!j.null(0, 12)) rec.exit_status = static_cast<int>(j.integer(0, 12));
    rec.end_reason = j.text(0, 13);
    out.job = std::move(rec);
    return std::optional<ElsewhereLease>(std::move(out));
  });
}

Result<std::vector<HostLease>> HostStore::leases_elsewhere(const std::string& only, const Now& now,
                                                           Duration host_timeout) const {
  return guarded("cannot read other hosts' leases", [&]() -> Result<std::vector<HostLease>> {
    // One statement, one snapshot: a lease moving between hosts is read on one side only.
    PgResult r = conn_->exec(
        "SELECT l.host, l.data, (SELECT string_agg(r.text, '; ' ORDER BY r.host) FROM lease_reasons r"
        "  JOIN hosts h ON h.host = r.host WHERE r.id = l.id AND l.state = 'queued' AND l.cluster"
        "  AND h.heartbeat > now() - $3::bigint * interval '1 millisecond')"
        " FROM leases l WHERE l.host <> $1 AND ($2 = '' OR l.host = $2) ORDER BY l.host, l.id",
        {host_, only, millis(host_timeout)});
    std::vector<HostLease> out;
    out.reserve(static_cast<size_t>(r.rows()));
    for (int i = 0; i < r.rows(); ++i) {
      auto l = lease_from_json(r.text(i, 1), now);
      if (!l) continue;  // a damaged row: shown by no one (as a claim round skips it)
      if (!r.null(i, 2)) l->reason.text = r.text(i, 2);
      out.push_back({r.text(i, 0), std::move(*l)});
    }
    return out;
  });
}

Result<bool> HostStore::ask_release(uint64_t id, const std::string& why) {
  return guarded(fmt::format("cannot end lease {}", id), [&]() -> Result<bool> {
    PgResult r = conn_->exec(
        "UPDATE leases SET release = $3 WHERE id = $1 AND host <> $2 RETURNING host",
        {static_cast<int64_t>(id), host_, why});
    return r.rows() > 0;
  });
}

Result<std::optional<std::string>> HostStore::beat_lease(uint64_t id) {
  return guarded(fmt::format("cannot pass on the heartbeat of lease {}", id),
                 [&]() -> Result<std::optional<std::string>> {
    PgResult r = conn_->exec(
        "UPDATE leases SET heard = true WHERE id = $1 AND host <> $2 RETURNING host",
        {static_cast<int64_t>(id), host_});
    if (r.rows() == 0) return std::optional<std::string>();
    return std::optional<std::string>(r.text(0, 0));
  });
}

namespace {

// A double in a form PostgreSQL reads back to the same double (the shortest that round-trips).
Param real(double v) { return Param(fmt::format("{}", v)); }
Param real(std::optional<double> v) {
  if (!v || !std::isfinite(*v)) return Param(std::nullopt);  // no number is no time
  return real(*v);
}
std::optional<double> real_at(const PgResult& r, int row, int col) {
  if (r.null(row, col)) return std::nullopt;
  return std::stod(r.text(row, col));
}

class PgDurationStore final : public DurationStore {
 public:
  PgDurationStore(std::shared_ptr<PgConnection> c, std::string host)
      : c_(std::move(c)), host_(std::move(host)) {}

  Status add(const std::vector<DurationRecord>& records) override {
    if (records.empty()) return Ok{};
    return guarded(fmt::format("cannot store {} durations", records.size()), [&]() -> Status {
      // Multi-row inserts of up to kRows rows (16 parameters each, far below libpq's 65535).
      constexpr size_t kCols = 16, kRows = 500;
      PgTransaction tx(*c_);
      std::vector<const DurationRecord*> rows;
      for (const DurationRecord& r : records)
        if (std::isfinite(r.seconds)) rows.push_back(&r);  // a record with no time is none
      for (size_t from = 0; from < rows.size(); from += kRows) {
        size_t n = std::min(kRows, rows.size() - from);
        std::string sql =
            "INSERT INTO durations (host, kind, service, at_ms, key, model, workflow, outcome,"
            " status, wait_s, first_byte_s, seconds, tokens_per_s, cached_nodes, version,"
            " args_fp, gpu) VALUES ";
        std::vector<Param> params;
        params.reserve(n * kCols + 1);
        params.emplace_back(host_);
        for (size_t i = 0; i < n; ++i) {
          const DurationRecord& r = *rows[from + i];
          size_t b = 1 + i * kCols;
          sql += i ? ", ($1" : "($1";
          for (size_t k = 1; k <= kCols; ++k) sql += fmt::format(", ${}", b + k);
          sql += ")";
          params.emplace_back(to_string(r.kind));
          params.emplace_back(r.service);
          params.emplace_back(ms_of(r.at));
          params.emplace_back(r.key);
          params.emplace_back(r.model);
          params.emplace_back(r.workflow);
          params.emplace_back(r.outcome ? to_string(*r.outcome) : "");
          params.emplace_back(r.status);
          params.push_back(real(r.wait_s));
          params.push_back(real(r.first_byte_s));
          params.push_back(real(r.seconds));
          params.push_back(real(r.tokens_per_s));
          params.emplace_back(r.cached_nodes);
          params.emplace_back(r.version);
          params.emplace_back(r.args_fp);
          params.emplace_back(r.gpu);
        }
        sql += " ON CONFLICT DO NOTHING";  // a prompt already stored stays as it is
        c_->exec(sql, params);
      }
      tx.commit();
      return Ok{};
    });
  }

  Result<std::vector<DurationRecord>> list(const DurationQuery& q) const override {
    return guarded("cannot read durations", [&]() -> Result<std::vector<DurationRecord>> {
      PgResult r = c_->exec(
          "SELECT kind, service, at_ms, key, model, workflow, outcome, status, wait_s,"
          " first_byte_s, seconds, tokens_per_s, cached_nodes, version, args_fp, gpu"
          " FROM durations WHERE host = $1 AND at_ms >= $2 AND ($3 = '' OR service = $3)"
          " AND ($4 = '' OR kind = $4) AND ($5 = '' OR workflow = $5)"
          " AND ($6 = '' OR model = $6) ORDER BY at_ms DESC, id DESC LIMIT $7",
          {host_, ms_of(q.since), q.service, q.kind ? to_string(*q.kind) : "", q.workflow,
           q.model, static_cast<int64_t>(q.limit)});
      std::vector<DurationRecord> out;
      out.reserve(static_cast<size_t>(r.rows()));
      for (int i = 0; i < r.rows(); ++i) {
        auto kind = record_kind_from(r.text(i, 0));
        if (!kind) continue;  // never written so
        DurationRecord d;
        d.kind = *kind;
        d.service = r.text(i, 1);
        d.at = TimePoint(Duration(r.integer(i, 2)));
        d.key = r.text(i, 3);
        d.model = r.text(i, 4);
        d.workflow = r.text(i, 5);
        d.outcome = prompt_outcome_from(r.text(i, 6));
        d.status = static_cast<int>(r.integer(i, 7));
        d.wait_s = real_at(r, i, 8);
        d.first_byte_s = real_at(r, i, 9);
        d.seconds = real_at(r, i, 10).value_or(0);
        d.tokens_per_s = real_at(r, i, 11);
        d.cached_nodes = static_cast<int>(r.integer(i, 12));
        d.version = r.text(i, 13);
        d.args_fp = r.text(i, 14);
        if (!r.null(i, 15)) d.gpu = static_cast<unsigned>(r.integer(i, 15));
        out.push_back(std::move(d));
      }
      return out;
    });
  }

  Status save_variant(const ServiceVariant& v) override {
    return guarded(fmt::format("cannot store a variant of {}", v.service), [&]() -> Status {
      c_->exec(
          "INSERT INTO service_variants (host, service, version, args_fp, args_json,"
          " first_seen_ms, last_seen_ms) VALUES ($1, $2, $3, $4, $5, $6, $7)"
          " ON CONFLICT (host, service, version, args_fp) DO UPDATE SET last_seen_ms ="
          " GREATEST(service_variants.last_seen_ms, EXCLUDED.last_seen_ms)",
          {host_, v.service, v.version, v.args_fp,
           nlohmann::json(v.args).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace),
           ms_of(v.first_seen), ms_of(std::max(v.last_seen, v.first_seen))});
      return Ok{};
    });
  }

  Result<std::vector<ServiceVariant>> variants(const std::string& service) const override {
    return guarded("cannot read service variants", [&]() -> Result<std::vector<ServiceVariant>> {
      PgResult r = c_->exec(
          "SELECT service, version, args_fp, args_json, first_seen_ms, last_seen_ms"
          " FROM service_variants"
          " WHERE host = $1 AND ($2 = '' OR service = $2)"
          " ORDER BY first_seen_ms, service, version, args_fp",
          {host_, service});
      std::vector<ServiceVariant> out;
      for (int i = 0; i < r.rows(); ++i) {
        auto args = nlohmann::json::parse(r.text(i, 3), nullptr, false);
        if (!args.is_array()) continue;  // never written so
        ServiceVariant v;
        v.service = r.text(i, 0);
        v.version = r.text(i, 1);
        v.args_fp = r.text(i, 2);
        for (const auto& a : args)
          if (a.is_string()) v.args.push_back(a.get<std::string>());
        v.first_seen = TimePoint(Duration(r.integer(i, 4)));
        v.last_seen = TimePoint(Duration(r.integer(i, 5)));
        out.push_back(std::move(v));
      }
      return out;
    });
  }

  Result<int64_t> prune(TimePoint before) override {
    return guarded("cannot prune durations", [&]() -> Result<int64_t> {
      PgResult r = c_->exec(
          "WITH gone AS (DELETE FROM durations WHERE host = $1 AND at_ms < $2 RETURNING 1)"
          " SELECT COUNT(*) FROM gone",
          {host_, ms_of(before)});
      return r.integer(0, 0);
    });
  }

 private:
  std::shared_ptr<PgConnection> c_;
  std::string host_;
};

}  // namespace

Result<Stores> open_postgres_stores(const std::string& url, const std::string& host,
                                    int64_t events_retention) {
  auto conn = std::make_shared<PgConnection>(url);
  try {
    migrate(*conn);
  } catch (const std::exception& e) {
    return make_error(fmt::format("cannot open the store at {}: {}", redact_url(url), e.what()));
  }
  Stores out;
  out.events = std::make_shared<PgEventStore>(conn, host, events_retention);
  out.leases = std::make_shared<PgLeaseStore>(conn, host);
  out.crashes = std::make_shared<PgCrashStore>(conn, host);
  out.peaks = std::make_shared<PgPeakStore>(conn, host);
  out.durations = std::make_shared<PgDurationStore>(conn, host);
  out.hosts = std::make_shared<HostStore>(conn, host);
  return out;
}

}  // namespace vramd
