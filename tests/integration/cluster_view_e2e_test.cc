// One view of every host (issue 17, item 4): three real vramd processes on one real PostgreSQL.
// `GET /v1/leases?host=all` from any host lists every host's leases, each once and under the host
// whose row it is; `?host=NAME` one host's; the default stays this host's; an unknown host is a
// 400 that names the known ones; a lease of a host killed with SIGKILL is listed where it went;
// with SQLite `all` is this host. `vramd leases --all-hosts` prints them with their hosts. And the
// dashboard's all-hosts overview and host switcher in Debian's chromium
// (tests/browser/cluster.test.mjs, run from here on the cluster this test sets up).
#include <cstdlib>
#include <fstream>
#include <set>

#include <sys/wait.h>

#include <gtest/gtest.h>

#include "integration/cluster_fixture.h"
#include "integration/daemon_fixture.h"
#include "integration/postgres_server.h"
#include "testgpu/fake_gpu_state.h"

namespace vramd::testing {
namespace {

// Three hosts gpu1..gpu3 on database `db`, a 3 s host_timeout; `services[i]`: host i's services.
struct ViewCluster {
  PostgresServer* pg = PostgresServer::get();
  std::string db;
  DaemonFixture host[3];
  explicit ViewCluster(const std::string& name, const std::vector<Bytes>& used) {
    if (!pg) return;
    db = pg->create_database(name);
    for (int i = 0; i < 3; ++i) {
      set_used(host[i], used[static_cast<size_t>(i)]);
      host[i].daemon_toml = fmt::format(
          "store = \"{}\"\nhost = \"gpu{}\"\nhost_timeout = \"3s\"\nlease_heartbeat = \"5m\"\n",
          pg->url(db), i + 1);
    }
  }
  void start(const std::vector<std::string>& services = {"", "", ""}) {
    for (int i = 0; i < 3; ++i) host[i].start(services[static_cast<size_t>(i)]);
  }
};

// GET /v1/leases?host=... as id -> lease.
std::map<uint64_t, json> leases_of(const DaemonFixture& f, const std::string& host) {
  std::map<uint64_t, json> out;
  json body = get(f, host.empty() ? "/v1/leases" : "/v1/leases?host=" + host);
  for (const auto& l : body.value("leases", json::array())) out[l["id"].get<uint64_t>()] = l;
  return out;
}

TEST(ClusterViewE2E, EveryHostsLeasesFromAnyHostEachOnceUnderItsHost) {
  // gpu1 full, gpu2 with 8 GiB free, gpu3 with 23.6 GiB free.
  ViewCluster c("view", {22 * GiB, 16 * GiB, 400 * MiB});
  VRAMD_REQUIRE_POSTGRES(c.pg);
  c.start();
  DaemonFixture &gpu1 = c.host[0], &gpu2 = c.host[1], &gpu3 = c.host[2];
  // Asked of gpu1, named gpu2: granted on gpu2.
  auto on2 = post_lease(gpu1, {{"vram", "6GiB"}, {"label", "on2"}, {"host", "gpu2"}});
  // Asked of gpu3 itself, for any host: 10 GiB fits only gpu3.
  auto on3 = post_lease(gpu3, {{"vram", "10GiB"}, {"label", "on3"}});
  // Asked of gpu2, named gpu1 (full): queued, kept by gpu2, with gpu1's reason.
  auto waits = post_lease(gpu2, {{"vram", "8GiB"}, {"label", "waits"}, {"host", "gpu1"}});
  ASSERT_TRUE(on2 && on3 && waits);
  uint64_t on2_id = (*on2)["id"], on3_id = (*on3)["id"], waits_id = (*waits)["id"];
  ASSERT_EQ(lease_at(gpu1, on2_id, "10s").value("state", ""), "granted");
  ASSERT_EQ(lease_at(gpu3, on3_id, "10s").value("state", ""), "granted");
  ASSERT_EQ(lease_at(gpu1, on2_id)["host"], "gpu2");
  ASSERT_EQ(lease_at(gpu3, on3_id)["host"], "gpu3");
  std::string why;
  ASSERT_TRUE(eventually([&] {
    why = lease_at(gpu2, waits_id)["reason"].value("text", "");
    return why.find("gpu1: needs 8.0 GiB") != std::string::npos;
  })) << why;

  const std::map<uint64_t, std::pair<std::string, std::string>> want = {
      {on2_id, {"gpu2", "granted"}}, {on3_id, {"gpu3", "granted"}}, {waits_id, {"gpu2", "queued"}}};
  for (auto* from : {&gpu1, &gpu2, &gpu3}) {
    SCOPED_TRACE(from->url);
    std::map<uint64_t, json> all = leases_of(*from, "all");
    ASSERT_EQ(all.size(), 3u) << get(*from, "/v1/leases?host=all").dump(2);
    for (const auto& [id, where] : want) {
      ASSERT_TRUE(all.count(id)) << id;
      const json& l = all[id];
      EXPECT_EQ(l["host"], where.first) << l.dump(2);
      EXPECT_EQ(l["state"], where.second) << l.dump(2);
      // Held (or kept) by another host than the one asked: said so.
      bool here = from->url == c.host[where.first.back() - '1'].url;
      EXPECT_EQ(l["elsewhere"], !here) << l.dump(2);
      EXPECT_EQ(l["vram_bytes"], id == on2_id ? 6 * GiB : id == on3_id ? 10 * GiB : 8 * GiB);
    }
    // The queued one's reason is the store's: gpu1's word on it, from whichever host asked.
    EXPECT_NE(all[waits_id]["reason"].value("text", "").find("gpu1: needs 8.0 GiB"), std::string::npos)
        << all[waits_id].dump(2);
    EXPECT_EQ(all[waits_id]["host_requested"], "gpu1");
    // In order: by host, then id.
    json body = get(*from, "/v1/leases?host=all");
    std::vector<std::pair<std::string, uint64_t>> order;
    for (const auto& l : body["leases"]) order.emplace_back(l["host"], l["id"]);
    EXPECT_TRUE(std::is_sorted(order.begin(), order.end())) << body.dump(2);
    // One host's: only its own.
    std::map<uint64_t, json> two = leases_of(*from, "gpu2");
    EXPECT_EQ(two.size(), 2u);
    EXPECT_TRUE(two.count(on2_id) && two.count(waits_id));
    for (const auto& [id, l] : two) EXPECT_EQ(l["host"], "gpu2");
  }
  // The default is this host's, as before: gpu1 holds and keeps none of them.
  EXPECT_TRUE(leases_of(gpu1, "").empty()) << get(gpu1, "/v1/leases").dump(2);
  EXPECT_EQ(leases_of(gpu2, "").size(), 2u);
  EXPECT_EQ(leases_of(gpu2, "gpu2").size(), 2u);  // this host by name: the same
  // What only the holding host knows comes from its snapshot: the CUDA_VISIBLE_DEVICES of
  // gpu2's GPU for the lease granted there, as gpu2 says it.
  json cuda = lease_at(gpu2, on2_id)["gpu_cuda_visible_devices"];
  ASSERT_TRUE(cuda.is_string()) << lease_at(gpu2, on2_id).dump(2);
  EXPECT_TRUE(eventually([&] { return leases_of(gpu1, "all")[on2_id]["gpu_cuda_visible_devices"] == cuda; }))
      << leases_of(gpu1, "all")[on2_id].dump(2);

  // An unknown host: 400, naming the hosts there are.
  auto bad = http_request({gpu1.url}, "GET", "/v1/leases?host=gpu9", "", 5000);
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400u);
  EXPECT_NE(bad->body.find("no host named 'gpu9'"), std::string::npos) << bad->body;
  EXPECT_NE(bad->body.find("gpu1, gpu2, gpu3"), std::string::npos) << bad->body;
  auto empty = http_request({gpu1.url}, "GET", "/v1/leases?host=", "", 5000);
  ASSERT_TRUE(empty);
  EXPECT_EQ(empty->status, 400u) << empty->body;

  // The CLI: every host's, with a HOST column; one host's.
  TempDir cli;
  CliResult out = run_cli({"leases", "--all-hosts", "--url", gpu1.url}, {}, cli);
  ASSERT_EQ(out.code, 0) << out.err;
  EXPECT_NE(out.out.find("HOST"), std::string::npos) << out.out;
  for (const auto& [id, where] : want) {
    std::string row = fmt::format("{:<12} {:>5}  ", where.first, id);
    EXPECT_NE(out.out.find(row), std::string::npos) << row << "\n" << out.out;
  }
  CliResult one = run_cli({"leases", "--host", "gpu3", "--url", gpu1.url}, {}, cli);
  ASSERT_EQ(one.code, 0) << one.err;
  EXPECT_NE(one.out.find(fmt::format("gpu3         {:>5}  on3", on3_id)), std::string::npos) << one.out;
  EXPECT_EQ(one.out.find("gpu2"), std::string::npos) << one.out;
  CliResult unknown = run_cli({"leases", "--host", "gpu9", "--url", gpu1.url}, {}, cli);
  EXPECT_NE(unknown.code, 0);
  EXPECT_NE(unknown.err.find("no host named 'gpu9'"), std::string::npos) << unknown.err << unknown.out;
  CliResult mine = run_cli({"leases", "--url", gpu2.url}, {}, cli);
  EXPECT_EQ(mine.out.find("HOST"), std::string::npos) << mine.out;  // as before
}

TEST(ClusterViewE2E, ALeaseOfAKilledHostIsListedOnceWhereItWent) {
  ViewCluster c("viewlost", {22 * GiB, 22 * GiB, 400 * MiB});
  VRAMD_REQUIRE_POSTGRES(c.pg);
  c.start();
  DaemonFixture& gpu1 = c.host[0];
  auto moved = post_lease(gpu1, {{"vram", "8GiB"}, {"label", "moved"}});
  ASSERT_TRUE(moved) << moved.error();
  uint64_t id = (*moved)["id"];
  ASSERT_EQ(lease_at(gpu1, id, "10s").value("state", ""), "granted");
  ASSERT_EQ(leases_of(gpu1, "all")[id]["host"], "gpu3");
  c.host[2].daemon->kill(SIGKILL);
  set_used(c.host[1], 400 * MiB);  // room on gpu2 once gpu3's leases are re-queued
  json l;
  ASSERT_TRUE(eventually(
      [&] {
        auto all = leases_of(gpu1, "all");
        l = all.count(id) ? all[id] : json();
        return all.size() == 1 && l.value("host", "") == "gpu2" && l.value("state", "") == "granted";
      },
      std::chrono::seconds(40)))
      << get(gpu1, "/v1/leases?host=all").dump(2);
  // Asked of the host that now holds it: its own, from its Arbiter, listed once.
  auto there = leases_of(c.host[1], "all");
  EXPECT_EQ(there.size(), 1u);
  EXPECT_EQ(there[id]["elsewhere"], false);
  EXPECT_TRUE(leases_of(gpu1, "gpu3").empty());  // the lost host is still known, with none
}

TEST(ClusterViewE2E, WithSqliteAllIsThisHostAndAnotherHostIsRefused) {
  DaemonFixture f;
  f.daemon_toml = "host = \"solo\"\n";
  f.start("");
  auto l = http_request({f.url}, "POST", "/v1/leases", json{{"vram", "1GiB"}, {"label", "x"}}.dump(), 5000);
  ASSERT_TRUE(l && l->status == 201) << (l ? l->body : l.error());
  auto mine = leases_of(f, "");
  ASSERT_EQ(mine.size(), 1u);
  auto all = leases_of(f, "all");
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all.begin()->second["host"], "solo");
  EXPECT_EQ(all.begin()->second["elsewhere"], false);
  EXPECT_EQ(leases_of(f, "solo").size(), 1u);
  auto other = http_request({f.url}, "GET", "/v1/leases?host=gpu2", "", 5000);
  ASSERT_TRUE(other);
  EXPECT_EQ(other->status, 400u);
  EXPECT_NE(other->body.find("(hosts: solo; or all)"), std::string::npos) << other->body;
}

// Runs tests/browser/cluster.test.mjs for `phase` with `expect` (its JSON); its exit status, and
// its output in `out`. node, chromium and playwright-core's folder are found at configure time
// (cmake/browser_tests.cmake).
int run_browser(const std::string& phase, const json& expect, const TempDir& dir, std::string& out) {
  namespace paths = vramd::test_paths;
  if (paths::browser_node().empty() || paths::browser_chromium().empty()) {
    out = "SKIPPED: node or chromium was not found when the build was configured (make deps)";
    return 77;
  }
  std::string file = dir.file("expect-" + phase + ".json");
  std::ofstream(file) << expect.dump(2);
  std::string log = dir.file("browser-" + phase + ".log");
  std::string cmd = fmt::format(
      "'{}' '{}/tests/browser/cluster.test.mjs' --phase {} --expect '{}' --node-modules '{}' "
      "--chromium '{}' --screenshots '{}/screenshots' >'{}' 2>&1",
      paths::browser_node(), paths::source_dir(), phase, file, paths::browser_modules(),
      paths::browser_chromium(), paths::build_dir(), log);
  int status = std::system(cmd.c_str());
  out = slurp(log);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

TEST(ClusterViewE2E, TheDashboardShowsEveryHostAndActsOnlyOnItsOwn) {
  ViewCluster c("viewdash", {400 * MiB, 400 * MiB, 400 * MiB});
  VRAMD_REQUIRE_POSTGRES(c.pg);
  FakeService comfy(c.host[0], "comfyui", {"--model-bytes", "12GiB"});
  FakeService ollama(c.host[1], "ollama", {"--model-bytes", "5GiB", "--model", "llama3.1:8b"});
  FakeService vllm(c.host[2], "vllm", {"--model-bytes", "6GiB", "--model", "Qwen/Qwen2.5-7B"});
  auto service = [](const char* name, const char* kind, const FakeService& f) {
    return fmt::format("[services.{}]\nkind = \"{}\"\nurl = \"{}\"\n", name, kind, f.url());
  };
  c.start({service("comfyui", "comfyui", comfy), service("ollama", "ollama", ollama),
           service("vllm", "vllm", vllm)});
  DaemonFixture &gpu1 = c.host[0], &gpu3 = c.host[2];
  // gpu2 holds one (asked of gpu1); gpu3 holds one and keeps one queued for gpu1 (no room there).
  auto on2 = post_lease(gpu1, {{"vram", "2GiB"}, {"label", "embed"}, {"host", "gpu2"}});
  auto on3 = post_lease(gpu3, {{"vram", "3GiB"}, {"label", "train"}, {"host", "gpu3"}});
  auto waits = post_lease(gpu3, {{"vram", "20GiB"}, {"label", "big"}, {"host", "gpu1"}});
  ASSERT_TRUE(on2 && on3 && waits);
  ASSERT_EQ(lease_at(gpu1, (*on2)["id"], "10s").value("state", ""), "granted");
  ASSERT_EQ(lease_at(gpu3, (*on3)["id"], "10s").value("state", ""), "granted");
  // Every host's snapshot has its service's bytes and its leases before the browser looks.
  const std::map<std::string, std::pair<std::string, size_t>> want = {
      {"gpu1", {"comfyui", 0}}, {"gpu2", {"ollama", 1}}, {"gpu3", {"vllm", 2}}};
  ASSERT_TRUE(eventually([&] {
    json hosts = get(gpu1, "/v1/hosts");
    size_t ready = 0;
    for (const auto& h : hosts.value("hosts", json::array())) {
      auto it = want.find(h.value("host", ""));
      if (it == want.end() || !h["status"].is_object()) continue;
      bool bytes = false;
      for (const auto& s : h["status"].value("services", json::array()))
        bytes |= s["name"] == it->second.first && s.value("bytes", Bytes{0}) > GiB;
      if (bytes && h["status"].value("leases", json::array()).size() == it->second.second) ++ready;
    }
    return ready == 3;
  }, std::chrono::seconds(30))) << get(gpu1, "/v1/hosts").dump(2);

  json expect = {{"local", gpu1.url},
                 {"hosts",
                  {{"gpu1", {{"services", {"comfyui"}}, {"granted", 0}, {"queued", 0}}},
                   {"gpu2", {{"services", {"ollama"}}, {"granted", 1}, {"queued", 0}}},
                   {"gpu3", {{"services", {"vllm"}}, {"granted", 1}, {"queued", 1}}}}}};
  TempDir dir;
  std::string out;
  int rc = run_browser("up", expect, dir, out);
  if (rc == 77) GTEST_SKIP() << out;
  EXPECT_EQ(rc, 0) << out;

  // gpu3 killed: past host_timeout (3 s) the overview shows it lost, its services unknown.
  gpu3.daemon->kill(SIGKILL);
  ASSERT_TRUE(eventually([&] {
    for (const auto& h : get(gpu1, "/v1/hosts").value("hosts", json::array()))
      if (h["host"] == "gpu3") return h["state"] == "lost";
    return false;
  }, std::chrono::seconds(20))) << get(gpu1, "/v1/hosts").dump(2);
  expect["lost"] = "gpu3";
  rc = run_browser("lost", expect, dir, out);
  EXPECT_EQ(rc, 0) << out;
}

}  // namespace
}  // namespace vramd::testing
