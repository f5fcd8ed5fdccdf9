// One queue across hosts (issue 17, core/cluster.h): three real vramd processes on one real
// PostgreSQL, each on its own test GPU. No lease is granted twice under 20 concurrent clients (by
// the clients' own records); leases go to the host with room; a lease naming a host is granted
// only there; each host's reason is in a waiting lease's; a host killed with SIGKILL has its leases
// re-queued and granted elsewhere (or ended, as they asked); `vramd run` runs nothing for a lease
// granted on another host; with SQLite a lease for another host is refused.
#include <atomic>
#include <mutex>
#include <set>
#include <thread>

#include <gtest/gtest.h>

#include "integration/cluster_fixture.h"

namespace vramd::testing {
namespace {

TEST(ClusterE2E, TwentyClientsOnThreeHostsAndNoLeaseIsGrantedTwice) {
  // 8, 16 and 23.6 GiB free: room for 2, 4 and 5 leases of 4 GiB at once.
  Cluster c("twenty", {16 * GiB, 8 * GiB, 400 * MiB});
  VRAMD_REQUIRE_POSTGRES(c.pg);
  const std::map<std::string, int> room = {{"gpu1", 2}, {"gpu2", 4}, {"gpu3", 5}};
  std::mutex mu;
  std::map<uint64_t, std::set<std::string>> seen;  // lease id -> hosts a client saw it granted on
  std::map<std::string, int> holding, most;        // per host: held now / most at once (clients)
  std::vector<std::string> errors;
  std::atomic<int> done{0};
  std::vector<std::thread> clients;
  for (int t = 0; t < 20; ++t) {
    clients.emplace_back([&, t] {
      const DaemonFixture& asked = c.host[t % 3];
      for (int n = 0; n < 4; ++n) {
        auto l = post_lease(asked, {{"vram", "4GiB"}, {"label", fmt::format("c{}-{}", t, n)}});
        if (!l) {
          std::lock_guard lock(mu);
          errors.push_back(l.error());
          return;
        }
        uint64_t id = (*l)["id"];
        json now = *l;
        for (int polls = 0; now.value("state", "") == "queued" && polls < 200; ++polls)
          now = lease_at(asked, id, "2s");
        if (now.value("state", "") != "granted") {
          std::lock_guard lock(mu);
          errors.push_back(fmt::format("lease {} never granted: {}", id, now.dump()));
          return;
        }
        std::string where = now["host"];
        // The host that holds it says so too (and it is the one the asked host named).
        json there = lease_at(c.by_name(where), id);
        {
          std::lock_guard lock(mu);
          seen[id].insert(where);
          if (there.value("state", "") == "granted") seen[id].insert(there.value("host", "?"));
          most[where] = std::max(most[where], ++holding[where]);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20 * (t % 4)));
        {
          std::lock_guard lock(mu);
          --holding[where];
        }
        auto d = http_request({c.by_name(where).url}, "DELETE", fmt::format("/v1/leases/{}", id),
                              "", 10000);
        if (!d || d->status != 200) {
          std::lock_guard lock(mu);
          errors.push_back(fmt::format("release of {} on {} failed", id, where));
        }
      }
      ++done;
    });
  }
  for (auto& t : clients) t.join();
  EXPECT_TRUE(errors.empty()) << errors.front();
  EXPECT_EQ(done, 20);
  EXPECT_EQ(seen.size(), 80u);  // 80 distinct ids
  std::set<std::string> used_hosts;
  for (const auto& [id, hosts] : seen) {
    EXPECT_EQ(hosts.size(), 1u) << "lease " << id << " seen granted on several hosts";
    used_hosts.insert(*hosts.begin());
  }
  // Clients see a grant after it is made and let go before it ends: what they held at once is
  // at most what was granted at once, which must fit each host.
  for (const auto& [host, n] : most) EXPECT_LE(n, room.at(host)) << host;
  EXPECT_EQ(used_hosts.size(), 3u);  // every host took some
  // The store's word: one grant event per lease, across the three hosts.
  EXPECT_TRUE(eventually([&] {  // events are written behind the loop
    return c.pg->psql(c.db, "SELECT COUNT(*) FROM events WHERE type = 'lease.granted'") == "80";
  })) << c.pg->psql(c.db, "SELECT COUNT(*) FROM events WHERE type = 'lease.granted'");
  EXPECT_EQ(c.pg->psql(c.db, "SELECT COUNT(*) FROM (SELECT subject FROM events WHERE type = "
                             "'lease.granted' GROUP BY subject HAVING COUNT(*) > 1) AS twice"),
            "0");
}

TEST(ClusterE2E, LeasesGoWhereThereIsRoomANamedHostOnlyThereAndTheReasonNamesEachHost) {
  Cluster c("room", {22 * GiB, 22 * GiB, 400 * MiB});
  VRAMD_REQUIRE_POSTGRES(c.pg);
  DaemonFixture& gpu1 = c.host[0];
  // Asked of gpu1, which has no room: granted on gpu3.
  auto a = post_lease(gpu1, {{"vram", "8GiB"}, {"label", "flux"}});
  ASSERT_TRUE(a) << a.error();
  uint64_t a_id = (*a)["id"];
  json a_now = lease_at(gpu1, a_id, "10s");
  ASSERT_EQ(a_now["state"], "granted") << a_now.dump(2);
  EXPECT_EQ(a_now["host"], "gpu3");
  EXPECT_EQ(a_now["elsewhere"], true);
  EXPECT_EQ(lease_at(c.host[2], a_id)["state"], "granted");
  EXPECT_EQ(lease_at(c.host[2], a_id)["elsewhere"], false);

  // Named gpu2 (full): waits, though gpu3 has room; the reason is gpu2's alone.
  auto b = post_lease(gpu1, {{"vram", "8GiB"}, {"host", "gpu2"}, {"label", "named"}});
  ASSERT_TRUE(b) << b.error();
  uint64_t b_id = (*b)["id"];
  // Too big for any host now: every host says why.
  auto big = post_lease(gpu1, {{"vram", "20GiB"}, {"label", "big"}});
  ASSERT_TRUE(big) << big.error();
  uint64_t big_id = (*big)["id"];
  std::string why;
  ASSERT_TRUE(eventually([&] {
    why = lease_at(gpu1, big_id)["reason"].value("text", "");
    return why.find("gpu1: needs 20.0 GiB") != std::string::npos &&
           why.find("gpu2: needs 20.0 GiB") != std::string::npos &&
           why.find("gpu3: needs 20.0 GiB") != std::string::npos;
  })) << why;
  EXPECT_NE(why.find("free of 24.0 GiB"), std::string::npos) << why;
  std::string named_why;
  ASSERT_TRUE(eventually([&] {
    named_why = lease_at(gpu1, b_id)["reason"].value("text", "");
    return named_why.find("gpu2: needs 8.0 GiB") != std::string::npos;
  })) << named_why;
  EXPECT_EQ(named_why.find("gpu3"), std::string::npos) << named_why;
  EXPECT_EQ(lease_at(gpu1, b_id)["state"], "queued");
  EXPECT_EQ(lease_at(gpu1, b_id)["host_requested"], "gpu2");

  // gpu2 frees its memory: the named lease is granted there (and only there).
  set_used(c.host[1], 400 * MiB);
  json b_now;
  ASSERT_TRUE(eventually([&] {
    b_now = lease_at(gpu1, b_id);
    return b_now.value("state", "") == "granted";
  })) << b_now.dump(2);
  EXPECT_EQ(b_now["host"], "gpu2");
  // 20 GiB fits nowhere yet (gpu2 and gpu3 each have 15.6 GiB left).
  EXPECT_EQ(lease_at(gpu1, big_id)["state"], "queued");
  // Released from the API of the host that queued it: the holder ends it.
  auto d = http_request({gpu1.url}, "DELETE", fmt::format("/v1/leases/{}", a_id), "", 10000);
  ASSERT_TRUE(d && d->status == 200);
  ASSERT_TRUE(eventually([&] {
    json j = lease_at(c.host[2], a_id);
    return j.value("state", "") == "released";
  })) << lease_at(c.host[2], a_id).dump(2);
  // ... and the big lease now fits gpu3.
  json big_now;
  ASSERT_TRUE(eventually([&] {
    big_now = lease_at(gpu1, big_id);
    return big_now.value("state", "") == "granted";
  })) << big_now.dump(2);
  EXPECT_EQ(big_now["host"], "gpu3");

  // `vramd run` against gpu1 for a lease granted on gpu2: told, not run.
  TempDir cli;
  std::string marker = cli.file("ran");
  CliResult out = run_cli({"run", "--url", gpu1.url, "--vram", "2GiB", "--host", "gpu2", "--",
                           "touch", marker},
                          {}, cli);
  EXPECT_EQ(out.code, 0) << out.err;
  EXPECT_NE(out.out.find("granted on host gpu2"), std::string::npos) << out.out << out.err;
  EXPECT_NE(out.err.find("the command is not run"), std::string::npos) << out.err;
  EXPECT_FALSE(std::filesystem::exists(marker));
  // The same asked of gpu2 itself runs there.
  CliResult here = run_cli({"run", "--url", c.host[1].url, "--vram", "2GiB", "--host", "gpu2",
                            "--", "touch", marker},
                           {}, cli);
  EXPECT_EQ(here.code, 0) << here.err;
  EXPECT_TRUE(std::filesystem::exists(marker));

  // A lease's on_host_lost is one of the two.
  auto bad = http_request({gpu1.url}, "POST", "/v1/leases",
                          json{{"vram", "1GiB"}, {"on_host_lost", "sometimes"}}.dump(), 5000);
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400u) << bad->body;
}

TEST(ClusterE2E, AHostKilledWithSigkillHasItsLeasesRequeuedAndGrantedElsewhere) {
  Cluster c("lost", {22 * GiB, 22 * GiB, 400 * MiB});
  VRAMD_REQUIRE_POSTGRES(c.pg);
  DaemonFixture& gpu1 = c.host[0];
  auto keep = post_lease(gpu1, {{"vram", "8GiB"}, {"label", "keep"}});
  auto end = post_lease(gpu1, {{"vram", "8GiB"}, {"label", "end"}, {"on_host_lost", "end"}});
  ASSERT_TRUE(keep && end);
  uint64_t keep_id = (*keep)["id"], end_id = (*end)["id"];
  for (uint64_t id : {keep_id, end_id}) {
    json j = lease_at(gpu1, id, "10s");
    ASSERT_EQ(j.value("state", ""), "granted") << j.dump(2);
    ASSERT_EQ(j["host"], "gpu3");
  }
  // Queued in gpu3's keeping (it fits nowhere now: gpu3 has 7.6 GiB left, the others 2 GiB).
  auto waiting = post_lease(c.host[2], {{"vram", "10GiB"}, {"label", "waiting"}});
  ASSERT_TRUE(waiting) << waiting.error();
  uint64_t waiting_id = (*waiting)["id"];
  ASSERT_EQ((*waiting)["state"], "queued");
  c.host[2].daemon->kill(SIGKILL);
  // Past host_timeout one live host takes care of gpu3's leases; only then is there room.
  ASSERT_TRUE(eventually(
      [&] { return !events_of(c.host[0], "host.lost").empty() || !events_of(c.host[1], "host.lost").empty(); },
      std::chrono::seconds(30)));
  set_used(c.host[1], 400 * MiB);  // room on gpu2 now
  json k;
  ASSERT_TRUE(eventually(
      [&] {
        k = lease_at(gpu1, keep_id);
        return k.value("state", "") == "granted" && k.value("host", "") == "gpu2";
      },
      std::chrono::seconds(30)))
      << k.dump(2);
  // The lease gpu3 kept queued is kept by a live host now, and granted where there is room.
  json w;
  ASSERT_TRUE(eventually(
      [&] {
        w = lease_at(gpu1, waiting_id);
        return w.value("state", "") == "granted";
      },
      std::chrono::seconds(30)))
      << w.dump(2);
  EXPECT_EQ(w["host"], "gpu2");
  json e = lease_at(gpu1, end_id);
  EXPECT_EQ(e.value("state", ""), "released") << e.dump(2);
  EXPECT_NE(e.value("end_reason", "").find("host gpu3 lost"), std::string::npos) << e.dump(2);
  // One live host took care of it, and said so.
  int lost_events = 0;
  std::multiset<std::string> requeued;
  for (auto* f : {&c.host[0], &c.host[1]}) {
    lost_events += static_cast<int>(events_of(*f, "host.lost").size());
    for (const auto& ev : events_of(*f, "lease.requeued")) requeued.insert(ev["subject"]);
  }
  EXPECT_EQ(lost_events, 1);
  // The granted one, queued again; the queued one, kept by the live host.
  EXPECT_EQ(requeued, (std::multiset<std::string>{fmt::format("keep#{}", keep_id),
                                                  fmt::format("waiting#{}", waiting_id)}));
  // The view of every host shows gpu3 lost.
  TempDir cli;
  CliResult out = run_cli({"status", "--all-hosts", "--url", gpu1.url}, {}, cli);
  EXPECT_NE(out.out.find("== gpu3 (lost"), std::string::npos) << out.out;

  // gpu3 comes back: the lease re-queued away from it is not its own any more.
  c.host[2].start("");
  ASSERT_TRUE(eventually([&] { return lease_at(c.host[2], keep_id).value("host", "") == "gpu2"; }))
      << lease_at(c.host[2], keep_id).dump(2);
  EXPECT_EQ(c.pg->psql(c.db, fmt::format("SELECT COUNT(*) FROM leases WHERE id = {}", keep_id)),
            "1");
}

TEST(ClusterE2E, WithSqliteALeaseForAnotherHostIsRefused) {
  DaemonFixture f;
  f.daemon_toml = "host = \"gpu1\"\n";
  f.start("");
  auto r = http_request({f.url}, "POST", "/v1/leases", json{{"vram", "1GiB"}, {"host", "gpu2"}}.dump(),
                        5000);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400u);
  EXPECT_NE(r->body.find("knows only this host ('gpu1')"), std::string::npos) << r->body;
  auto ok = http_request({f.url}, "POST", "/v1/leases",
                         json{{"vram", "1GiB"}, {"host", "gpu1"}}.dump(), 5000);
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 201u) << ok->body;
  auto any = http_request({f.url}, "POST", "/v1/leases", json{{"vram", "1GiB"}, {"host", "any"}}.dump(),
                          5000);
  ASSERT_TRUE(any);
  EXPECT_EQ(any->status, 201u) << any->body;
}

}  // namespace
}  // namespace vramd::testing
