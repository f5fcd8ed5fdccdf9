// The lease writer against a real SQLite file: a change and its events land together; a failed
// write keeps the change unwritten (no one is told), is written again with the newest state and
// the earlier events; waits answer on the write, on the grant, on the limit, and on stop.
#include "daemon/lease_writer.h"

#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>

#include <fmt/format.h>

#include <atomic>

#include "integration/test_util.h"

namespace vramd {
namespace lease_writer_test {

namespace asio = boost::asio;
using namespace std::chrono_literals;

// The SQLite lease store, failing the next `fail` writes as a full disk would (refused, nothing
// written).
class FailingStore : public LeaseStore {
 public:
  explicit FailingStore(std::unique_ptr<LeaseStore> real) : real_(std::move(real)) {}
  Status save(const Lease& lease, const Now& now, const std::vector<StoredEvent>& events) override {
    ++saves;
    if (fail > 0) {
      --fail;
      return make_error("database or disk is full");
    }
    return real_->save(lease, now, events);
  }
  Result<std::vector<Lease>> active(const Now& now) const override { return real_->active(now); }
  Result<uint64_t> max_id() const override { return real_->max_id(); }
  Result<std::vector<JobRecord>> jobs(const std::string& label, size_t limit) const override {
    return real_->jobs(label, limit);
  }
  Result<std::optional<JobRecord>> job(uint64_t id) const override { return real_->job(id); }

  std::atomic<int> fail{0};
  std::atomic<int> saves{0};

 private:
  std::unique_ptr<LeaseStore> real_;
};

class Fixture {
 public:
  Fixture() {
    auto real = LeaseStore::open(dir.file("vramd.db"));
    EXPECT_TRUE(real.ok()) << real.error();
    store = std::make_shared<FailingStore>(std::move(*real));
    auto events_opened = EventStore::open(dir.file("vramd.db"), 1000);
    EXPECT_TRUE(events_opened.ok()) << events_opened.error();
    events = std::move(*events_opened);
    writer = std::make_unique<LeaseWriter>(
        io, store_thread, store,
        LeaseWriter::Hooks{[] { return Now{MonoTime(Duration(1'000'000'000)), TimePoint(Duration(1'700'000'000'000))}; },
                           [this](uint64_t id) { return id == lease.id ? &lease : nullptr; },
                           [this](const Status& s) { outcomes.push_back(s.ok() ? "ok" : s.error()); },
                           [this](bool ok) { store_thread_saw = ok ? 1 : 0; }});
  }
  ~Fixture() { store_thread.join(); }

  StoredEvent told(int64_t id, const std::string& type) {
    StoredEvent e;
    e.id = id;
    e.event.type = type;
    e.event.message = fmt::format("lease #{} {}", lease.id, type);
    e.event.lease = lease.id;
    return e;
  }
  // Runs the loop until `done` or `limit`.
  void run_until(const std::function<bool()>& done, Duration limit = 5s) {
    auto until = std::chrono::steady_clock::now() + limit;
    while (!done() && std::chrono::steady_clock::now() < until) {
      io.restart();
      io.run_for(10ms);
    }
  }
  std::vector<std::string> event_types() {
    auto list = events->list(0, std::nullopt, 100);
    EXPECT_TRUE(list.ok()) << list.error();
    std::vector<std::string> out;
    for (const auto& e : *list) out.push_back(e.event.type);
    return out;
  }
  // Starts a wait on the lease; `returned` is set when it returns.
  void start_wait(Duration max, bool until_ended, std::optional<std::chrono::steady_clock::time_point>& returned) {
    asio::co_spawn(io, [this, max, until_ended, &returned]() -> asio::awaitable<void> {
      co_await writer->wait(lease.id, max, until_ended);
      returned = std::chrono::steady_clock::now();
    }, asio::detached);
  }

  testing::TempDir dir;
  asio::io_context io;
  asio::thread_pool store_thread{1};
  std::shared_ptr<FailingStore> store;
  std::unique_ptr<EventStore> events;
  std::unique_ptr<LeaseWriter> writer;
  Lease lease;
  std::vector<std::string> outcomes;
  std::atomic<int> store_thread_saw{-1};
};

Lease make_lease(uint64_t id, LeaseState state) {
  Lease l;
  l.id = id;
  l.state = state;
  l.request.vram = GiB;
  l.request.label = "job";
  l.requested_at = MonoTime(Duration(999'000'000));
  if (state == LeaseState::granted) {
    l.gpu = 0;
    l.granted_at = l.requested_at;
    l.token = 1;
  }
  return l;
}

TEST(LeaseWriter, AChangeAndItsEventsLandTogetherAndAWaitAnswersOnTheWrite) {
  Fixture f;
  f.lease = make_lease(7, LeaseState::granted);
  f.writer->save(f.lease, {f.told(1, "lease.queued"), f.told(2, "lease.granted")});
  EXPECT_FALSE(f.writer->written(7)) << "not on disk until the store thread says so";
  EXPECT_EQ(f.writer->unwritten(), std::vector<uint64_t>{7});
  std::optional<std::chrono::steady_clock::time_point> returned;
  f.start_wait(0s, false, returned);
  f.run_until([&] { return returned.has_value(); });
  ASSERT_TRUE(returned) << "the wait ends with the write";
  EXPECT_TRUE(f.writer->written(7));
  EXPECT_TRUE(f.writer->unwritten().empty());
  EXPECT_EQ(f.outcomes, std::vector<std::string>{"ok"});
  EXPECT_EQ(f.store_thread_saw, 1);
  auto active = f.store->active(Now{MonoTime(Duration(1'000'000'000)), TimePoint(Duration(1'700'000'000'000))});
  ASSERT_TRUE(active.ok()) << active.error();
  ASSERT_EQ(active->size(), 1u);
  EXPECT_EQ((*active)[0].state, LeaseState::granted);
  EXPECT_EQ(f.event_types(), (std::vector<std::string>{"lease.queued", "lease.granted"}));
}

TEST(LeaseWriter, AFailedWriteIsToldToNoOneAndIsWrittenAgainWithItsEvents) {
  Fixture f;
  f.store->fail = 1;
  f.lease = make_lease(8, LeaseState::queued);
  f.writer->save(f.lease, {f.told(1, "lease.queued")});
  f.run_until([&] { return !f.outcomes.empty(); });
  ASSERT_EQ(f.outcomes.size(), 1u);
  EXPECT_EQ(f.outcomes[0], "database or disk is full");
  EXPECT_EQ(f.store_thread_saw, 0);
  EXPECT_FALSE(f.writer->written(8)) << "the change stays unwritten while the store refuses it";
  EXPECT_TRUE(f.event_types().empty());
  // Granted meanwhile: the newer write carries the first one's event too, in its transaction.
  f.lease = make_lease(8, LeaseState::granted);
  f.writer->save(f.lease, {f.told(2, "lease.granted")});
  std::optional<std::chrono::steady_clock::time_point> returned;
  f.start_wait(0s, false, returned);
  f.run_until([&] { return returned.has_value(); });
  ASSERT_TRUE(returned);
  EXPECT_TRUE(f.writer->written(8));
  EXPECT_EQ(f.event_types(), (std::vector<std::string>{"lease.queued", "lease.granted"}));
  EXPECT_EQ(f.outcomes.back(), "ok");
  // The first failure's retry still comes (kRewriteAfter after it), and writes the newest state.
  f.run_until([&] { return f.store->saves == 3; });
  ASSERT_EQ(f.store->saves, 3);
  // With no newer change, the writer itself writes the newest state again after kRewriteAfter.
  f.store->fail = 1;
  f.lease = make_lease(8, LeaseState::released);
  f.lease.ended_at = MonoTime(Duration(1'000'000'000));
  f.writer->save(f.lease, {f.told(3, "lease.released")});
  auto t0 = std::chrono::steady_clock::now();
  f.run_until([&] { return f.writer->written(8); });
  EXPECT_TRUE(f.writer->written(8));
  EXPECT_GE(std::chrono::steady_clock::now() - t0, LeaseWriter::kRewriteAfter);
  EXPECT_EQ(f.store->saves, 5) << "the refused write, then its retry";
  EXPECT_EQ(f.event_types(), (std::vector<std::string>{"lease.queued", "lease.granted", "lease.released"}));
  auto job = f.store->job(8);
  ASSERT_TRUE(job.ok()) << job.error();
  ASSERT_TRUE(job->has_value());
  EXPECT_EQ((*job)->state, LeaseState::released);
}

TEST(LeaseWriter, AWaitForAGrantEndsOnTheGrantOnItsLimitOrOnStop) {
  Fixture f;
  f.lease = make_lease(9, LeaseState::queued);
  f.writer->save(f.lease);
  f.run_until([&] { return f.writer->written(9); });
  ASSERT_TRUE(f.writer->written(9));
  std::optional<std::chrono::steady_clock::time_point> on_grant, on_limit, on_stop;
  f.start_wait(10s, false, on_grant);
  f.run_until([] { return false; }, 100ms);
  EXPECT_FALSE(on_grant) << "queued: it waits";
  // The grant is a change like any other: the wait answers once it is written.
  f.lease = make_lease(9, LeaseState::granted);
  f.writer->save(f.lease);
  f.run_until([&] { return on_grant.has_value(); });
  ASSERT_TRUE(on_grant);
  EXPECT_TRUE(f.writer->written(9)) << "answered only once on disk";
  // Its limit ends a wait for the end of a granted lease.
  auto t0 = std::chrono::steady_clock::now();
  f.start_wait(50ms, true, on_limit);
  f.run_until([&] { return on_limit.has_value(); });
  ASSERT_TRUE(on_limit);
  EXPECT_GE(*on_limit - t0, 50ms);
  // And stop ends every wait at once.
  f.start_wait(60s, true, on_stop);
  f.run_until([] { return false; }, 50ms);
  EXPECT_FALSE(on_stop);
  f.writer->stop();
  f.run_until([&] { return on_stop.has_value(); }, 1s);
  EXPECT_TRUE(on_stop);
}

}  // namespace lease_writer_test
}  // namespace vramd
