// The ClusterLink against a real PostgreSQL (the test binary's private server): its beats and
// claim rounds on a store thread, what it tells the core, a store that refuses, and the calls
// about leases other hosts hold.
#include "daemon/cluster_link.h"

#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/use_future.hpp>
#include <fmt/format.h>

#include "daemon/sampler.h"
#include "integration/postgres_server.h"
#include "store/stores.h"

namespace vramd {
namespace cluster_link_test {

namespace asio = boost::asio;
using namespace std::chrono_literals;
using testing::PostgresServer;

Now clock_now() { return read_clocks(); }

Lease shared_lease(uint64_t id, Bytes vram, const Now& now) {
  Lease l;
  l.id = id;
  l.seq = id;
  l.state = LeaseState::queued;
  l.requested_at = now.mono;
  l.request.vram = vram;
  l.request.label = fmt::format("job{}", id);
  l.request.holder = "python";
  l.request.cluster = true;
  l.request.wait_timeout = std::chrono::minutes(5);
  return l;
}

// One host's link on its own loop and store thread; what it told the core, counted.
class Host {
 public:
  Host(PostgresServer* pg, const std::string& db, std::string name, Bytes free)
      : name_(std::move(name)), free_(free) {
    auto s = open_postgres_stores(pg->url(db), name_, 100);
    EXPECT_TRUE(s.ok()) << s.error();
    if (s.ok()) stores = std::move(*s);
  }
  ~Host() {
    if (link) link->stop();
    io.restart();
    io.poll();  // the loops end
    store_thread.join();
  }
  void start() {
    link = std::make_unique<ClusterLink>(
        io, store_thread, stores.hosts, 30s,
        ClusterLink::Hooks{
            clock_now,
            [this](const Now& now) {
              ++rounds;
              ClusterLink::Round r;
              r.ctx.host = name_;
              r.ctx.sampled = true;
              r.ctx.gpus.push_back({0, free_, 24 * GiB, ""});
              r.ctx.at = now.mono;
              r.granted = granted;
              return r;
            },
            [this] { return fmt::format(R"({{"host":"{}","beat":{}}})", name_, ++beats); },
            [this](const Event& e) {
              if (std::holds_alternative<StoreContact>(e)) ++contacts;
              if (const auto* s = std::get_if<ClusterSynced>(&e)) {
                if (!s->ok) ++failed_rounds;
                for (const auto& l : s->claimed) granted.push_back(l.id);
                for (const auto& r : s->releases) releases.push_back(r.first);
              }
              if (const auto* h = std::get_if<LeaseHeartbeat>(&e)) {
                heard.push_back(h->id);
              }
            },
            [this](uint64_t id) { changed.push_back(id); },
            [this](const std::string& backend, const Status& s) {
              health[backend] = s ? "ok" : s.error();
            }});
    link->start();
  }
  // Runs the loop until `done` or `max` passes.
  bool run_until(const std::function<bool()>& done, Duration max = 10s) {
    auto until = std::chrono::steady_clock::now() + max;
    while (!done()) {
      if (std::chrono::steady_clock::now() > until) return false;
      io.restart();
      io.run_for(20ms);
    }
    return true;
  }
  template <typename T>
  T await(asio::awaitable<T> op) {
    auto f = asio::co_spawn(io, std::move(op), asio::use_future);
    run_until([&] { return f.wait_for(0s) == std::future_status::ready; });
    return f.get();
  }

  Stores stores;
  asio::io_context io;
  asio::thread_pool store_thread{1};
  std::unique_ptr<ClusterLink> link;
  int rounds = 0, beats = 0, contacts = 0, failed_rounds = 0;
  std::vector<uint64_t> granted, changed, releases, heard;
  std::map<std::string, std::string> health;

 private:
  std::string name_;
  Bytes free_;
};

class ClusterLinkTest : public ::testing::Test {
 protected:
  void SetUp() override {
    pg_ = PostgresServer::get();
    VRAMD_REQUIRE_POSTGRES(pg_);
    db_ = pg_->create_database("link");
  }
  PostgresServer* pg_ = nullptr;
  std::string db_;
};

TEST_F(ClusterLinkTest, BeatsWriteThisHostsSnapshotAndEachIsAContactWithTheStore) {
  Host a(pg_, db_, "gpu1", 8 * GiB);
  a.start();
  ASSERT_TRUE(a.run_until([&] { return a.contacts >= 2; }));
  EXPECT_EQ(a.health["hosts"], "ok");
  // The row holds the snapshot of one of the beats, written on the store thread.
  std::string status = pg_->psql(db_, "SELECT status FROM hosts WHERE host = 'gpu1'");
  EXPECT_NE(status.find(R"("host":"gpu1")"), std::string::npos) << status;
  // No beat more often than kHostBeatEvery: two contacts took about one interval.
  EXPECT_LE(a.beats, a.contacts + 1);
}

TEST_F(ClusterLinkTest, AnotherHostsQueuedLeaseThatFitsIsClaimedHereAndItsWaitersWoken) {
  Host origin(pg_, db_, "gpu2", 0);
  Now now = clock_now();
  ASSERT_TRUE(origin.stores.leases->save(shared_lease(7, 4 * GiB, now), now).ok());
  ASSERT_TRUE(origin.stores.leases->save(shared_lease(8, 16 * GiB, now), now).ok());
  Host a(pg_, db_, "gpu1", 8 * GiB);
  a.start();
  // Claims wait for this host's first beat (self-fencing), then take what fits: 7, not 8.
  ASSERT_TRUE(a.run_until([&] { return !a.granted.empty(); })) << a.health["cluster"];
  EXPECT_EQ(a.granted, std::vector<uint64_t>{7});
  EXPECT_NE(std::find(a.changed.begin(), a.changed.end(), 7u), a.changed.end());
  EXPECT_EQ(pg_->psql(db_, "SELECT host || ':' || state FROM leases WHERE id = 7"), "gpu1:granted");
  EXPECT_EQ(pg_->psql(db_, "SELECT state FROM leases WHERE id = 8"), "queued");
  EXPECT_EQ(a.health["cluster"], "ok");
}

TEST_F(ClusterLinkTest, AStoreThatRefusesIsToldAndTheClaimPauseLiftedThenItRecovers) {
  Host a(pg_, db_, "gpu1", 8 * GiB);
  a.start();
  ASSERT_TRUE(a.run_until([&] { return a.contacts >= 1 && a.rounds >= 1; }));
  pg_->psql(db_,
            "CREATE FUNCTION refuse() RETURNS trigger AS $$ BEGIN RAISE EXCEPTION 'refused by "
            "test'; END $$ LANGUAGE plpgsql; CREATE TRIGGER refuse_beats BEFORE UPDATE ON hosts "
            "FOR EACH ROW EXECUTE FUNCTION refuse()");
  int contacts = a.contacts;
  ASSERT_TRUE(a.run_until([&] { return a.health["hosts"] != "ok"; }));
  EXPECT_NE(a.health["hosts"].find("refused by test"), std::string::npos) << a.health["hosts"];
  EXPECT_EQ(a.contacts, contacts);  // a beat that failed is no contact
  // A claim round whose store fails still answers the core, so that Admission goes on.
  pg_->psql(db_, "CREATE TRIGGER refuse_claims BEFORE UPDATE ON leases FOR EACH ROW EXECUTE "
                 "FUNCTION refuse()");
  // Queued through another host's connection: a's belongs to its store thread, busy with its
  // beats and claims (TSan saw this thread and that one in one libpq connection).
  Host origin(pg_, db_, "gpu2", 0);
  Now now = clock_now();
  ASSERT_TRUE(origin.stores.leases->save(shared_lease(5, 1 * GiB, now), now).ok());
  pg_->psql(db_, "DROP TRIGGER refuse_beats ON hosts");  // claims need a fresh beat
  ASSERT_TRUE(a.run_until([&] { return a.failed_rounds > 0; })) << a.health["cluster"];
  EXPECT_NE(a.health["cluster"].find("refused by test"), std::string::npos) << a.health["cluster"];
  EXPECT_TRUE(a.granted.empty());
  pg_->psql(db_, "DROP TRIGGER refuse_claims ON leases");
  ASSERT_TRUE(a.run_until([&] { return a.health["hosts"] == "ok" && !a.granted.empty(); }));
  EXPECT_EQ(a.health["cluster"], "ok");
  EXPECT_EQ(a.granted, std::vector<uint64_t>{5});
  EXPECT_GT(a.contacts, contacts);
}

TEST_F(ClusterLinkTest, ALeaseHeldElsewhereIsFoundAskedToEndAndItsHeartbeatPassedOn) {
  Host a(pg_, db_, "gpu1", 0);
  Host b(pg_, db_, "gpu2", 8 * GiB);
  Now now = clock_now();
  ASSERT_TRUE(b.stores.leases->save(shared_lease(9, 4 * GiB, now), now).ok());
  b.start();
  ASSERT_TRUE(b.run_until([&] { return !b.granted.empty(); }));
  a.start();
  auto found = a.await(a.link->find(9));
  ASSERT_TRUE(found.ok()) << found.error();
  ASSERT_TRUE(found->has_value());
  EXPECT_EQ((*found)->host, "gpu2");
  ASSERT_TRUE((*found)->lease);
  EXPECT_EQ((*found)->lease->state, LeaseState::granted);
  auto none = a.await(a.link->find(12345));
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());

  auto beat = a.await(a.link->beat_lease(9));
  ASSERT_TRUE(beat.ok()) << beat.error();
  EXPECT_TRUE(*beat);
  EXPECT_FALSE(*a.await(a.link->beat_lease(12345)));

  auto elsewhere = a.await(a.link->leases_elsewhere(""));
  ASSERT_TRUE(elsewhere.ok()) << elsewhere.error();
  ASSERT_EQ(elsewhere->leases.size(), 1u);
  EXPECT_EQ(elsewhere->leases[0].host, "gpu2");
  EXPECT_EQ(elsewhere->hosts.size(), 2u);
  EXPECT_TRUE(a.await(a.link->leases_elsewhere("gpu3"))->leases.empty());

  auto asked = a.await(a.link->ask_release(9, "released from gpu1's API"));
  ASSERT_TRUE(asked.ok()) << asked.error();
  EXPECT_TRUE(*asked);
  EXPECT_FALSE(*a.await(a.link->ask_release(12345, "nobody")));
  // The holding host hears both in its next round: the heartbeat as one heard here, the
  // release for its core to end.
  b.link->claim_soon();
  ASSERT_TRUE(b.run_until([&] { return !b.releases.empty(); }, 5s));
  EXPECT_EQ(b.releases, std::vector<uint64_t>{9});
  EXPECT_EQ(b.heard, std::vector<uint64_t>{9});
}

TEST_F(ClusterLinkTest, AStoppedLinkWritesNoMoreAndTellsNothing) {
  Host a(pg_, db_, "gpu1", 8 * GiB);
  a.start();
  ASSERT_TRUE(a.run_until([&] { return a.contacts >= 1 && a.rounds >= 1; }));
  a.link->stop();
  a.link->claim_soon();  // ignored once stopped
  int rounds = a.rounds, beats = a.beats;
  a.run_until([] { return false; }, 2500ms);
  EXPECT_EQ(a.rounds, rounds);
  EXPECT_LE(a.beats, beats);
}

}  // namespace cluster_link_test
}  // namespace vramd
