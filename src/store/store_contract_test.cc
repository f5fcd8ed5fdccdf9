// The store's contract, run against both backends: SQLite (a file in a temporary state dir) and
// PostgreSQL (a fresh database on the test binary's private server, integration/postgres_server.h).
#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

#include <SQLiteCpp/SQLiteCpp.h>
#include <fmt/format.h>

#include "integration/postgres_server.h"
#include "integration/test_util.h"
#include "store/postgres_store.h"
#include "store/stores.h"

namespace vramd {
namespace {

using testing::PostgresServer;

// One backend: opens (and reopens) the stores over the same data.
class Backend {
 public:
  explicit Backend(std::string kind) : kind_(std::move(kind)) {
    if (kind_ == "postgresql") {
      pg_ = PostgresServer::get();
      if (pg_) db_ = pg_->create_database("contract");
    }
  }
  bool available() const { return kind_ == "sqlite" || pg_; }
  Result<Stores> open(int64_t retention = 100, const std::string& host = "gpu1") const {
    if (kind_ == "sqlite") return open_stores(dir_.path(), retention);
    return open_postgres_stores(pg_->url(db_), host, retention);
  }
  // Makes the stored schema claim a version newer than this binary knows.
  void bump_schema_version() const {
    if (kind_ == "sqlite") {
      SQLite::Database db(dir_.file("vramd.db"), SQLite::OPEN_READWRITE);
      db.exec("PRAGMA user_version = 99");
    } else {
      pg_->psql(db_, "INSERT INTO vramd_schema (version) VALUES (99)");
    }
  }
  // Makes every write of a job record fail (a full disk, as the lease store sees it).
  void refuse_job_writes() const {
    if (kind_ == "sqlite") {
      SQLite::Database db(dir_.file("vramd.db"), SQLite::OPEN_READWRITE);
      db.exec("CREATE TRIGGER refuse_jobs BEFORE INSERT ON jobs BEGIN SELECT RAISE(ABORT, 'disk full'); END");
    } else {
      pg_->psql(db_,
                "CREATE FUNCTION refuse() RETURNS trigger AS $$ BEGIN RAISE EXCEPTION 'disk full'; "
                "END $$ LANGUAGE plpgsql; CREATE TRIGGER refuse_jobs BEFORE INSERT ON jobs "
                "FOR EACH ROW EXECUTE FUNCTION refuse()");
    }
  }
  PostgresServer* pg() const { return pg_; }
  const std::string& db() const { return db_; }

 private:
  std::string kind_;
  testing::TempDir dir_;
  PostgresServer* pg_ = nullptr;
  std::string db_;
};

class StoreContract : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    backend_ = std::make_unique<Backend>(GetParam());
    if (!backend_->available()) GTEST_SKIP() << PostgresServer::skip_reason();
  }
  Stores open(int64_t retention = 100) {
    auto s = backend_->open(retention);
    EXPECT_TRUE(s.ok()) << s.error();
    return s.ok() ? std::move(*s) : Stores{};
  }
  std::unique_ptr<Backend> backend_;
};

EventRecord ev(int64_t ms, std::string type, std::string message) {
  return {TimePoint(Duration(ms)), std::move(type), 0u, "comfyui", std::move(message)};
}

Lease lease(uint64_t id, LeaseState state, const Now& now) {
  Lease l;
  l.id = id;
  l.seq = id;
  l.state = state;
  l.requested_at = now.mono - std::chrono::seconds(10);
  l.request.vram = 8 * GiB;
  l.request.label = id % 2 ? "train" : "infer";
  l.request.holder = "python";
  l.request.command = "python train.py";
  l.request.priority = static_cast<int>(id);
  l.request.wait_timeout = std::chrono::minutes(5);
  if (state == LeaseState::granted) {
    l.gpu = 0;
    l.granted_at = now.mono - std::chrono::seconds(4);
  }
  return l;
}

TEST_P(StoreContract, EventsAppendAndListInOrderWithData) {
  Stores s = open();
  ASSERT_TRUE(s.events);
  auto id1 = s.events->append(ev(1000, "unload.freed", "16.3 GiB → 370 MiB"),
                              {{"outcome", "freed"}, {"before_bytes", 17502000000}}, 0);
  auto id2 = s.events->append(ev(2000, "gpu.lost", "GPU 0 lost"), nullptr, 0);
  ASSERT_TRUE(id1.ok() && id2.ok()) << (id1.ok() ? id2.error() : id1.error());
  EXPECT_LT(*id1, *id2);
  EXPECT_EQ(*s.events->max_id(), *id2);
  auto all = s.events->list(0, std::nullopt, 10);
  ASSERT_TRUE(all.ok()) << all.error();
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[0].event.type, "unload.freed");
  EXPECT_EQ((*all)[0].event.message, "16.3 GiB → 370 MiB");
  EXPECT_EQ((*all)[0].data["before_bytes"], 17502000000);
  EXPECT_EQ((*all)[0].event.gpu, 0u);
  EXPECT_EQ((*all)[0].event.at, TimePoint(Duration(1000)));
  EXPECT_TRUE((*all)[1].data.is_null());
  EXPECT_EQ(s.events->list(*id1, std::nullopt, 10)->size(), 1u);
  auto since = s.events->list(0, TimePoint(Duration(1500)), 10);
  ASSERT_EQ(since->size(), 1u);
  EXPECT_EQ((*since)[0].event.type, "gpu.lost");
  // The daemon numbers its own events (its stream and the store agree on ids).
  auto id9 = s.events->append(ev(3000, "t", "nine"), nullptr, 9);
  ASSERT_TRUE(id9.ok()) << id9.error();
  EXPECT_EQ(*id9, 9);
  EXPECT_EQ(*s.events->max_id(), 9);
}

TEST_P(StoreContract, EventsSurviveReopenAndKeepOnlyTheRetention) {
  {
    Stores s = open(50);
    ASSERT_TRUE(s.events);
    for (int i = 0; i < 300; ++i)
      ASSERT_TRUE(s.events->append(ev(i, "t", std::to_string(i)), nullptr, 0).ok());
  }
  Stores s = open(50);
  ASSERT_TRUE(s.events);
  EXPECT_EQ(*s.events->count(), 50);
  auto all = s.events->list(0, std::nullopt, 1000);
  ASSERT_EQ(all->size(), 50u);
  EXPECT_EQ(all->front().event.message, "250");
  EXPECT_EQ(all->back().event.message, "299");
}

// A lease's change and the events telling it are one write: both land, or neither (so a kill
// between two writes cannot leave an end told and not done, to be done and told again).
TEST_P(StoreContract, ALeaseChangeAndItsEventsAreOneWrite) {
  Now now(MonoTime(std::chrono::hours(5)), TimePoint(std::chrono::hours(400000)));
  Stores s = open();
  ASSERT_TRUE(s.leases && s.events);
  Lease one = lease(1, LeaseState::granted, now);
  ASSERT_TRUE(s.leases->save(one, now, {{5, ev(1000, "lease.granted", "lease #1 granted"), nullptr}}).ok());
  one.state = LeaseState::released;
  one.ended_at = now.mono;
  StoredEvent released{6, ev(2000, "lease.released", "lease #1 released"), {{"k", 1}}};
  ASSERT_TRUE(s.leases->save(one, now, {released}).ok());
  // Written again (a retry after a failed write, or a second try of the same): not twice.
  ASSERT_TRUE(s.leases->save(one, now, {released}).ok());
  auto events = s.events->list(0, std::nullopt, 10);
  ASSERT_TRUE(events.ok()) << events.error();
  ASSERT_EQ(events->size(), 2u);
  EXPECT_EQ((*events)[0].id, 5);
  EXPECT_EQ((*events)[1].id, 6);
  EXPECT_EQ((*events)[1].event.type, "lease.released");
  EXPECT_EQ((*events)[1].data["k"], 1);
  EXPECT_TRUE(s.leases->job(1)->has_value());
  EXPECT_EQ(*s.events->max_id(), 6);

  // The job record cannot be written: the lease stays active and its event is not written.
  backend_->refuse_job_writes();
  Lease two = lease(2, LeaseState::granted, now);
  ASSERT_TRUE(s.leases->save(two, now).ok());
  two.state = LeaseState::expired;
  two.ended_at = now.mono;
  Status refused = s.leases->save(two, now, {{7, ev(3000, "lease.expired", "lease #2 expired"), nullptr}});
  EXPECT_FALSE(refused.ok());
  EXPECT_EQ(s.events->list(6, std::nullopt, 10)->size(), 0u);
  auto active = s.leases->active(now);
  ASSERT_TRUE(active.ok()) << active.error();
  ASSERT_EQ(active->size(), 1u);
  EXPECT_EQ((*active)[0].id, 2u);
  EXPECT_EQ((*active)[0].state, LeaseState::granted);
}

TEST_P(StoreContract, ActiveLeasesSurviveReopenAndAnEndedOneBecomesAJob) {
  Now now(MonoTime(std::chrono::hours(5)), TimePoint(std::chrono::hours(400000)));
  {
    Stores s = open();
    ASSERT_TRUE(s.leases);
    EXPECT_EQ(*s.leases->max_id(), 0u);
    ASSERT_TRUE(s.leases->save(lease(1, LeaseState::queued, now), now).ok());
    ASSERT_TRUE(s.leases->save(lease(2, LeaseState::granted, now), now).ok());
    Lease three = lease(3, LeaseState::queued, now);
    ASSERT_TRUE(s.leases->save(three, now).ok());
    three.state = LeaseState::granted;  // written again: one row, the newest state
    three.gpu = 0;
    three.granted_at = now.mono - std::chrono::seconds(1);
    ASSERT_TRUE(s.leases->save(three, now).ok());
  }
  // Reopened an hour later (by both clocks): times come back as the same wall times.
  Now later = now + std::chrono::hours(1);
  Stores s = open();
  auto active = s.leases->active(later);
  ASSERT_TRUE(active.ok()) << active.error();
  ASSERT_EQ(active->size(), 3u);
  EXPECT_EQ((*active)[0].id, 1u);
  EXPECT_EQ((*active)[0].state, LeaseState::queued);
  EXPECT_EQ((*active)[0].request.vram, 8 * GiB);
  EXPECT_EQ((*active)[0].request.wait_timeout, std::chrono::minutes(5));
  EXPECT_EQ((*active)[0].requested_at, now.mono - std::chrono::seconds(10));
  EXPECT_EQ((*active)[1].state, LeaseState::granted);
  EXPECT_EQ((*active)[1].gpu, 0u);
  EXPECT_EQ((*active)[2].state, LeaseState::granted);
  EXPECT_EQ(*s.leases->max_id(), 3u);

  Lease ended = (*active)[1];
  ended.state = LeaseState::released;
  ended.ended_at = now.mono;
  ended.exit_status = 3;
  ended.peak_vram = 7 * GiB;
  ended.end_reason = "released";
  ASSERT_TRUE(s.leases->save(ended, later).ok());
  EXPECT_EQ(s.leases->active(later)->size(), 2u);
  EXPECT_EQ(*s.leases->max_id(), 3u);  // an ended lease's id is still taken
  auto job = s.leases->job(2);
  ASSERT_TRUE(job.ok()) << job.error();
  ASSERT_TRUE(job->has_value());
  EXPECT_EQ((*job)->label, "infer");
  EXPECT_EQ((*job)->command, "python train.py");
  EXPECT_EQ((*job)->state, LeaseState::released);
  EXPECT_EQ((*job)->gpu, 0u);
  EXPECT_EQ((*job)->wait, std::chrono::seconds(6));
  EXPECT_EQ((*job)->run, std::chrono::seconds(4));
  EXPECT_EQ((*job)->peak_vram, 7 * GiB);
  EXPECT_EQ((*job)->exit_status, 3);
  EXPECT_EQ((*job)->end_reason, "released");
  EXPECT_FALSE(s.leases->job(99)->has_value());

  Lease cancelled = (*active)[0];  // never granted: its wait runs to the end, no run
  cancelled.state = LeaseState::cancelled;
  cancelled.ended_at = now.mono;
  ASSERT_TRUE(s.leases->save(cancelled, later).ok());
  auto jobs = s.leases->jobs("", 10);
  ASSERT_EQ(jobs->size(), 2u);
  EXPECT_EQ((*jobs)[0].id, 2u);  // newest first
  EXPECT_EQ((*jobs)[1].id, 1u);
  EXPECT_FALSE((*jobs)[1].run.has_value());
  EXPECT_EQ((*jobs)[1].wait, std::chrono::seconds(10));
  ASSERT_EQ(s.leases->jobs("train", 10)->size(), 1u);
  EXPECT_EQ(s.leases->jobs("train", 10)->front().id, 1u);
  EXPECT_EQ(s.leases->jobs("", 1)->size(), 1u);
}

// A suspended preemptible lease (issue 28) comes back suspended, with its processes, its bytes,
// for whom and since when: a restarted vramd resumes it when its room is back.
TEST_P(StoreContract, ASuspendedLeaseSurvivesReopenWithItsSuspension) {
  Now now(MonoTime(std::chrono::hours(5)), TimePoint(std::chrono::hours(400000)));
  {
    Stores s = open();
    ASSERT_TRUE(s.leases);
    Lease l = lease(7, LeaseState::suspended, now);
    l.gpu = 0;
    l.granted_at = now.mono - std::chrono::seconds(30);
    l.request.preemptible = true;
    LeaseSuspension susp;
    susp.step = LeaseSuspension::Step::suspended;
    susp.pids = {4242, 4243};
    susp.bytes = 16 * GiB;
    susp.for_whom = "ollama's request";
    susp.at = now.mono - std::chrono::seconds(20);
    l.suspension = susp;
    ASSERT_TRUE(s.leases->save(l, now).ok());
    Lease refused = lease(8, LeaseState::granted, now);
    refused.request.preemptible = true;
    refused.suspend_refused = "pid 9: Could not checkpoint on process ID 9";
    ASSERT_TRUE(s.leases->save(refused, now).ok());
  }
  Now later = now + std::chrono::hours(1);
  Stores s = open();
  auto active = s.leases->active(later);
  ASSERT_TRUE(active.ok()) << active.error();
  ASSERT_EQ(active->size(), 2u);
  const Lease& back = (*active)[0];
  EXPECT_EQ(back.state, LeaseState::suspended);
  EXPECT_TRUE(back.request.preemptible);
  ASSERT_TRUE(back.suspension);
  EXPECT_EQ(back.suspension->step, LeaseSuspension::Step::suspended);
  EXPECT_EQ(back.suspension->pids, (std::vector<int>{4242, 4243}));
  EXPECT_EQ(back.suspension->bytes, 16 * GiB);
  EXPECT_EQ(back.suspension->for_whom, "ollama's request");
  EXPECT_EQ(back.suspension->at, now.mono - std::chrono::seconds(20));
  EXPECT_FALSE((*active)[1].suspension);
  EXPECT_EQ((*active)[1].suspend_refused, "pid 9: Could not checkpoint on process ID 9");
}

TEST_P(StoreContract, CrashesNewestFirstPerService) {
  Stores s = open();
  ASSERT_TRUE(s.crashes);
  CrashRecord a;
  a.service = "comfyui";
  a.at = TimePoint(Duration(5000));
  a.pid = 42;
  a.exit_code = 1;
  a.title = "CUDA out of memory";
  a.log_tail = {"line 1", "torch.OutOfMemoryError"};
  a.gpu_holders = {{"ollama", 12 * GiB}};
  CrashRecord b = a;
  b.service = "ollama";
  b.signal = 9;
  b.exit_code.reset();
  auto ida = s.crashes->add(a);
  auto idb = s.crashes->add(b);
  ASSERT_TRUE(ida.ok() && idb.ok());
  EXPECT_LT(*ida, *idb);
  auto all = s.crashes->list("", 10);
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[0].service, "ollama");
  EXPECT_EQ((*all)[0].signal, 9);
  EXPECT_FALSE((*all)[0].exit_code.has_value());
  auto mine = s.crashes->list("comfyui", 10);
  ASSERT_EQ(mine->size(), 1u);
  EXPECT_EQ((*mine)[0].pid, 42);
  EXPECT_EQ((*mine)[0].at, TimePoint(Duration(5000)));
  EXPECT_EQ((*mine)[0].log_tail.back(), "torch.OutOfMemoryError");
  ASSERT_EQ((*mine)[0].gpu_holders.size(), 1u);
  EXPECT_EQ((*mine)[0].gpu_holders[0].second, 12 * GiB);
}

TEST_P(StoreContract, LoadPeaksKeepTheLargerAndSurviveReopen) {
  {
    Stores s = open();
    ASSERT_TRUE(s.peaks);
    ASSERT_TRUE(s.peaks->save({"ollama", "llama3:8b", 6 * GiB}, TimePoint(Duration(1))).ok());
    ASSERT_TRUE(s.peaks->save({"ollama", "llama3:8b", 5 * GiB}, TimePoint(Duration(2))).ok());
    ASSERT_TRUE(s.peaks->save({"comfyui", "", 9 * GiB}, TimePoint(Duration(3))).ok());
  }
  Stores s = open();
  auto all = s.peaks->all();
  ASSERT_TRUE(all.ok()) << all.error();
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[0].service, "comfyui");
  EXPECT_EQ((*all)[1].model, "llama3:8b");
  EXPECT_EQ((*all)[1].bytes, 6 * GiB);
}

TEST_P(StoreContract, WakeTimesKeepTheLatestAndSurviveReopen) {
  {
    Stores s = open();
    ASSERT_TRUE(s.peaks);
    using std::chrono::milliseconds;
    ASSERT_TRUE(s.peaks->save_wake({"vllm", "qwen", SleepDepth::sleep1, milliseconds(900)},
                                   TimePoint(Duration(1))).ok());
    ASSERT_TRUE(s.peaks->save_wake({"vllm", "qwen", SleepDepth::sleep1, milliseconds(1300)},
                                   TimePoint(Duration(2))).ok());
    ASSERT_TRUE(s.peaks->save_wake({"vllm", "qwen", SleepDepth::sleep2, milliseconds(8000)},
                                   TimePoint(Duration(3))).ok());
  }
  Stores s = open();
  auto all = s.peaks->wake_times();
  ASSERT_TRUE(all.ok()) << all.error();
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[0].depth, SleepDepth::sleep1);
  EXPECT_EQ((*all)[0].took, std::chrono::milliseconds(1300));
  EXPECT_EQ((*all)[1].depth, SleepDepth::sleep2);
  EXPECT_EQ((*all)[1].took, std::chrono::milliseconds(8000));
}

TEST_P(StoreContract, DemandKeepsTheLatestPerServiceAndSurvivesReopen) {
  DemandHistory a;
  a.service = "vllm";
  a.since = TimePoint(std::chrono::hours(400000));
  a.counts[9] = 3;
  a.counts[167] = 70000;
  {
    Stores s = open();
    ASSERT_TRUE(s.peaks);
    ASSERT_TRUE(s.peaks->save_demand(a).ok());
    a.counts[9] = 4;
    ASSERT_TRUE(s.peaks->save_demand(a).ok());
    DemandHistory b;
    b.service = "comfyui";
    b.since = TimePoint(std::chrono::hours(400001));
    ASSERT_TRUE(s.peaks->save_demand(b).ok());
  }
  Stores s = open();
  auto all = s.peaks->demand();
  ASSERT_TRUE(all.ok()) << all.error();
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[0].service, "comfyui");
  EXPECT_EQ((*all)[1].service, "vllm");
  EXPECT_EQ((*all)[1].since, a.since);
  EXPECT_EQ((*all)[1].counts, a.counts);
  EXPECT_EQ((*all)[1].counts[9], 4u);
}

DurationRecord prompt_record(std::string service, int64_t ms, std::string key, double seconds) {
  DurationRecord r;
  r.kind = RecordKind::prompt;
  r.service = std::move(service);
  r.at = TimePoint(Duration(ms));
  r.key = std::move(key);
  r.model = "flux1-dev.safetensors";
  r.workflow = "3f9a0c1d2e4b";
  r.outcome = PromptOutcome::success;
  r.seconds = seconds;
  return r;
}

DurationRecord request_record(std::string service, int64_t ms, std::string model, double seconds) {
  DurationRecord r;
  r.kind = RecordKind::request;
  r.service = std::move(service);
  r.at = TimePoint(Duration(ms));
  r.model = std::move(model);
  r.status = 200;
  r.seconds = seconds;
  return r;
}

void expect_same(const DurationRecord& got, const DurationRecord& want) {
  EXPECT_EQ(got.kind, want.kind);
  EXPECT_EQ(got.service, want.service);
  EXPECT_EQ(got.at, want.at);
  EXPECT_EQ(got.key, want.key);
  EXPECT_EQ(got.model, want.model);
  EXPECT_EQ(got.workflow, want.workflow);
  EXPECT_EQ(got.outcome, want.outcome);
  EXPECT_EQ(got.status, want.status);
  EXPECT_EQ(got.wait_s, want.wait_s);
  EXPECT_EQ(got.first_byte_s, want.first_byte_s);
  EXPECT_EQ(got.seconds, want.seconds);  // exactly: a double goes and comes back the same
  EXPECT_EQ(got.tokens_per_s, want.tokens_per_s);
  EXPECT_EQ(got.cached_nodes, want.cached_nodes);
  EXPECT_EQ(got.version, want.version);
  EXPECT_EQ(got.args_fp, want.args_fp);
  EXPECT_EQ(got.gpu, want.gpu);
}

std::vector<std::string> keys_of(const Result<std::vector<DurationRecord>>& r) {
  std::vector<std::string> out;
  if (!r.ok()) return {"error: " + r.error()};
  for (const auto& d : *r) out.push_back(d.key.empty() ? d.model : d.key);
  return out;
}

TEST_P(StoreContract, DurationsListNewestFirstWithEveryField) {
  Stores s = open();
  ASSERT_TRUE(s.durations);
  DurationRecord full = prompt_record("comfyui", 2000, "9b1e-prompt", 12.345678901234567);
  full.outcome = PromptOutcome::error;
  full.status = 0;
  full.wait_s = 0.1;
  full.first_byte_s = 1e-9;
  full.tokens_per_s = 73.25;
  full.cached_nodes = 7;
  full.version = "0.3.41";
  full.args_fp = "a1b2c3d4e5f6";
  full.gpu = 1;
  DurationRecord bare = request_record("vllm", 3000, "qwen3-8b", 0.30000000000000004);
  bare.status = 503;
  DurationRecord gpu0 = request_record("vllm", 3000, "qwen3-8b", 2.5);
  gpu0.gpu = 0;  // GPU 0 is a GPU, not none
  gpu0.wait_s = 0;
  ASSERT_TRUE(s.durations->add({full, bare}).ok());
  ASSERT_TRUE(s.durations->add({gpu0}).ok());
  ASSERT_TRUE(s.durations->add({}).ok());
  auto all = s.durations->list(DurationQuery{});
  ASSERT_TRUE(all.ok()) << all.error();
  ASSERT_EQ(all->size(), 3u);
  // Newest first; of one time, the one added last first.
  expect_same((*all)[0], gpu0);
  expect_same((*all)[1], bare);
  expect_same((*all)[2], full);
  EXPECT_FALSE((*all)[1].gpu.has_value());
  EXPECT_FALSE((*all)[1].wait_s.has_value());
  EXPECT_EQ((*all)[0].gpu, 0u);
  EXPECT_EQ((*all)[0].wait_s, 0.0);
}

TEST_P(StoreContract, APromptIsStoredOnceAndEveryRequestIsKept) {
  Stores s = open();
  ASSERT_TRUE(s.durations);
  DurationRecord p = prompt_record("comfyui", 1000, "p1", 10);
  DurationRecord again = prompt_record("comfyui", 5000, "p1", 99);  // read twice: the first stays
  DurationRecord r = request_record("comfyui", 2000, "", 1);
  ASSERT_TRUE(s.durations->add({p, again, r, r}).ok());
  auto one = s.durations->list(DurationQuery{});
  ASSERT_TRUE(one.ok()) << one.error();
  ASSERT_EQ(one->size(), 3u);
  EXPECT_EQ(one->back().key, "p1");
  EXPECT_EQ(one->back().seconds, 10);
  EXPECT_EQ(one->back().at, TimePoint(Duration(1000)));
  // A second batch: the prompt again (not stored), a request again (stored), the same prompt id
  // on another service (another prompt).
  ASSERT_TRUE(s.durations->add({again, r, prompt_record("comfyui-2", 3000, "p1", 4)}).ok());
  auto two = s.durations->list(DurationQuery{});
  ASSERT_TRUE(two.ok()) << two.error();
  ASSERT_EQ(two->size(), 5u);
  size_t p1 = 0, requests = 0;
  for (const auto& d : *two) {
    if (d.key == "p1" && d.service == "comfyui") {
      ++p1;
      EXPECT_EQ(d.seconds, 10);
    }
    if (d.kind == RecordKind::request) ++requests;
  }
  EXPECT_EQ(p1, 1u);
  EXPECT_EQ(requests, 3u);
}

// A second's worth of a busy front door in one call: more rows than one INSERT carries (the
// SQLite store writes 64 a statement), every one with its own values, a prompt read twice within
// the batch kept once, a record without a finite time left out.
TEST_P(StoreContract, ABatchOfManyRecordsIsStoredWhole) {
  Stores s = open();
  ASSERT_TRUE(s.durations);
  std::vector<DurationRecord> batch;
  for (int i = 0; i < 150; ++i) {
    DurationRecord r = request_record(i % 2 ? "vllm" : "ollama", 10000 + i, fmt::format("m{}", i),
                                      0.5 + i);
    r.status = 200 + i;
    r.gpu = i % 3 == 0 ? std::optional<unsigned>() : std::optional<unsigned>(i % 3);
    batch.push_back(r);
    if (i == 70) batch.push_back(prompt_record("comfyui", 20000, "twice", 3));
    if (i == 140) batch.push_back(prompt_record("comfyui", 21000, "twice", 4));
  }
  DurationRecord no_time = request_record("vllm", 30000, "nan", 1);
  no_time.seconds = std::nan("");
  batch.insert(batch.begin() + 64, no_time);  // shifts the rest across the statements' edges
  ASSERT_TRUE(s.durations->add(batch).ok());
  DurationQuery q;
  q.limit = 1000;
  auto all = s.durations->list(q);
  ASSERT_TRUE(all.ok()) << all.error();
  ASSERT_EQ(all->size(), 151u);  // 150 requests and the prompt once
  std::map<std::string, const DurationRecord*> by_model;
  for (const auto& d : *all) by_model[d.kind == RecordKind::prompt ? d.key : d.model] = &d;
  ASSERT_EQ(by_model.size(), 151u);
  EXPECT_EQ(by_model["twice"]->seconds, 3);  // the first read
  EXPECT_EQ(by_model.count("nan"), 0u);
  for (int i = 0; i < 150; ++i) {
    const DurationRecord* d = by_model[fmt::format("m{}", i)];
    ASSERT_NE(d, nullptr) << i;
    EXPECT_EQ(d->service, i % 2 ? "vllm" : "ollama") << i;
    EXPECT_EQ(d->at, TimePoint(Duration(10000 + i))) << i;
    EXPECT_EQ(d->seconds, 0.5 + i) << i;
    EXPECT_EQ(d->status, 200 + i) << i;
    EXPECT_EQ(d->gpu, i % 3 == 0 ? std::optional<unsigned>() : std::optional<unsigned>(i % 3)) << i;
  }
}

TEST_P(StoreContract, DurationsAreFilteredByServiceKindWorkflowModelSinceAndLimit) {
  Stores s = open();
  ASSERT_TRUE(s.durations);
  DurationRecord other_wf = prompt_record("comfyui", 4000, "c4", 3);
  other_wf.workflow = "000000000000";
  other_wf.model = "sdxl.safetensors";
  ASSERT_TRUE(s.durations
                  ->add({prompt_record("comfyui", 1000, "c1", 1), request_record("comfyui", 2000, "api", 1),
                         prompt_record("comfyui", 3000, "c3", 2), other_wf,
                         request_record("vllm", 5000, "qwen3-8b", 1),
                         request_record("vllm", 6000, "llama-3-8b", 1)})
                  .ok());
  DurationQuery q;
  EXPECT_EQ(keys_of(s.durations->list(q)),
            (std::vector<std::string>{"llama-3-8b", "qwen3-8b", "c4", "c3", "api", "c1"}));
  q.service = "comfyui";
  EXPECT_EQ(keys_of(s.durations->list(q)), (std::vector<std::string>{"c4", "c3", "api", "c1"}));
  q.kind = RecordKind::prompt;
  EXPECT_EQ(keys_of(s.durations->list(q)), (std::vector<std::string>{"c4", "c3", "c1"}));
  q.workflow = "3f9a0c1d2e4b";
  EXPECT_EQ(keys_of(s.durations->list(q)), (std::vector<std::string>{"c3", "c1"}));
  q.since = TimePoint(Duration(3000));  // at >= since
  EXPECT_EQ(keys_of(s.durations->list(q)), (std::vector<std::string>{"c3"}));
  DurationQuery m;
  m.model = "sdxl.safetensors";
  EXPECT_EQ(keys_of(s.durations->list(m)), (std::vector<std::string>{"c4"}));
  m.model = "qwen3-8b";
  m.kind = RecordKind::request;
  EXPECT_EQ(keys_of(s.durations->list(m)), (std::vector<std::string>{"qwen3-8b"}));
  DurationQuery k;
  k.kind = RecordKind::request;
  k.limit = 2;
  EXPECT_EQ(keys_of(s.durations->list(k)), (std::vector<std::string>{"llama-3-8b", "qwen3-8b"}));
  k.service = "nobody";
  EXPECT_EQ(keys_of(s.durations->list(k)), (std::vector<std::string>{}));
}

TEST_P(StoreContract, DurationsSurviveReopenAndPruneDropsTheOld) {
  {
    Stores s = open();
    ASSERT_TRUE(s.durations);
    std::vector<DurationRecord> batch;
    for (int i = 1; i <= 5; ++i)
      batch.push_back(prompt_record("comfyui", i * 1000, fmt::format("p{}", i), i));
    ASSERT_TRUE(s.durations->add(batch).ok());
    ASSERT_TRUE(s.durations->save_variant({"comfyui", "0.3.41", "", {}, TimePoint(Duration(1))}).ok());
  }
  Stores s = open();
  ASSERT_TRUE(s.durations);
  EXPECT_EQ(keys_of(s.durations->list(DurationQuery{})),
            (std::vector<std::string>{"p5", "p4", "p3", "p2", "p1"}));
  auto pruned = s.durations->prune(TimePoint(Duration(3000)));  // at < before
  ASSERT_TRUE(pruned.ok()) << pruned.error();
  EXPECT_EQ(*pruned, 2);
  EXPECT_EQ(keys_of(s.durations->list(DurationQuery{})), (std::vector<std::string>{"p5", "p4", "p3"}));
  EXPECT_EQ(*s.durations->prune(TimePoint(Duration(3000))), 0);
  EXPECT_EQ(s.durations->variants("")->size(), 1u);  // variants are kept
  // A pruned prompt read again is stored again (its key is free): harmless, it is past retention.
  ASSERT_TRUE(s.durations->add({prompt_record("comfyui", 1000, "p1", 1)}).ok());
  EXPECT_EQ(s.durations->list(DurationQuery{})->size(), 4u);
}

TEST_P(StoreContract, VariantsKeepTheFirstSeenAndTheLatestAndListOldestFirst) {
  auto at = [](int64_t ms) { return TimePoint(Duration(ms)); };
  {
    Stores s = open();
    ASSERT_TRUE(s.durations);
    ASSERT_TRUE(s.durations->save_variant({"comfyui", "0.3.41", "aaaaaaaaaaaa",
                                           {"--listen", "--port", "8188", "HF_HOME=/m"}, at(2000)})
                    .ok());
    // Seen again later (or with other words for the same fingerprint): the first stays.
    ASSERT_TRUE(s.durations->save_variant({"comfyui", "0.3.41", "aaaaaaaaaaaa", {"--other"}, at(9000)})
                    .ok());
    ASSERT_TRUE(s.durations
                    ->save_variant({"comfyui", "0.3.41", "bbbbbbbbbbbb",
                                    {"--listen", "--disable-async-offload"}, at(3000)})
                    .ok());
    ASSERT_TRUE(s.durations->save_variant({"comfyui", "0.3.40", "aaaaaaaaaaaa", {}, at(1000)}).ok());
    ASSERT_TRUE(s.durations->save_variant({"vllm", "", "", {}, at(1500)}).ok());
  }
  Stores s = open();
  ASSERT_TRUE(s.durations);
  auto comfy = s.durations->variants("comfyui");
  ASSERT_TRUE(comfy.ok()) << comfy.error();
  ASSERT_EQ(comfy->size(), 3u);
  EXPECT_EQ((*comfy)[0].version, "0.3.40");
  EXPECT_EQ((*comfy)[0].first_seen, at(1000));
  EXPECT_TRUE((*comfy)[0].args.empty());
  EXPECT_EQ((*comfy)[1].version, "0.3.41");
  EXPECT_EQ((*comfy)[1].args_fp, "aaaaaaaaaaaa");
  EXPECT_EQ((*comfy)[1].first_seen, at(2000));
  // The latest change back to it is kept: the service's current variant after a restart.
  EXPECT_EQ((*comfy)[1].last_seen, at(9000));
  EXPECT_EQ((*comfy)[0].last_seen, at(1000));
  EXPECT_EQ((*comfy)[1].args, (std::vector<std::string>{"--listen", "--port", "8188", "HF_HOME=/m"}));
  EXPECT_EQ((*comfy)[1].service, "comfyui");
  EXPECT_EQ((*comfy)[2].args_fp, "bbbbbbbbbbbb");
  EXPECT_EQ((*comfy)[2].args, (std::vector<std::string>{"--listen", "--disable-async-offload"}));
  auto all = s.durations->variants("");
  ASSERT_TRUE(all.ok()) << all.error();
  ASSERT_EQ(all->size(), 4u);
  EXPECT_EQ((*all)[0].first_seen, at(1000));
  EXPECT_EQ((*all)[1].service, "vllm");
  EXPECT_EQ((*all)[1].first_seen, at(1500));
  EXPECT_EQ((*all)[3].first_seen, at(3000));
  EXPECT_TRUE(s.durations->variants("nobody")->empty());
}

TEST_P(StoreContract, ASchemaNewerThanThisBinaryIsRefusedWithAClearMessage) {
  { ASSERT_TRUE(open().events); }
  backend_->bump_schema_version();
  auto s = backend_->open();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().find("version 99, newer than this vramd knows"), std::string::npos)
      << s.error();
}

INSTANTIATE_TEST_SUITE_P(Backends, StoreContract, ::testing::Values("sqlite", "postgresql"),
                         [](const auto& info) { return info.param; });

// What only the shared PostgreSQL store does.
class PostgresStore : public ::testing::Test {
 protected:
  void SetUp() override {
    pg_ = PostgresServer::get();
    if (!pg_) GTEST_SKIP() << PostgresServer::skip_reason();
    db_ = pg_->create_database("pgstore");
  }
  Stores open(const std::string& host) {
    auto s = open_postgres_stores(pg_->url(db_), host, 100);
    EXPECT_TRUE(s.ok()) << s.error();
    return s.ok() ? std::move(*s) : Stores{};
  }
  PostgresServer* pg_ = nullptr;
  std::string db_;
};

TEST_F(PostgresStore, TwoHostsShareOneDatabaseEachWithItsOwnRows) {
  Now now(MonoTime(std::chrono::hours(5)), TimePoint(std::chrono::hours(400000)));
  Stores a = open("gpu1");
  Stores b = open("gpu2");
  ASSERT_TRUE(a.events && b.events);
  ASSERT_TRUE(a.events->append(ev(1, "t", "from gpu1"), nullptr, 1).ok());
  ASSERT_TRUE(b.events->append(ev(2, "t", "from gpu2"), nullptr, 1).ok());  // same id, other host
  ASSERT_EQ(a.events->list(0, std::nullopt, 10)->size(), 1u);
  EXPECT_EQ(a.events->list(0, std::nullopt, 10)->front().event.message, "from gpu1");
  EXPECT_EQ(b.events->list(0, std::nullopt, 10)->front().event.message, "from gpu2");
  ASSERT_TRUE(a.leases->save(lease(1, LeaseState::queued, now), now).ok());
  EXPECT_EQ(a.leases->active(now)->size(), 1u);
  EXPECT_EQ(b.leases->active(now)->size(), 0u);
  EXPECT_EQ(pg_->psql(db_, "SELECT host || ':' || id FROM leases"), "gpu1:1");
}

TEST_F(PostgresStore, EachHostReadsItsOwnDurationsAndVariants) {
  Stores a = open("gpu1");
  Stores b = open("gpu2");
  ASSERT_TRUE(a.durations && b.durations);
  // One prompt id on two hosts (two ComfyUIs numbering alike): each host keeps its own.
  ASSERT_TRUE(a.durations->add({prompt_record("comfyui", 1000, "p1", 1)}).ok());
  ASSERT_TRUE(b.durations->add({prompt_record("comfyui", 2000, "p1", 2)}).ok());
  ASSERT_TRUE(a.durations->save_variant({"comfyui", "0.3.41", "", {}, TimePoint(Duration(1))}).ok());
  auto mine = a.durations->list(DurationQuery{});
  ASSERT_TRUE(mine.ok()) << mine.error();
  ASSERT_EQ(mine->size(), 1u);
  EXPECT_EQ(mine->front().seconds, 1);
  EXPECT_EQ(b.durations->list(DurationQuery{})->front().seconds, 2);
  EXPECT_EQ(a.durations->variants("")->size(), 1u);
  EXPECT_TRUE(b.durations->variants("")->empty());
  EXPECT_EQ(*b.durations->prune(TimePoint(Duration(5000))), 1);  // its own only
  EXPECT_EQ(a.durations->list(DurationQuery{})->size(), 1u);
}

TEST_F(PostgresStore, HostsHeartbeatAndTheirLastStatusIsReadByAll) {
  Stores a = open("gpu1");
  Stores b = open("gpu2");
  ASSERT_TRUE(a.hosts && b.hosts);
  ASSERT_TRUE(a.hosts->beat(R"({"host":"gpu1"})").ok());
  ASSERT_TRUE(b.hosts->beat(R"({"host":"gpu2"})").ok());
  ASSERT_TRUE(b.hosts->beat("").ok());  // a heartbeat alone keeps the last status
  auto all = a.hosts->all();
  ASSERT_TRUE(all.ok()) << all.error();
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[0].host, "gpu1");
  EXPECT_EQ((*all)[1].status, R"({"host":"gpu2"})");
  EXPECT_GE((*all)[1].age.count(), 0);
}

TEST_F(PostgresStore, AnOlderSchemaIsMigratedAtOpen) {
  { ASSERT_TRUE(open("gpu1").hosts); }
  // A database as version 1 left it: no hosts table, no shared queue.
  pg_->psql(db_,
            "DROP TABLE hosts; DROP TABLE lease_reasons; DROP TABLE host_slots;"
            " DROP INDEX leases_by_id; DROP INDEX jobs_by_id; DROP SEQUENCE lease_qseq;"
            " ALTER TABLE leases DROP COLUMN cluster, DROP COLUMN want_host, DROP COLUMN priority,"
            " DROP COLUMN qseq, DROP COLUMN release, DROP COLUMN evict_host, DROP COLUMN heard;"
            " DROP TABLE wake_times; DROP TABLE demand; DROP SEQUENCE lease_tokens;"
            " DROP TABLE durations; DROP TABLE service_variants;"
            " DELETE FROM vramd_schema WHERE version >= 2");
  Stores s = open("gpu1");
  ASSERT_TRUE(s.hosts);
  EXPECT_TRUE(s.hosts->beat("{}").ok());
  EXPECT_EQ(pg_->psql(db_, "SELECT string_agg(version::text, ',' ORDER BY version) FROM vramd_schema"),
            "1,2,3,4,5,6,7,8,9");
}

// The shared queue's claim (HostStore::sync): three hosts claiming at once from 300 queued leases,
// each with room for all, take each lease exactly once; priority then FIFO order is kept; a host
// whose granted lease was re-queued while it was taken for lost finds it no longer its own.
TEST_F(PostgresStore, ThreeHostsClaimingAtOnceNeverTakeOneLeaseTwice) {
  Now now(MonoTime(std::chrono::hours(5)), TimePoint(std::chrono::hours(400000)));
  Stores origin = open("gpu1");
  for (uint64_t id = 1; id <= 300; ++id) {
    Lease l = lease(id, LeaseState::queued, now);
    l.request.cluster = true;
    l.request.priority = 0;
    l.request.vram = 1 * MiB;
    ASSERT_TRUE(origin.leases->save(l, now).ok());
  }
  std::vector<Stores> hosts = {open("gpu1"), open("gpu2"), open("gpu3")};
  std::mutex mu;
  std::map<uint64_t, std::vector<std::string>> claimed;
  std::vector<std::thread> threads;
  for (size_t h = 0; h < hosts.size(); ++h)
    threads.emplace_back([&, h] {
      ClaimContext ctx;
      ctx.host = fmt::format("gpu{}", h + 1);
      ctx.sampled = true;
      ctx.gpus.push_back({0, 1000 * GiB, 1000 * GiB, ""});  // room for every lease
      std::vector<uint64_t> mine;  // granted here, as the daemon would pass them
      ASSERT_TRUE(hosts[h].hosts->beat("").ok());  // a host claims only while its heartbeat is fresh
      for (int round = 0; round < 40; ++round) {
        auto r = hosts[h].hosts->sync(ctx, {}, mine, {}, now, std::chrono::seconds(30));
        ASSERT_TRUE(r.ok()) << r.error();
        EXPECT_TRUE(r->lost.empty());
        std::lock_guard lock(mu);
        for (const auto& l : r->claimed) {
          claimed[l.id].push_back(ctx.host);
          mine.push_back(l.id);
        }
      }
    });
  for (auto& t : threads) t.join();
  ASSERT_EQ(claimed.size(), 300u);
  for (const auto& [id, by] : claimed) EXPECT_EQ(by.size(), 1u) << "lease " << id << " claimed twice";
  EXPECT_EQ(pg_->psql(db_, "SELECT COUNT(*) FROM leases WHERE state = 'granted'"), "300");
  EXPECT_EQ(pg_->psql(db_, "SELECT COUNT(DISTINCT id) FROM leases"), "300");

  // Order: a higher priority first, then FIFO; a lease too big for the room holds the line.
  Stores q = open("gpu4");
  for (uint64_t id : {1001, 1002, 1003}) {
    Lease l = lease(id, LeaseState::queued, now);
    l.request.cluster = true;
    l.request.priority = id == 1003 ? 5 : 0;
    l.request.vram = id == 1001 ? 10 * GiB : 1 * GiB;
    ASSERT_TRUE(q.leases->save(l, now).ok());
  }
  ClaimContext small;
  small.host = "gpu4";
  small.sampled = true;
  small.gpus.push_back({0, 2 * GiB, 24 * GiB, ""});
  ASSERT_TRUE(q.hosts->beat("").ok());  // a live host: its reasons count
  auto r = q.hosts->sync(small, {1001, 1002, 1003}, {}, {}, now, std::chrono::seconds(30));
  ASSERT_TRUE(r.ok()) << r.error();
  ASSERT_EQ(r->claimed.size(), 1u);
  EXPECT_EQ(r->claimed[0].id, 1003u);  // priority 5 first; 1001 (10 GiB) then holds the line
  EXPECT_NE(r->reasons[1001].find("gpu4: needs 10.0 GiB"), std::string::npos)
      << (r->reasons.count(1001) ? r->reasons[1001] : "no reason");

  // gpu4's grant is re-queued by another host (as after a lost heartbeat): no longer its own.
  pg_->psql(db_, "UPDATE leases SET host = 'gpu1', state = 'queued' WHERE id = 1003");
  auto again = q.hosts->sync(ClaimContext{}, {}, {1003}, {}, now, std::chrono::seconds(30));
  ASSERT_TRUE(again.ok()) << again.error();
  EXPECT_EQ(again->lost, std::vector<uint64_t>{1003});

  // A claim whose commit landed though its answer was an error: the next round takes it up.
  pg_->psql(db_,
            "UPDATE leases SET state = 'granted', data = jsonb_set(jsonb_set(data::jsonb, '{state}',"
            " to_jsonb('granted'::text)), '{gpu}', to_jsonb(0))::text WHERE id = 1002");
  auto orphan = q.hosts->sync(ClaimContext{}, {}, {}, {}, now, std::chrono::seconds(30));
  ASSERT_TRUE(orphan.ok()) << orphan.error();
  ASSERT_EQ(orphan->claimed.size(), 1u);
  EXPECT_EQ(orphan->claimed[0].id, 1002u);
  EXPECT_EQ(orphan->claimed[0].state, LeaseState::granted);
  EXPECT_EQ(orphan->claimed[0].gpu, 0u);
  auto known = q.hosts->sync(ClaimContext{}, {}, {1002}, {}, now, std::chrono::seconds(30));
  ASSERT_TRUE(known.ok()) << known.error();
  EXPECT_TRUE(known->claimed.empty());
}

// Fencing in the store (issue 30): every grant takes a larger token from one sequence; a lease
// this host gave up while cut off is queued again only while its row is still granted here (a
// release asked meanwhile ends it); a host whose own heartbeat is stale claims nothing.
TEST_F(PostgresStore, GrantsTakeGrowingTokensAndAFencedLeaseIsQueuedAgainOnlyWhileItIsStillItsOwn) {
  Now now(MonoTime(std::chrono::hours(5)), TimePoint(std::chrono::hours(400000)));
  const auto timeout = std::chrono::seconds(30);
  Stores a = open("gpu1");
  ASSERT_TRUE(a.hosts->beat("").ok());
  ClaimContext room;
  room.host = "gpu1";
  room.sampled = true;
  room.gpus.push_back({0, 100 * GiB, 100 * GiB, ""});
  for (uint64_t id : {1, 3}) {
    Lease l = lease(id, LeaseState::queued, now);
    l.request.cluster = true;
    ASSERT_TRUE(a.leases->save(l, now).ok());
  }
  auto first = a.hosts->sync(room, {}, {}, {}, now, timeout);
  ASSERT_TRUE(first.ok()) << first.error();
  ASSERT_EQ(first->claimed.size(), 2u);
  std::map<uint64_t, uint64_t> token;
  for (const auto& l : first->claimed) token[l.id] = l.token;
  EXPECT_GT(token[1], 0u);
  EXPECT_NE(token[1], token[3]);
  EXPECT_EQ(pg_->psql(db_, "SELECT (data::json)->>'token' FROM leases WHERE id = 1"),
            std::to_string(token[1]));

  // Lease 1 given up while cut off: back in the queue, kept here; not granted again in the round
  // that queues it (though the room is there).
  auto fenced = a.hosts->sync(room, {}, {3}, {}, now, timeout, {1});
  ASSERT_TRUE(fenced.ok()) << fenced.error();
  EXPECT_TRUE(fenced->claimed.empty());
  ASSERT_EQ(fenced->requeued_here.size(), 1u);
  EXPECT_EQ(fenced->requeued_here[0].state, LeaseState::queued);
  EXPECT_FALSE(fenced->requeued_here[0].request.pid);
  EXPECT_EQ(fenced->fence_done, std::vector<uint64_t>{1});
  EXPECT_EQ(pg_->psql(db_, "SELECT host || ':' || state FROM leases WHERE id = 1"), "gpu1:queued");
  // Granted again: a larger token.
  auto again = a.hosts->sync(room, {1}, {3}, {}, now, timeout);
  ASSERT_TRUE(again.ok()) << again.error();
  ASSERT_EQ(again->claimed.size(), 1u);
  EXPECT_GT(again->claimed[0].token, std::max(token[1], token[3]));

  // A fenced lease another host re-queued meanwhile is that host's: left alone, and done.
  pg_->psql(db_, "UPDATE leases SET host = 'gpu2', state = 'queued' WHERE id = 1");
  auto moved = a.hosts->sync(ClaimContext{}, {}, {3}, {}, now, timeout, {1});
  ASSERT_TRUE(moved.ok()) << moved.error();
  EXPECT_TRUE(moved->requeued_here.empty());
  EXPECT_EQ(moved->fence_done, std::vector<uint64_t>{1});
  EXPECT_EQ(pg_->psql(db_, "SELECT host || ':' || state FROM leases WHERE id = 1"), "gpu2:queued");

  // One whose release another host's API asked meanwhile ends, as its holder asked: by this
  // host's write of its end, with its event (the round leaves the row, and takes it for no orphan).
  pg_->psql(db_, "UPDATE leases SET release = 'released from another host''s API' WHERE id = 3");
  auto released = a.hosts->sync(ClaimContext{}, {}, {}, {}, now, timeout, {3});
  ASSERT_TRUE(released.ok()) << released.error();
  EXPECT_TRUE(released->requeued_here.empty());
  EXPECT_TRUE(released->claimed.empty());
  EXPECT_EQ(released->fence_done, std::vector<uint64_t>{3});
  ASSERT_EQ(released->fence_released.size(), 1u);
  Lease end = released->fence_released[0];
  EXPECT_EQ(end.id, 3u);
  EXPECT_EQ(end.state, LeaseState::released);
  EXPECT_EQ(end.end_reason, "released from another host's API");
  EXPECT_EQ(pg_->psql(db_, "SELECT COUNT(*) FROM jobs WHERE id = 3"), "0");
  StoredEvent told{900, ev(3000, "lease.released", "lease #3 released"), nullptr};
  ASSERT_TRUE(a.leases->save(end, now, {told}).ok());
  EXPECT_EQ(pg_->psql(db_, "SELECT COUNT(*) FROM leases WHERE id = 3"), "0");
  EXPECT_EQ(pg_->psql(db_, "SELECT state || ':' || end_reason FROM jobs WHERE id = 3"),
            "released:released from another host's API");
  EXPECT_EQ(pg_->psql(db_, "SELECT type FROM events WHERE id = 900"), "lease.released");

  // A host whose own heartbeat is older than half of host_timeout claims nothing, and says why.
  Lease l = lease(5, LeaseState::queued, now);
  l.request.cluster = true;
  ASSERT_TRUE(a.leases->save(l, now).ok());
  pg_->psql(db_, "UPDATE hosts SET heartbeat = now() - interval '20 seconds' WHERE host = 'gpu1'");
  auto stale = a.hosts->sync(room, {5}, {}, {}, now, timeout);
  ASSERT_TRUE(stale.ok()) << stale.error();
  EXPECT_TRUE(stale->claimed.empty());
  EXPECT_NE(stale->reasons[5].find("heartbeat in the store is older than half of host_timeout"),
            std::string::npos)
      << (stale->reasons.count(5) ? stale->reasons[5] : "no reason");
  ASSERT_TRUE(a.hosts->beat("").ok());
  auto fresh = a.hosts->sync(room, {5}, {}, {}, now, timeout);
  ASSERT_TRUE(fresh.ok()) << fresh.error();
  std::set<uint64_t> claimed;
  for (const auto& c : fresh->claimed) claimed.insert(c.id);
  EXPECT_EQ(claimed, (std::set<uint64_t>{1, 5}));  // 1: queued on gpu2 (above), any host's
}

// Room by eviction in the store (HostStore::sync with choose_claims): a host makes room only once
// every other live host has said why it cannot take the lease, the cheapest (then the lower name)
// does it, its mark keeps the others off, it lifts the mark when done; the reason read anywhere
// joins every live host's; a lost host's reasons and mark go.
TEST_F(PostgresStore, OneHostAtATimeMakesRoomAndALostHostsWordAndMarkGo) {
  Now now(MonoTime(std::chrono::hours(5)), TimePoint(std::chrono::hours(400000)));
  const auto timeout = std::chrono::seconds(30);
  std::vector<Stores> hosts = {open("gpu1"), open("gpu2"), open("gpu3")};
  for (auto& h : hosts) ASSERT_TRUE(h.hosts->beat("").ok());
  Lease l = lease(2001, LeaseState::queued, now);
  l.request.cluster = true;
  l.request.vram = 12 * GiB;
  l.requested_at = now.mono;
  ASSERT_TRUE(hosts[0].leases->save(l, now).ok());
  auto ctx = [&](const std::string& host, bool idle_comfyui) {
    ClaimContext c;
    c.host = host;
    c.sampled = true;
    c.at = now.mono;
    c.gpus.push_back({0, 4 * GiB, 24 * GiB, ""});
    if (idle_comfyui)
      c.gpus[0].evictable.push_back({"comfyui", 16 * GiB, std::chrono::seconds(20), MonoTime{}});
    return c;
  };
  auto sync = [&](size_t h, const ClaimContext& c) {
    auto r = hosts[h].hosts->sync(c, {}, {}, {}, now, timeout);
    EXPECT_TRUE(r.ok()) << r.error();
    return r.ok() ? *r : ClusterSynced{};
  };
  auto mark = [&] {
    return pg_->psql(db_, "SELECT COALESCE(evict_host, '-') FROM leases WHERE id = 2001");
  };
  // gpu3 could unload for it, but gpu1 and gpu2 have not said yet: it waits.
  EXPECT_TRUE(sync(2, ctx("gpu3", true)).evict.empty());
  EXPECT_TRUE(sync(0, ctx("gpu1", false)).evict.empty());  // full, nothing to unload
  EXPECT_EQ(mark(), "-");
  // gpu2: every other live host has said; as cheap as gpu3 and the lower name: it makes room.
  ClusterSynced two = sync(1, ctx("gpu2", true));
  ASSERT_EQ(two.evict.size(), 1u);
  EXPECT_EQ(two.evict[0].lease, 2001u);
  EXPECT_EQ(mark(), "gpu2");
  // gpu3 does not too; it says who does.
  EXPECT_TRUE(sync(2, ctx("gpu3", true)).evict.empty());
  EXPECT_EQ(pg_->psql(db_, "SELECT evict_cost FROM lease_reasons WHERE id = 2001 AND host = 'gpu3'"),
            "20000");
  // Read on gpu3 (it does not keep it): every live host's reason, in host order.
  auto found = hosts[2].hosts->find(2001, now, timeout);
  ASSERT_TRUE(found.ok() && *found) << (found.ok() ? "none" : found.error());
  std::string why = (*found)->lease->reason.text;
  EXPECT_EQ(why.find("gpu1: needs 12.0 GiB"), 0u) << why;
  EXPECT_NE(why.find("; gpu2: needs 12.0 GiB; GPU 0: 4.0 GiB free of 24.0 GiB; unloading comfyui"
                     " for it; gpu3: needs 12.0 GiB"),
            std::string::npos)
      << why;
  EXPECT_NE(why.find("gpu2 is making room for it"), std::string::npos) << why;

  // gpu2 is lost: its word and its mark go (gpu1 looks after lost hosts).
  pg_->psql(db_, "UPDATE hosts SET heartbeat = now() - interval '1 hour' WHERE host = 'gpu2'");
  ASSERT_TRUE(hosts[0].hosts->handle_lost_hosts(timeout, now).ok());
  EXPECT_EQ(mark(), "-");
  EXPECT_EQ(pg_->psql(db_, "SELECT COUNT(*) FROM lease_reasons WHERE host = 'gpu2'"), "0");
  // gpu3's turn; once its unloads are over without room, it lifts its mark.
  ClusterSynced three = sync(2, ctx("gpu3", true));
  ASSERT_EQ(three.evict.size(), 1u);
  EXPECT_EQ(mark(), "gpu3");
  ClaimContext unloading = ctx("gpu3", false);
  unloading.evicting[2001] = {2001, 0, {"comfyui"}};
  EXPECT_TRUE(sync(2, unloading).unmarked.empty());
  EXPECT_EQ(mark(), "gpu3");
  ClusterSynced done = sync(2, ctx("gpu3", false));
  EXPECT_EQ(done.unmarked, std::vector<uint64_t>{2001});
  EXPECT_EQ(mark(), "-");
  EXPECT_EQ(pg_->psql(db_, "SELECT state FROM leases WHERE id = 2001"), "queued");
}

// A lost host's granted lease is queued again for the others, unless its holder asked another
// host's API to release it while that host was cut off: then it ends, released (queued again, it
// would be granted to no one and hold its bytes until it expired).
TEST_F(PostgresStore, ALostHostsLeaseWhoseReleaseWasAskedEndsReleasedAndTheOtherIsQueuedAgain) {
  Now now(MonoTime(std::chrono::hours(5)), TimePoint(std::chrono::hours(400000)));
  const auto timeout = std::chrono::seconds(30);
  std::vector<Stores> hosts = {open("gpu1"), open("gpu2")};
  for (auto& h : hosts) ASSERT_TRUE(h.hosts->beat("").ok());
  ClaimContext room;
  room.host = "gpu2";
  room.sampled = true;
  room.gpus.push_back({0, 100 * GiB, 100 * GiB, ""});
  for (uint64_t id : {11, 12}) {
    Lease l = lease(id, LeaseState::queued, now);
    l.request.cluster = true;
    ASSERT_TRUE(hosts[1].leases->save(l, now).ok());
  }
  auto claimed = hosts[1].hosts->sync(room, {}, {}, {}, now, timeout);
  ASSERT_TRUE(claimed.ok()) << claimed.error();
  ASSERT_EQ(claimed->claimed.size(), 2u);
  // gpu2 is cut off; lease 11's holder releases it through gpu1's API.
  auto asked = hosts[0].hosts->ask_release(11, "released from another host's API");
  ASSERT_TRUE(asked.ok()) << asked.error();
  EXPECT_TRUE(*asked);
  pg_->psql(db_, "UPDATE hosts SET heartbeat = now() - interval '1 hour' WHERE host = 'gpu2'");
  auto lost = hosts[0].hosts->handle_lost_hosts(timeout, now);
  ASSERT_TRUE(lost.ok()) << lost.error();
  ASSERT_EQ(lost->size(), 1u);
  const LostHost& h = (*lost)[0];
  EXPECT_EQ(h.host, "gpu2");
  EXPECT_TRUE(h.ended.empty());
  ASSERT_EQ(h.released.size(), 1u);
  EXPECT_EQ(h.released[0].id, 11u);
  EXPECT_EQ(h.released[0].state, LeaseState::released);
  EXPECT_EQ(h.released[0].end_reason, "released from another host's API (its host gpu2 was lost)");
  ASSERT_EQ(h.requeued.size(), 1u);
  EXPECT_EQ(h.requeued[0].id, 12u);
  EXPECT_EQ(pg_->psql(db_, "SELECT COUNT(*) FROM leases WHERE id = 11"), "0");
  EXPECT_EQ(pg_->psql(db_, "SELECT host || ':' || state FROM jobs WHERE id = 11"), "gpu2:released");
  EXPECT_EQ(pg_->psql(db_, "SELECT host || ':' || state || ':' || COALESCE(release, '-')"
                           " FROM leases WHERE id = 12"),
            "gpu1:queued:-");
}

TEST_F(PostgresStore, AServerRestartFailsACallAndTheNextOneConnectsAgain) {
  Now now(MonoTime(std::chrono::hours(5)), TimePoint(std::chrono::hours(400000)));
  Stores s = open("gpu1");
  ASSERT_TRUE(s.leases->save(lease(1, LeaseState::queued, now), now).ok());
  ASSERT_TRUE(pg_->stop());
  Status down = s.leases->save(lease(2, LeaseState::queued, now), now);
  EXPECT_FALSE(down.ok());  // an error, at once: the daemon retries it and acknowledges nothing
  ASSERT_TRUE(pg_->start());
  bool saved = false;
  for (int i = 0; i < 3 && !saved; ++i) saved = s.leases->save(lease(2, LeaseState::queued, now), now).ok();
  EXPECT_TRUE(saved);
  EXPECT_EQ(s.leases->active(now)->size(), 2u);
}

TEST_F(PostgresStore, AnUnreachableServerIsAClearErrorWithoutThePassword) {
  int port = testing::free_port();  // nothing listens there
  auto s = open_postgres_stores(fmt::format("postgresql://vramd:s3cret@127.0.0.1:{}/x", port),
                                "gpu1", 100);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().find("cannot connect to PostgreSQL"), std::string::npos) << s.error();
  EXPECT_NE(s.error().find("vramd:***@127.0.0.1"), std::string::npos) << s.error();
  EXPECT_EQ(s.error().find("s3cret"), std::string::npos) << s.error();
}

TEST(RedactUrl, HidesPasswordsInBothForms) {
  EXPECT_EQ(redact_url("postgresql://u:pw@h:5432/db"), "postgresql://u:***@h:5432/db");
  EXPECT_EQ(redact_url("postgresql://u@h/db"), "postgresql://u@h/db");
  EXPECT_EQ(redact_url("host=h password=pw dbname=x"), "host=h password=*** dbname=x");
}

}  // namespace
}  // namespace vramd

namespace vramd {
namespace {

TEST(StoreUrl, ComesFromStoreOrTheFirstLineOfStoreUrlFile) {
  testing::TempDir dir;
  DaemonConfig d;
  EXPECT_EQ(*store_url(d), "");  // SQLite
  d.store = "postgresql://a@b/c";
  EXPECT_EQ(*store_url(d), "postgresql://a@b/c");
  d.store.clear();
  d.store_url_file = dir.file("url");
  EXPECT_FALSE(store_url(d).ok());  // missing
  std::ofstream(dir.file("url")) << "postgresql://vramd:pw@db/vramd  \nignored\n";
  EXPECT_EQ(*store_url(d), "postgresql://vramd:pw@db/vramd");
  std::ofstream(dir.file("url")) << "mysql://x\n";
  auto bad = store_url(d);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().find("must hold a postgresql:// URL"), std::string::npos) << bad.error();
}

}  // namespace
}  // namespace vramd
