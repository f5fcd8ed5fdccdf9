// A lease is never held twice across a partition (issue 30): two real vramd on one real
// PostgreSQL, host gpu1 reaching it through the partition harness (integration/tcp_relay.h, the
// real libpq path through a real socket). gpu1 holds a shared lease with a `vramd run` sleep job;
// the relay blackholes (no RST: gpu1's calls hang, as across a real partition); gpu1 gives the
// lease up after half of host_timeout on its own monotonic clock and stops the job, before gpu2
// (after host_timeout by the store's clock) re-queues the lease and grants it. A watcher samples
// both hosts every 50 ms and must never see the lease granted on gpu2 while gpu1 still holds it
// or its job still runs. Then the relay passes again: gpu1 rejoins without a restart and revives
// nothing; the fencing tokens tell the two grants apart. Once more with gpu1's clocks 5% slow
// (libfaketime, monotonic included): the gap is half of host_timeout, far above any drift.
#include <signal.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <thread>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "integration/cluster_fixture.h"
#include "integration/tcp_relay.h"

namespace vramd::testing {
namespace cluster_fence_test {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  std::string s((std::istreambuf_iterator<char>(f)), {});
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

// GET's status and JSON (status 0 when there was no answer).
std::pair<unsigned, json> get_status(const DaemonFixture& f, const std::string& target) {
  auto r = http_request({f.url}, "GET", target, "", 5000);
  if (!r) return {0, json()};
  return {r->status, json::parse(r->body, nullptr, false)};
}

void partition_keeps_one_holder(bool slow_clock) {
  PostgresServer* pg = PostgresServer::get();
  VRAMD_REQUIRE_POSTGRES(pg);
  std::string db = pg->create_database(slow_clock ? "fence_slow" : "fence");
  TcpRelay relay("127.0.0.1", pg->port());
  DaemonFixture a, b;
  set_used(b, 23 * GiB);  // gpu2 full: the lease is gpu1's to claim
  const std::string common = "host_timeout = \"4s\"\nlease_heartbeat = \"5m\"\n";
  a.daemon_toml = fmt::format("store = \"postgresql://vramd@127.0.0.1:{}/{}\"\nhost = \"gpu1\"\n{}",
                              relay.port(), db, common);
  b.daemon_toml = fmt::format("store = \"{}\"\nhost = \"gpu2\"\n{}", pg->url(db), common);
  if (slow_clock) {
    std::string preload = faketime_preload();
    // Installed by `make test` (Debian: libfaketime): its absence is a broken setup, not a skip.
    ASSERT_FALSE(preload.empty()) << "libfaketime is not installed (Debian: libfaketime)";
    // Every clock of gpu1's daemon, monotonic too, runs at 95% of the real rate. (Its timed waits
    // on the monotonic clock need the fix preloaded first: without it, the sampler stops.)
    a.extra_env = {"LD_PRELOAD=" + preload, "FAKETIME=+0 x0.95", "FAKETIME_NO_CACHE=1"};
    // Under AddressSanitizer the preloaded library comes before ASan's runtime, which ASan
    // refuses unless told that this order is meant.
    const char* asan = std::getenv("ASAN_OPTIONS");
    a.extra_env.push_back(std::string("ASAN_OPTIONS=") + (asan ? std::string(asan) + ":" : "") +
                          "verify_asan_link_order=0");
  }
  a.start("");
  b.start("");

  // The job writes its pid and its lease's token, then sleeps.
  const std::string pid_file = a.dir.file("job.pid"), token_file = a.dir.file("job.token");
  Child run({vramd_bin(), "run", "--url", a.url, "--vram", "4GiB", "--label", "fenced",
             "--stop-timeout", "5s", "--", "sh", "-c",
             fmt::format("echo $$ > {}; echo $VRAMD_LEASE_TOKEN > {}; exec sleep 300", pid_file,
                         token_file)},
            {}, a.dir.file("run.log"));
  ASSERT_TRUE(eventually([&] { return !read_file(pid_file).empty() && !read_file(token_file).empty(); },
                         20s))
      << read_file(a.dir.file("run.log")) << a.log();
  const pid_t job = std::stoi(read_file(pid_file));
  const uint64_t first_token = std::stoull(read_file(token_file));
  uint64_t id = 0;
  for (const auto& l : get(a, "/v1/leases").value("leases", json::array()))
    if (l.value("label", "") == "fenced") id = l["id"].get<uint64_t>();
  ASSERT_NE(id, 0u);
  const std::string lease = fmt::format("/v1/leases/{}", id);
  ASSERT_EQ(get(a, lease).value("state", ""), "granted");
  EXPECT_EQ(get(a, lease).value("token", uint64_t{0}), first_token);
  set_used(b, 400 * MiB);  // gpu2 has room now: it would take the lease if it were queued

  // The watcher: both hosts' word on the lease, and whether gpu1's job still runs.
  std::atomic<bool> stop{false}, seen_b{false};
  int samples = 0, violations = 0;
  std::string first_violation;
  std::optional<Clock::time_point> lost_at, job_gone_at, granted_b_at;
  const auto cut_at = Clock::now();
  std::thread watcher([&] {
    while (!stop) {
      auto t = Clock::now();
      auto [a_status, av] = get_status(a, lease);
      auto [b_status, bv] = get_status(b, lease);
      bool job_alive = ::kill(job, 0) == 0;
      bool a_holds = av.is_object() && av.value("state", "") == "granted";
      bool b_holds = bv.is_object() && bv.value("state", "") == "granted" &&
                     bv.value("host", "") == "gpu2";
      ++samples;
      if (av.is_object() && av.value("state", "") == "lost" && !lost_at) lost_at = t;
      if (!job_alive && !job_gone_at) job_gone_at = t;
      if (b_holds && !granted_b_at) {
        granted_b_at = Clock::now();
        seen_b = true;
      }
      if (b_holds && (a_holds || job_alive)) {
        if (violations++ == 0)
          first_violation = fmt::format("gpu1 {} ({}), job {}; gpu2 {}", a_status, av.dump(),
                                        job_alive ? "alive" : "gone", bv.dump());
      }
      std::this_thread::sleep_until(t + 50ms);
    }
  });
  relay.set_mode(TcpRelay::Mode::blackhole);
  bool granted_elsewhere = eventually([&] { return seen_b.load(); }, 30s);
  std::this_thread::sleep_for(1s);  // and a while after
  stop = true;
  watcher.join();
  ASSERT_TRUE(granted_elsewhere) << "gpu2 never granted the re-queued lease\n" << b.log();
  EXPECT_EQ(violations, 0) << first_violation;
  EXPECT_GT(samples, 40);
  ASSERT_TRUE(lost_at && job_gone_at);
  EXPECT_LT(*job_gone_at, *granted_b_at);
  auto ms = [&](Clock::time_point t) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(t - cut_at).count();
  };
  std::cerr << fmt::format("{}: cut at 0 ms; gpu1 gave the lease up by {} ms, its job was gone by "
                           "{} ms, gpu2 granted it at {} ms ({} samples)\n",
                           slow_clock ? "gpu1 5% slow" : "same clock rates", ms(*lost_at),
                           ms(*job_gone_at), ms(*granted_b_at), samples);
  // The holder heard it: one line, the job stopped by SIGTERM, and its status kept.
  int status = run.wait_exit(10s);
  ASSERT_NE(status, -1) << read_file(a.dir.file("run.log"));
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 128 + SIGTERM) << status;
  std::string said = read_file(a.dir.file("run.log"));
  EXPECT_NE(said.find(fmt::format("lease #{} lost: cut off from the store", id)), std::string::npos)
      << said;
  EXPECT_NE(said.find("stopping the command"), std::string::npos) << said;
  json lost = get(a, lease);
  EXPECT_EQ(lost.value("state", ""), "lost") << lost.dump();
  // Its metrics say how long it has been cut off, and that a lease ended lost.
  auto metrics = http_request({a.url}, "GET", "/metrics", "", 5000);
  ASSERT_TRUE(metrics && metrics->status == 200);
  EXPECT_NE(metrics->body.find("vramd_lease_ends_total{state=\"lost\"} 1"), std::string::npos)
      << metrics->body;
  std::smatch age;
  ASSERT_TRUE(std::regex_search(metrics->body, age,
                                std::regex(R"(vramd_store_contact_age_seconds ([0-9.e+]+))")))
      << metrics->body;
  EXPECT_GT(std::stod(age[1]), 2.0);

  // The partition heals: gpu1 rejoins without a restart and revives nothing.
  relay.set_mode(TcpRelay::Mode::pass);
  ASSERT_TRUE(eventually([&] { return a.status()["faults"].empty(); }, 40s))
      << a.status()["faults"].dump() << a.log();
  EXPECT_TRUE(eventually(
      [&] {
        for (const auto& h : get(b, "/v1/hosts").value("hosts", json::array()))
          if (h.value("host", "") == "gpu1") return h.value("state", "") == "up";
        return false;
      },
      20s));
  EXPECT_EQ(get(a, lease).value("state", ""), "lost");
  EXPECT_EQ(pg->psql(db, fmt::format("SELECT host || ':' || state FROM leases WHERE id = {}", id)),
            "gpu2:granted");
  auto named = post_lease(b, {{"vram", "1GiB"}, {"host", "gpu1"}, {"label", "after"}}, "?wait=10s");
  ASSERT_TRUE(named) << named.error();
  EXPECT_EQ((*named)["state"], "granted") << named->dump();
  EXPECT_EQ((*named)["host"], "gpu1") << named->dump();

  // Tokens: gpu2's grant took a larger one; the first is answered stale from either host.
  json now_is = get(b, lease);
  uint64_t second_token = now_is.value("token", uint64_t{0});
  EXPECT_GT(second_token, first_token) << now_is.dump();
  for (const DaemonFixture* f : {&a, &b}) {
    auto [stale_status, stale] = get_status(*f, fmt::format("{}?token={}", lease, first_token));
    EXPECT_EQ(stale_status, 409u) << stale.dump();
    EXPECT_EQ(stale.value("current", true), false) << stale.dump();
    auto [current_status, current] = get_status(*f, fmt::format("{}?token={}", lease, second_token));
    EXPECT_EQ(current_status, 200u) << current.dump();
    EXPECT_EQ(current.value("current", false), true) << current.dump();
  }
}

// A shared lease gpu1 gave up while cut off, released meanwhile through gpu2's API (its holder
// asked the host it talks to). Ended once, `released`, with its one ending event, whichever way
// it goes on: gpu1 back in touch before it is taken for lost ends it itself (the torture's
// "lease #N (released) has 0 ending events"); gpu1 taken for lost first, gpu2 ends it instead of
// queuing it again for no one.
void released_through_another_host(bool lost_meanwhile) {
  PostgresServer* pg = PostgresServer::get();
  VRAMD_REQUIRE_POSTGRES(pg);
  std::string db = pg->create_database(lost_meanwhile ? "fence_release_lost" : "fence_release");
  TcpRelay relay("127.0.0.1", pg->port());
  DaemonFixture a, b;
  set_used(b, 23 * GiB);  // gpu2 full: the lease is gpu1's
  const std::string common = "host_timeout = \"10s\"\nlease_heartbeat = \"5m\"\n";
  a.daemon_toml = fmt::format("store = \"postgresql://vramd@127.0.0.1:{}/{}\"\nhost = \"gpu1\"\n{}",
                              relay.port(), db, common);
  b.daemon_toml = fmt::format("store = \"{}\"\nhost = \"gpu2\"\n{}", pg->url(db), common);
  a.start("");
  b.start("");
  auto l = post_lease(a, {{"vram", "4GiB"}, {"label", "held"}}, "?wait=10s");
  ASSERT_TRUE(l) << l.error();
  ASSERT_EQ((*l)["state"], "granted") << l->dump();
  const uint64_t id = (*l)["id"].get<uint64_t>();
  const std::string lease = fmt::format("/v1/leases/{}", id);
  relay.set_mode(TcpRelay::Mode::blackhole);
  ASSERT_TRUE(eventually([&] { return get(a, lease).value("state", "") == "lost"; }, 15s)) << a.log();
  auto asked = http_request({b.url}, "DELETE", lease, "", 5000);
  ASSERT_TRUE(asked && asked->status == 200) << (asked ? asked->body : asked.error());
  EXPECT_EQ(pg->psql(db, fmt::format("SELECT host || ':' || state FROM leases WHERE id = {}", id)),
            "gpu1:granted");  // the release waits for gpu1, or for gpu1 to be taken for lost
  if (!lost_meanwhile) relay.set_mode(TcpRelay::Mode::pass);
  ASSERT_TRUE(eventually(
      [&] { return pg->psql(db, fmt::format("SELECT state FROM jobs WHERE id = {}", id)) == "released"; },
      20s))
      << a.log() << b.log();
  if (lost_meanwhile) relay.set_mode(TcpRelay::Mode::pass);  // gpu1 rejoins: nothing more ends
  auto endings = [&] {
    return pg->psql(db, fmt::format("SELECT string_agg(host || ':' || type, ',') FROM events"
                                    " WHERE subject LIKE '%#{}' AND type IN"
                                    " ('lease.released', 'lease.expired', 'lease.cancelled',"
                                    " 'lease.timed_out', 'lease.host_lost')",
                                    id));
  };
  const std::string ended = lost_meanwhile ? "gpu2:lease.released" : "gpu1:lease.released";
  eventually([&] { return endings() == ended; }, 5s);
  if (lost_meanwhile) {  // gpu1 back in touch (its heartbeat lifts its lost mark), a few rounds
    ASSERT_TRUE(eventually(
        [&] { return pg->psql(db, "SELECT lost_at IS NULL FROM hosts WHERE host = 'gpu1'") == "t"; },
        10s));
    std::this_thread::sleep_for(2s);
  }
  EXPECT_EQ(endings(), ended) << a.log() << b.log();
  EXPECT_EQ(get(a, lease).value("state", ""), lost_meanwhile ? "lost" : "released");
  EXPECT_EQ(get(b, lease).value("state", ""), "released");
  EXPECT_EQ(pg->psql(db, "SELECT COUNT(*) FROM events WHERE type = 'host.lost'"),
            lost_meanwhile ? "1" : "0");
  EXPECT_EQ(pg->psql(db, fmt::format("SELECT COUNT(*) FROM events WHERE type = 'lease.requeued'"
                                     " AND subject LIKE '%#{}'", id)),
            "0");
}

TEST(ClusterFenceE2E, AFencedLeaseReleasedThroughAnotherHostEndsWithItsEvent) {
  released_through_another_host(/*lost_meanwhile=*/false);
}

TEST(ClusterFenceE2E, ALeaseReleasedThroughAnotherHostWhileItsHostIsLostEndsThere) {
  released_through_another_host(/*lost_meanwhile=*/true);
}

// A host's daemon killed while its `vramd run` job holds a shared lease (the torture's "held 18 GiB
// at once on gpu2": the job outlived its lease, granted again elsewhere, and its host granted
// its room again once back). No daemon is left to fence it: the holder does, at the fence its
// host last gave it (`fence_in_ms`), before the other host takes the lease; back, the daemon
// knows nothing of it and grants its room to the next one.
TEST(ClusterFenceE2E, AJobWhoseDaemonDiesStopsBeforeAnotherHostTakesItsLease) {
  PostgresServer* pg = PostgresServer::get();
  VRAMD_REQUIRE_POSTGRES(pg);
  std::string db = pg->create_database("fence_daemon_dies");
  DaemonFixture a, b;
  set_used(b, 23 * GiB);  // gpu2 full: the lease is gpu1's
  const std::string common = "host_timeout = \"4s\"\nlease_heartbeat = \"5m\"\n";
  a.daemon_toml = fmt::format("store = \"{}\"\nhost = \"gpu1\"\n{}", pg->url(db), common);
  b.daemon_toml = fmt::format("store = \"{}\"\nhost = \"gpu2\"\n{}", pg->url(db), common);
  a.start("");
  b.start("");
  const std::string pid_file = a.dir.file("job.pid");
  Child run({vramd_bin(), "run", "--url", a.url, "--vram", "4GiB", "--label", "orphan",
             "--stop-timeout", "5s", "--", "sh", "-c",
             fmt::format("echo $$ > {}; exec sleep 300", pid_file)},
            {}, a.dir.file("run.log"));
  ASSERT_TRUE(eventually([&] { return !read_file(pid_file).empty(); }, 20s))
      << read_file(a.dir.file("run.log")) << a.log();
  const pid_t job = std::stoi(read_file(pid_file));
  uint64_t id = 0;
  for (const auto& l : get(a, "/v1/leases").value("leases", json::array()))
    if (l.value("label", "") == "orphan") {
      id = l["id"].get<uint64_t>();
      EXPECT_GT(l.value("fence_in_ms", int64_t{0}), 0) << l.dump();
      EXPECT_LE(l.value("fence_in_ms", int64_t{0}), 2000) << l.dump();  // half of host_timeout
    }
  ASSERT_NE(id, 0u);
  const std::string lease = fmt::format("/v1/leases/{}", id);
  set_used(b, 400 * MiB);  // gpu2 has room now: it takes the lease once gpu1 is lost

  const auto killed_at = Clock::now();
  a.daemon.reset();  // SIGKILL: the job's holder is left with no daemon
  std::optional<Clock::time_point> job_gone_at, granted_b_at;
  ASSERT_TRUE(eventually(
      [&] {
        if (!job_gone_at && ::kill(job, 0) != 0) job_gone_at = Clock::now();
        json l = get(b, lease);
        if (!granted_b_at && l.value("state", "") == "granted" && l.value("host", "") == "gpu2")
          granted_b_at = Clock::now();
        return job_gone_at && granted_b_at;
      },
      30s))
      << read_file(a.dir.file("run.log")) << b.log();
  EXPECT_LT(*job_gone_at, *granted_b_at);
  auto ms = [&](Clock::time_point t) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(t - killed_at).count();
  };
  std::cerr << fmt::format("daemon killed at 0 ms; its job was gone by {} ms, gpu2 granted the "
                           "lease at {} ms\n",
                           ms(*job_gone_at), ms(*granted_b_at));
  int status = run.wait_exit(10s);
  ASSERT_NE(status, -1) << read_file(a.dir.file("run.log"));
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 128 + SIGTERM) << status;
  std::string said = read_file(a.dir.file("run.log"));
  EXPECT_NE(said.find(fmt::format("lease #{} lost: no word from its host for", id)), std::string::npos)
      << said;
}

TEST(ClusterFenceE2E, ACutOffHostStopsItsJobBeforeAnotherHostGrantsTheLeaseAndRejoinsAfter) {
  partition_keeps_one_holder(/*slow_clock=*/false);
}

TEST(ClusterFenceE2E, TheSameWithTheCutOffHostsClocksFivePercentSlow) {
  partition_keeps_one_holder(/*slow_clock=*/true);
}

}  // namespace cluster_fence_test
}  // namespace vramd::testing
