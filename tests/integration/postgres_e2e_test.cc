// The real vramd binary on a real PostgreSQL store (issue 17): three hosts on one database, each on
// its own test GPU; the view of every host; leases that survive a kill -9 of vramd and a restart
// of PostgreSQL under load, none acknowledged and then lost, none granted twice.
#include <atomic>
#include <mutex>
#include <set>
#include <thread>

#include <gtest/gtest.h>

#include "integration/daemon_fixture.h"
#include "integration/postgres_server.h"

namespace vramd::testing {
namespace {

// A daemon on its own test GPU whose store is database `db` of the test's PostgreSQL.
void use_postgres(DaemonFixture& f, PostgresServer& pg, const std::string& db,
                  const std::string& host, const std::string& more = "") {
  f.daemon_toml = fmt::format("store = \"{}\"\nhost = \"{}\"\n{}", pg.url(db), host, more);
}

json hosts_of(const DaemonFixture& f) { return get(f, "/v1/hosts"); }

const json* host_row(const json& hosts, const std::string& name) {
  if (!hosts.contains("hosts") || !hosts["hosts"].is_array()) return nullptr;
  for (const auto& h : hosts["hosts"])
    if (h["host"] == name) return &h;
  return nullptr;
}

TEST(PostgresE2E, ThreeHostsOnOneDatabaseEachSeeAllThreeAndALostOne) {
  PostgresServer* pg = PostgresServer::get();
  VRAMD_REQUIRE_POSTGRES(pg);
  std::string db = pg->create_database("hosts");
  DaemonFixture a, b, c;
  int i = 0;
  for (DaemonFixture* f : {&a, &b, &c})
    use_postgres(*f, *pg, db, fmt::format("gpu{}", ++i), "host_timeout = \"3s\"\n");
  for (DaemonFixture* f : {&a, &b, &c}) f->start("");
  EXPECT_EQ(a.status()["host"], "gpu1");
  EXPECT_EQ(c.status()["host"], "gpu3");
  // A lease names the host that holds it; events too (this one may be granted only on gpu2).
  auto r = http_request({b.url}, "POST", "/v1/leases",
                        json{{"vram", "1GiB"}, {"host", "gpu2"}}.dump(), 5000);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->status, 201u) << r->body;
  EXPECT_EQ(json::parse(r->body)["host"], "gpu2");
  ASSERT_TRUE(eventually([&] { return !events_of(b, "lease.granted").empty(); }));
  EXPECT_EQ(events_of(b, "lease.granted")[0]["host"], "gpu2");
  EXPECT_TRUE(events_of(a, "lease.granted").empty());  // each host's own events

  // Every host's snapshot, read from any of them.
  ASSERT_TRUE(eventually([&] {
    json h = hosts_of(a);
    for (const char* name : {"gpu1", "gpu2", "gpu3"}) {
      const json* row = host_row(h, name);
      // A snapshot written after the host's first sample.
      if (!row || (*row)["state"] != "up" || !(*row)["status"].is_object() ||
          (*row)["status"].value("sampled_at", json(nullptr)).is_null())
        return false;
    }
    return true;
  })) << hosts_of(a).dump(2);
  json h = hosts_of(c);
  ASSERT_TRUE(host_row(h, "gpu2"));
  EXPECT_EQ((*host_row(h, "gpu2"))["status"]["host"], "gpu2");
  json gpus = (*host_row(h, "gpu2"))["status"].value("gpus", json::array());
  ASSERT_EQ(gpus.size(), 1u) << h.dump(2);
  EXPECT_EQ(gpus[0].value("total_bytes", Bytes{0}), 24 * GiB);
  ASSERT_TRUE(eventually([&] {
    json h2 = hosts_of(a);
    const json* row = host_row(h2, "gpu2");
    return row && !(*row)["status"].value("leases", json::array()).empty();
  })) << hosts_of(a).dump(2);

  // `vramd status --all-hosts` prints all three.
  TempDir cli;
  CliResult out = run_cli({"status", "--all-hosts", "--url", a.url}, {}, cli);
  EXPECT_EQ(out.code, 0) << out.err;
  for (const char* name : {"== gpu1 (up", "== gpu2 (up", "== gpu3 (up"})
    EXPECT_NE(out.out.find(name), std::string::npos) << out.out;

  // A host killed with SIGKILL stops beating: past host_timeout it reads as lost.
  c.daemon->kill(SIGKILL);
  ASSERT_TRUE(eventually(
      [&] {
        json h3 = hosts_of(a);
        const json* row = host_row(h3, "gpu3");
        return row && (*row)["state"] == "lost";
      },
      std::chrono::seconds(20)))
      << hosts_of(a).dump(2);
  json last = hosts_of(a);
  const json* up = host_row(last, "gpu1");
  ASSERT_TRUE(up);
  EXPECT_EQ((*up)["state"], "up");
}

TEST(PostgresE2E, NoAcknowledgedLeaseIsLostAcrossAServerRestartUnderLoadAndAKillDashNine) {
  PostgresServer* pg = PostgresServer::get();
  VRAMD_REQUIRE_POSTGRES(pg);
  std::string db = pg->create_database("load");
  DaemonFixture f;
  use_postgres(f, *pg, db, "gpu1");
  f.start("");

  // 20 clients take 512 MiB leases and release every other one, while PostgreSQL is stopped and
  // started again under them.
  std::mutex mu;
  std::map<uint64_t, std::string> kept;  // acknowledged and not released: id -> state answered
  std::set<uint64_t> released;
  std::atomic<bool> stop{false};
  std::atomic<int> acked{0}, refused{0};
  std::vector<std::thread> clients;
  for (int t = 0; t < 20; ++t) {
    clients.emplace_back([&, t] {
      for (int n = 0; !stop; ++n) {
        json body = {{"vram", "512MiB"}, {"label", fmt::format("c{}-{}", t, n)}};
        auto r = http_request({f.url}, "POST", "/v1/leases", body.dump(), 20000);
        if (!r || r->status != 201) {
          ++refused;  // not acknowledged (the store was down): nothing is promised
          std::this_thread::sleep_for(std::chrono::milliseconds(50));
          continue;
        }
        json l = json::parse(r->body);
        uint64_t id = l["id"];
        ++acked;
        bool release = n % 2 == 0;
        if (release) {
          auto d = http_request({f.url}, "DELETE", fmt::format("/v1/leases/{}", id), "", 20000);
          std::lock_guard lock(mu);
          if (d && d->status == 200) released.insert(id);
          else kept[id] = l["state"];
        } else {
          std::lock_guard lock(mu);
          kept[id] = l["state"];
        }
      }
    });
  }
  ASSERT_TRUE(eventually([&] { return acked >= 40; }, std::chrono::seconds(30)));
  ASSERT_TRUE(pg->stop());
  int acked_before = acked;
  std::this_thread::sleep_for(std::chrono::seconds(2));
  ASSERT_TRUE(pg->start());
  // The daemon sees the store work again, and takes leases again.
  EXPECT_TRUE(eventually([&] { return acked >= acked_before + 40; }, std::chrono::seconds(60)));
  stop = true;
  for (auto& c : clients) c.join();
  ASSERT_TRUE(eventually([&] { return f.status()["faults"].empty(); }, std::chrono::seconds(20)))
      << f.status()["faults"].dump();
  EXPECT_FALSE(events_of(f, "backend.failed").empty());  // the outage was seen

  // kill -9 vramd: every lease a client heard of is still there, as the client heard it or later.
  f.daemon->kill(SIGKILL);
  f.start("");
  size_t live = 0;
  for (const auto& [id, state] : kept) {
    json l = get(f, fmt::format("/v1/leases/{}", id));
    ASSERT_TRUE(l.contains("state")) << "lease " << id << " acknowledged as " << state << " is lost";
    if (l["state"] == "queued" || l["state"] == "granted") ++live;
  }
  for (uint64_t id : released) {
    json l = get(f, fmt::format("/v1/leases/{}", id));
    ASSERT_TRUE(l.contains("state")) << "released lease " << id << " is lost";
    // Released when granted, cancelled when still queued.
    EXPECT_TRUE(l["state"] == "released" || l["state"] == "cancelled") << l.dump();
  }
  EXPECT_GT(kept.size(), 0u);
  EXPECT_GT(released.size(), 0u);
  // No lease granted twice, over both lives of the daemon and the server's restart.
  EXPECT_EQ(pg->psql(db, "SELECT COUNT(*) FROM (SELECT subject FROM events WHERE type = "
                         "'lease.granted' GROUP BY subject HAVING COUNT(*) > 1) AS twice"),
            "0");
  // What the store holds is what the daemon says.
  EXPECT_EQ(pg->psql(db, "SELECT COUNT(*) FROM leases WHERE host = 'gpu1'"),
            std::to_string(get(f, "/v1/leases")["leases"].size()));
  RecordProperty("acknowledged", static_cast<int>(acked));
  RecordProperty("refused", static_cast<int>(refused));
  std::cerr << fmt::format("{} acknowledged ({} still live), {} released, {} refused while down\n",
                           static_cast<int>(acked), live, released.size(),
                           static_cast<int>(refused));
}

TEST(PostgresE2E, AStoreThatCannotBeReachedAtStartIsAClearErrorNamingIt) {
  DaemonFixture f;
  int port = free_port();
  f.daemon_toml = fmt::format("store = \"postgresql://vramd:hunter2@127.0.0.1:{}/nope\"\n", port);
  std::ofstream(f.dir.file("vramd.toml")) << fmt::format(
      "[daemon]\nlisten = \"127.0.0.1:{}\"\nstate_dir = \"{}\"\n{}\n[gpu]\nbackend = \"nvml\"\n",
      f.port, f.dir.path(), f.daemon_toml);
  Child d({vramd_bin(), "serve", "--config", f.dir.file("vramd.toml")}, f.env(), f.dir.file("daemon.log"));
  int st = d.wait_exit(std::chrono::seconds(30));
  ASSERT_NE(st, -1) << "vramd did not exit: " << f.log();
  EXPECT_NE(WEXITSTATUS(st), 0);
  EXPECT_NE(f.log().find("cannot connect to PostgreSQL"), std::string::npos) << f.log();
  EXPECT_NE(f.log().find(fmt::format("vramd:***@127.0.0.1:{}/nope", port)), std::string::npos)
      << f.log();
  EXPECT_EQ(f.log().find("hunter2"), std::string::npos) << f.log();
}

}  // namespace
}  // namespace vramd::testing
