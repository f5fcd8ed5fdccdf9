// Faults of the shared store with several hosts (issue 17 item 6): three real vramd processes on one
// real PostgreSQL, each on its own test GPU.
//   - PostgreSQL restarted (stopped, started again) under load from clients of every host: every
//     lease acknowledged to a client is in the store afterwards, in a state that follows from what
//     the client was told and did; none is granted twice or on two hosts; every host claims again
//     (grants leases named for it) without a restart of its daemon.
//   - One host cut off from the store (its database role may not log in, its connections ended)
//     while the others keep granting: it keeps what it granted, acknowledges nothing it could not
//     write, and once it can log in again it resumes: the release another host's API asked of it
//     meanwhile is done, a lease named for it is claimed.
//   - A host killed and restarted gives no lease id again that it gave before, though the leases
//     it gave them to moved to another host (claimed there; ended there).
#include <signal.h>

#include <atomic>
#include <mutex>
#include <optional>
#include <regex>
#include <set>
#include <thread>

#include <gtest/gtest.h>

#include "integration/cluster_fixture.h"

namespace vramd::testing {
namespace {

using namespace std::chrono_literals;

bool alive(const DaemonFixture& f) { return f.daemon && f.daemon->pid() > 0 && ::kill(f.daemon->pid(), 0) == 0; }

// Leases in the store: on two hosts at once / with two job records / both active and ended.
void expect_store_sane(const ClusterFixture& c) {
  EXPECT_EQ(c.sql("SELECT COUNT(*) FROM (SELECT id FROM leases GROUP BY id HAVING COUNT(*) > 1) t"), "0");
  EXPECT_EQ(c.sql("SELECT COUNT(*) FROM (SELECT id FROM jobs GROUP BY id HAVING COUNT(*) > 1) t"), "0");
  EXPECT_EQ(c.sql("SELECT COUNT(*) FROM leases l JOIN jobs j ON j.id = l.id"), "0");
  EXPECT_EQ(c.sql("SELECT COUNT(*) FROM (SELECT subject FROM events WHERE type = 'lease.granted'"
                  " GROUP BY subject HAVING COUNT(*) > 1) t"),
            "0");
}

// The lease's state in the store ("host:state", or "ended:state" from its job record; "" when
// no host has it).
std::string stored(const ClusterFixture& c, uint64_t id) {
  std::string row = c.sql(fmt::format("SELECT host || ':' || state FROM leases WHERE id = {}", id));
  if (!row.empty()) return row;
  return c.sql(fmt::format("SELECT 'ended:' || state FROM jobs WHERE id = {}", id));
}

TEST(ClusterFaultE2E, PostgresRestartedUnderLoadOnThreeHostsLosesNoAcknowledgedLease) {
  // No heartbeat is needed within the test: kept leases stay as their clients left them. The
  // outage (10 s and the restart) is shorter than half of host_timeout, for which a host keeps
  // its shared leases while cut off (self-fencing; a longer one: ClusterFenceE2E).
  ClusterFixture c("pgrestart", {400 * MiB, 400 * MiB, 400 * MiB},
                   "host_timeout = \"40s\"\nlease_heartbeat = \"5m\"\n");
  VRAMD_REQUIRE_POSTGRES(c.pg);
  struct Told {
    std::string state;  // what the client was last told (queued / granted)
    std::string host;   // where, once granted
    bool released = false;
    std::string release_answer;  // a DELETE sent and not answered 200: what came back
  };
  std::mutex mu;
  std::map<uint64_t, Told> told;  // every lease acknowledged (201) to a client
  std::map<std::string, int> granted_after;  // per host: grants clients saw after the restart
  std::set<uint64_t> refused_ids;            // answered 503 (not written: released)
  std::atomic<bool> restarted{false}, stop{false};
  std::atomic<int> acked{0}, refused{0};
  // Asks `asked` for a lease: the answer when acknowledged (kept in `told`), nullopt when refused.
  auto submit = [&](DaemonFixture& asked, const json& body) -> std::optional<json> {
    auto l = post_lease(asked, body, "?wait=3s");
    if (!l) {
      ++refused;  // not acknowledged (the store was down): nothing is promised
      // ... and nothing is kept: a 503 names the lease it released.
      std::smatch m;
      static const std::regex named_id(R"(^503: .*lease #(\d+) could not be written)");
      if (std::regex_search(l.error(), m, named_id)) {
        std::lock_guard lock(mu);
        refused_ids.insert(std::stoull(m[1]));
      }
      return std::nullopt;
    }
    ++acked;
    std::lock_guard lock(mu);
    told[(*l)["id"].get<uint64_t>()] = {(*l)["state"], (*l).value("host", ""), false};
    return *l;
  };
  std::vector<std::thread> clients;
  for (int t = 0; t < 12; ++t) {
    clients.emplace_back([&, t] {
      for (int n = 0; !stop; ++n) {
        DaemonFixture& asked = c[static_cast<size_t>((t + n) % 3)];
        json body = {{"vram", "256MiB"}, {"label", fmt::format("c{}-{}", t, n)}};
        if (n % 3 == 0) body["host"] = fmt::format("gpu{}", (t + n + 1) % 3 + 1);  // named: another
        auto l = submit(asked, body);
        if (!l) {
          std::this_thread::sleep_for(50ms);
          continue;
        }
        uint64_t id = (*l)["id"];
        json now = *l;
        for (int polls = 0; now.value("state", "") == "queued" && polls < 10 && !stop; ++polls) {
          json j = lease_at(asked, id, "1s");
          if (j.contains("state")) now = j;
          else std::this_thread::sleep_for(100ms);  // 503 while the store is down: ask again
        }
        if (now.value("state", "") == "granted") {
          std::lock_guard lock(mu);
          told[id].state = "granted";
          told[id].host = now["host"];
          if (restarted) ++granted_after[now["host"].get<std::string>()];
        }
        if (n % 2 == 0) {
          auto d = http_request({asked.url}, "DELETE", fmt::format("/v1/leases/{}", id), "", 20000);
          std::lock_guard lock(mu);
          if (d && d->status == 200)
            told[id].released = true;
          else  // not told: the release may or may not have been taken (its answer was lost)
            told[id].release_answer = d ? fmt::format("{} {}", d->status, d->body) : d.error();
        }
      }
    });
  }
  ASSERT_TRUE(eventually([&] { return acked >= 40; }, 60s));
  // Longer than a lease's write may wait (about 5 s): some submissions are refused. Twice that,
  // so that on a loaded machine (ctest -j2 beside other daemons) a client still posts into it.
  ASSERT_TRUE(c.pg->stop());
  // The clients above mostly wait on queued leases; one more asks each host at once, so that a
  // submission lands in the outage however the load has spread them.
  std::vector<std::thread> during;
  for (size_t i = 0; i < 3; ++i)
    during.emplace_back([&, i] { submit(c[i], {{"vram", "256MiB"}, {"label", fmt::format("down-{}", i)}}); });
  std::this_thread::sleep_for(10s);
  for (auto& t : during) t.join();
  ASSERT_TRUE(c.pg->start());
  restarted = true;
  // Every host claims again, without a restart: leases named for it are granted there.
  EXPECT_TRUE(eventually(
      [&] {
        std::lock_guard lock(mu);
        return granted_after["gpu1"] >= 2 && granted_after["gpu2"] >= 2 && granted_after["gpu3"] >= 2;
      },
      60s));
  stop = true;
  for (auto& t : clients) t.join();
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_TRUE(alive(c[i])) << "host gpu" << i + 1 << " died: " << c[i].log();
    ASSERT_TRUE(eventually([&] { return c[i].status()["faults"].empty(); }, 30s))
        << "gpu" << i + 1 << ": " << c[i].status()["faults"].dump();
    // The outage was seen by each host.
    EXPECT_FALSE(events_of(c[i], "backend.failed").empty()) << "gpu" << i + 1;
  }
  EXPECT_GT(refused.load(), 0);  // the outage reached the clients
  EXPECT_FALSE(refused_ids.empty());
  // A lease refused (503) is kept nowhere as queued or granted: ended, or never written.
  for (uint64_t id : refused_ids) {
    std::string s = stored(c, id);
    EXPECT_TRUE(s.empty() || s.rfind("ended:", 0) == 0) << "refused lease " << id << ": " << s;
    EXPECT_EQ(told.count(id), 0u) << id;
  }

  // Every lease a client heard of is in the store, as it was told or later.
  size_t released = 0;
  for (const auto& [id, t] : told) {
    std::string s = stored(c, id);
    ASSERT_FALSE(s.empty()) << "lease " << id << " acknowledged (" << t.state << ") is lost";
    if (t.released) {
      ++released;
      // Released when granted, cancelled when still queued.
      EXPECT_TRUE(s == "ended:released" || s == "ended:cancelled") << id << ": " << s;
    } else if (t.state == "granted") {
      // Still granted, on the host the client was told: never taken back by the outage. A
      // release whose answer did not come back may have been taken: then it is ended so.
      if (t.release_answer.empty() || s != "ended:released") {
        EXPECT_EQ(s, t.host + ":granted") << id << "; release answered: " << t.release_answer;
      }
    } else {
      EXPECT_TRUE(s.find(":queued") != std::string::npos || s.find(":granted") != std::string::npos)
          << id << ": " << s;
    }
    // Any host's API answers for it, with the store's host.
    json l = lease_at(c[id % 3], id);
    EXPECT_TRUE(l.contains("state")) << id << ": " << l.dump();
  }
  EXPECT_GT(released, 0u);
  expect_store_sane(c);
  std::cerr << fmt::format("{} acknowledged, {} released, {} refused while down ({} naming their "
                           "lease); after the restart granted gpu1 {}, gpu2 {}, gpu3 {}\n",
                           acked.load(), released, refused.load(), refused_ids.size(), granted_after["gpu1"],
                           granted_after["gpu2"], granted_after["gpu3"]);
}

TEST(ClusterFaultE2E, OneHostCutOffFromTheStoreWhileTheOthersKeepGoing) {
  PostgresServer* pg = PostgresServer::get();
  VRAMD_REQUIRE_POSTGRES(pg);
  // gpu3 logs in as a role of its own, so that it alone can be cut off.
  ClusterFixture c("cutoff", {}, "");  // the database only: the hosts are made below
  pg->psql(c.db, "DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'gpu3')"
                 " THEN CREATE ROLE gpu3 LOGIN SUPERUSER; END IF; END $$");
  pg->psql(c.db, "ALTER ROLE gpu3 LOGIN");
  for (int i = 0; i < 3; ++i) {
    c.host.push_back(std::make_unique<DaemonFixture>());
    std::string url = i == 2 ? fmt::format("postgresql://gpu3@127.0.0.1:{}/{}", pg->port(), c.db)
                             : pg->url(c.db);
    c.host.back()->daemon_toml = fmt::format(
        "store = \"{}\"\nhost = \"gpu{}\"\nhost_timeout = \"60s\"\nlease_heartbeat = \"5m\"\n", url, i + 1);
  }
  for (auto& h : c.host) h->start("");
  // host_timeout 60 s: the cut (about 10 s) is shorter than the half of it that a host keeps its
  // shared leases while cut off (self-fencing; a longer one: ClusterFenceE2E).
  DaemonFixture& gpu1 = c[0];
  DaemonFixture& gpu3 = c[2];
  auto held = post_lease(gpu1, {{"vram", "4GiB"}, {"host", "gpu3"}, {"label", "held"}}, "?wait=10s");
  ASSERT_TRUE(held) << held.error();
  uint64_t held_id = (*held)["id"];
  ASSERT_EQ((*held)["state"], "granted") << held->dump();
  ASSERT_EQ(stored(c, held_id), "gpu3:granted");

  // Cut: gpu3 may not log in, and its connection is ended.
  pg->psql(c.db, "ALTER ROLE gpu3 NOLOGIN");
  pg->psql(c.db, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = 'gpu3'");
  ASSERT_TRUE(eventually([&] { return !gpu3.status()["faults"].empty(); }, 20s)) << gpu3.log();
  // The other two keep granting (leases for any host, asked of gpu1 and gpu2).
  std::set<std::string> where;
  std::vector<uint64_t> during;
  for (int n = 0; n < 6; ++n) {
    auto l = post_lease(c[static_cast<size_t>(n % 2)], {{"vram", "1GiB"}, {"label", fmt::format("d{}", n)}},
                        "?wait=10s");
    ASSERT_TRUE(l) << l.error();
    ASSERT_EQ((*l)["state"], "granted") << l->dump();
    where.insert((*l)["host"].get<std::string>());
    during.push_back((*l)["id"]);
  }
  EXPECT_EQ(where.count("gpu3"), 0u);  // it cannot claim
  EXPECT_EQ(where.size(), 2u);
  // A lease named for gpu3 waits; its release asked of gpu1 waits for gpu3.
  auto named = post_lease(gpu1, {{"vram", "2GiB"}, {"host", "gpu3"}, {"label", "named"}});
  ASSERT_TRUE(named) << named.error();
  uint64_t named_id = (*named)["id"];
  auto d = http_request({gpu1.url}, "DELETE", fmt::format("/v1/leases/{}", held_id), "", 10000);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->status, 200u) << d->body;
  // gpu3 itself still holds what it granted, and acknowledges no new lease it cannot write.
  EXPECT_EQ(lease_at(gpu3, held_id).value("state", ""), "granted");
  auto refused = http_request({gpu3.url}, "POST", "/v1/leases",
                              json{{"vram", "1GiB"}, {"host", "gpu3"}, {"label", "refused"}}.dump(), 20000);
  ASSERT_TRUE(refused) << refused.error() << "\n" << gpu3.log();
  EXPECT_EQ(refused->status, 503u) << refused->body;
  std::this_thread::sleep_for(1s);
  EXPECT_EQ(stored(c, named_id), "gpu1:queued");
  EXPECT_EQ(stored(c, held_id), "gpu3:granted");

  // gpu3 may log in again: it resumes, without a restart.
  pg->psql(c.db, "ALTER ROLE gpu3 LOGIN");
  ASSERT_TRUE(eventually([&] { return gpu3.status()["faults"].empty(); }, 30s))
      << gpu3.status()["faults"].dump();
  EXPECT_TRUE(alive(gpu3));
  std::string s;
  EXPECT_TRUE(eventually([&] { return (s = stored(c, held_id)) == "ended:released"; }, 20s)) << s;
  EXPECT_TRUE(eventually([&] { return (s = stored(c, named_id)) == "gpu3:granted"; }, 20s)) << s;
  for (uint64_t id : during) EXPECT_NE(stored(c, id).find(":granted"), std::string::npos) << id;
  // The lease it refused is nowhere active.
  EXPECT_EQ(c.sql("SELECT COUNT(*) FROM leases WHERE (data::json)->'request'->>'label' = 'refused'"), "0");
  EXPECT_FALSE(events_of(gpu3, "backend.failed").empty());
  expect_store_sane(c);
}

TEST(ClusterFaultE2E, ARestartedHostGivesNoIdAgainThatMovedToAnotherHost) {
  // gpu1 has no room: what it queues, gpu2 claims.
  ClusterFixture c("ids", {22 * GiB, 400 * MiB}, "lease_heartbeat = \"5m\"\n");
  VRAMD_REQUIRE_POSTGRES(c.pg);
  DaemonFixture& gpu1 = c[0];
  DaemonFixture& gpu2 = c[1];
  std::set<uint64_t> given;
  // One claimed by gpu2 and ended there, one claimed by gpu2 and still granted there.
  for (const char* label : {"ended", "held"}) {
    auto l = post_lease(gpu1, {{"vram", "4GiB"}, {"label", label}}, "?wait=10s");
    ASSERT_TRUE(l) << l.error();
    ASSERT_EQ((*l)["state"], "granted") << l->dump();
    ASSERT_EQ((*l)["host"], "gpu2");
    given.insert((*l)["id"].get<uint64_t>());
  }
  uint64_t ended_id = *given.begin();
  auto d = http_request({gpu2.url}, "DELETE", fmt::format("/v1/leases/{}", ended_id), "", 10000);
  ASSERT_TRUE(d && d->status == 200);
  ASSERT_TRUE(eventually([&] { return stored(c, ended_id) == "ended:released"; })) << stored(c, ended_id);
  // Neither row is gpu1's any more.
  ASSERT_EQ(c.sql("SELECT COUNT(*) FROM leases WHERE host = 'gpu1'"), "0");
  ASSERT_EQ(c.sql("SELECT COUNT(*) FROM jobs WHERE host = 'gpu1'"), "0");
  gpu1.daemon->kill(SIGKILL);
  gpu1.start("");
  for (int n = 0; n < 3; ++n) {
    auto l = post_lease(gpu1, {{"vram", "1GiB"}, {"label", fmt::format("after{}", n)}});
    ASSERT_TRUE(l) << l.error();
    uint64_t id = (*l)["id"];
    EXPECT_TRUE(given.insert(id).second) << "lease id " << id << " given twice";
  }
  // The ended one still reads as itself from either host.
  EXPECT_EQ(lease_at(gpu1, ended_id).value("label", ""), "ended");
  EXPECT_EQ(lease_at(gpu2, ended_id).value("label", ""), "ended");
  expect_store_sane(c);
}

}  // namespace
}  // namespace vramd::testing
