// A lease's heartbeat counts on any host (issue 17, docs/api.md "Several hosts, one queue"): a
// client that keeps talking to the host it asked keeps its lease, though another host granted
// it (and dropped its holder pid, which was on the first host) or keeps it queued. Two real
// daemons on one real PostgreSQL; what the holding host decided is read from the store itself,
// never through that host's API (a GET there would count as a heartbeat there).
#include <thread>

#include <gtest/gtest.h>

#include "integration/cluster_fixture.h"

namespace vramd::testing {
namespace {

using namespace std::chrono_literals;

TEST(ClusterHeartbeatE2E, AHeartbeatToAnyHostKeepsALeaseHeldByAnotherAndSilenceEndsIt) {
  // gpu1 has no room; gpu2 has. Leases without a pid need a heartbeat every 3 s.
  ClusterFixture c("beats", {22 * GiB, 400 * MiB},
                   "host_timeout = \"30s\"\nlease_heartbeat = \"3s\"\n");
  VRAMD_REQUIRE_POSTGRES(c.pg);
  DaemonFixture& gpu1 = c[0];
  DaemonFixture& gpu2 = c[1];
  // Asked of gpu1, granted on gpu2.
  auto a = post_lease(gpu1, {{"vram", "4GiB"}, {"label", "remote"}}, "?wait=10s");
  ASSERT_TRUE(a) << a.error();
  uint64_t granted_id = (*a)["id"];
  json now = lease_at(gpu1, granted_id, "10s");
  ASSERT_EQ(now.value("state", ""), "granted") << now.dump(2);
  ASSERT_EQ(now["host"], "gpu2");
  // Named gpu1, where it does not fit: queued, kept by gpu1. Its client talks to gpu2.
  auto b = post_lease(gpu1, {{"vram", "4GiB"}, {"label", "waiting"}, {"host", "gpu1"}});
  ASSERT_TRUE(b) << b.error();
  uint64_t queued_id = (*b)["id"];
  ASSERT_EQ((*b)["state"], "queued");

  auto stored_state = [&](uint64_t id) {
    std::string row = c.sql(fmt::format("SELECT host || ':' || state FROM leases WHERE id = {}", id));
    if (!row.empty()) return row;
    return c.sql(fmt::format("SELECT 'ended:' || state || ':' || end_reason FROM jobs WHERE id = {}", id));
  };

  // Beats through the other host, for three times the heartbeat period.
  auto until = std::chrono::steady_clock::now() + 9s;
  int beats = 0;
  while (std::chrono::steady_clock::now() < until) {
    auto r1 = http_request({gpu1.url}, "POST", fmt::format("/v1/leases/{}/heartbeat", granted_id), "", 5000);
    auto r2 = http_request({gpu2.url}, "POST", fmt::format("/v1/leases/{}/heartbeat", queued_id), "", 5000);
    ASSERT_TRUE(r1 && r2);
    ASSERT_EQ(r1->status, 200u) << r1->body;
    ASSERT_EQ(r2->status, 200u) << r2->body;
    // The answer is the lease as the holding host has it.
    json j1 = json::parse(r1->body), j2 = json::parse(r2->body);
    EXPECT_EQ(j1["host"], "gpu2");
    EXPECT_EQ(j1["state"], "granted") << j1.dump();
    EXPECT_EQ(j2["host"], "gpu1");
    EXPECT_EQ(j2["state"], "queued") << j2.dump();
    ++beats;
    std::this_thread::sleep_for(300ms);
  }
  EXPECT_GT(beats, 10);
  EXPECT_EQ(stored_state(granted_id), "gpu2:granted");
  EXPECT_EQ(stored_state(queued_id), "gpu1:queued");
  // A heartbeat is a POST; a GET elsewhere is one too (docs/api.md), a PUT is refused.
  auto put = http_request({gpu1.url}, "PUT", fmt::format("/v1/leases/{}/heartbeat", granted_id), "", 5000);
  ASSERT_TRUE(put);
  EXPECT_EQ(put->status, 405u) << put->body;
  // An id no host has: 404, as on one host.
  auto none = http_request({gpu1.url}, "POST", "/v1/leases/999999/heartbeat", "", 5000);
  ASSERT_TRUE(none);
  EXPECT_EQ(none->status, 404u) << none->body;

  // Silence: each host ends its own, for want of a heartbeat.
  std::string g, q;
  ASSERT_TRUE(eventually(
      [&] {
        g = stored_state(granted_id);
        q = stored_state(queued_id);
        return g.rfind("ended:", 0) == 0 && q.rfind("ended:", 0) == 0;
      },
      20s))
      << g << " / " << q;
  EXPECT_EQ(g.rfind("ended:expired:no heartbeat for", 0), 0u) << g;
  EXPECT_EQ(q.rfind("ended:expired:no heartbeat for", 0), 0u) << q;
  // Each expired on the host that held it, once.
  EXPECT_EQ(c.sql(fmt::format("SELECT host FROM jobs WHERE id = {}", granted_id)), "gpu2");
  EXPECT_EQ(c.sql(fmt::format("SELECT host FROM jobs WHERE id = {}", queued_id)), "gpu1");
  EXPECT_EQ(c.sql(fmt::format("SELECT COUNT(*) FROM events WHERE type = 'lease.expired' AND "
                              "(subject LIKE '%#{}' OR subject LIKE '%#{}')",
                              granted_id, queued_id)),
            "2");
}

}  // namespace
}  // namespace vramd::testing
