// Room for shared leases by eviction (issue 17, core/cluster.h choose_claims): three real vramd
// processes on one real PostgreSQL, each on its own test GPU, with fake GPU servers beside them.
// A lease that fits no host as it is, but one host after unloading its idle ComfyUI, is granted
// there after that ComfyUI was unloaded through its own API, and no other host unloads anything;
// a host with room as it is wins over one that would have to unload; an unload that frees nothing
// gives the lease back to the queue, with the reason, and another host takes it when it has room;
// the reason of a lease no host can take yet names every host, read on a host that neither keeps
// it nor makes room for it.
#include <thread>

#include <gtest/gtest.h>

#include "integration/cluster_fixture.h"

namespace vramd::testing {
namespace {

using namespace std::chrono_literals;

// [services.comfyui] at `fake`, idle after 1 s; `more`: more keys.
std::string comfyui_toml(const FakeService& fake, const std::string& more = "") {
  return fmt::format("[services.comfyui]\nkind = \"comfyui\"\nurl = \"{}\"\nmin_idle = \"1s\"\n{}",
                     fake.url(), more);
}

// Until host `f` sees its comfyui holding 16 GiB and idle past min_idle (or busy, when `busy`).
void wait_comfyui(const DaemonFixture& f, bool busy) {
  ASSERT_TRUE(eventually([&] {
    json s = get(f, "/v1/services/comfyui");
    if (s.value("bytes", Bytes{0}) != 16 * GiB) return false;
    return busy ? s["busy"] == true : !s["idle_since"].is_null();
  })) << get(f, "/v1/services/comfyui").dump(2)
      << f.log();
  if (!busy) std::this_thread::sleep_for(1200ms);  // idle past min_idle
}

int unload_calls(const FakeService& fake) { return fake.state().value("unload_calls", -1); }

// Until lease `id` is granted (asked of host `f`); the lease as it then is.
json granted(const DaemonFixture& f, uint64_t id) {
  json now;
  EXPECT_TRUE(eventually(
      [&] {
        now = lease_at(f, id, "2s");
        return now.value("state", "") == "granted";
      },
      std::chrono::seconds(40)))
      << now.dump(2);
  return now;
}

TEST(ClusterEvictE2E, ALeaseThatFitsNowhereIsGrantedWhereAnIdleServiceIsUnloadedAndOnlyThere) {
  // gpu1: 2 GiB used by no one and an idle ComfyUI holding 16 GiB (6 GiB free); gpu2: a busy
  // ComfyUI holding 16 GiB; gpu3: 20 GiB used by no one. 12 GiB fits nowhere as it is.
  Cluster c("evict", {2 * GiB, 400 * MiB, 20 * GiB}, [](int i, Cluster& c) -> std::string {
    if (i == 2) return "";
    return comfyui_toml(c.fake(i, "comfyui", {"--model-bytes", "16GiB"}));
  });
  VRAMD_REQUIRE_POSTGRES(c.pg);
  FakeService& idle = *c.fakes[0];
  FakeService& busy = *c.fakes[1];
  auto r = http_request({busy.url()}, "POST", "/fake/busy?for=10m", "", 2000);
  ASSERT_TRUE(r && r->status == 200);
  wait_comfyui(c.host[1], true);
  wait_comfyui(c.host[0], false);

  // Asked of gpu3, which keeps it queued.
  auto l = post_lease(c.host[2], {{"vram", "12GiB"}, {"label", "flux"}});
  ASSERT_TRUE(l) << l.error();
  uint64_t id = (*l)["id"];
  json g = granted(c.host[2], id);
  EXPECT_EQ(g["host"], "gpu1") << g.dump(2);
  // Through ComfyUI's own unload call, once; the GPU's numbers said it was freed.
  EXPECT_EQ(unload_calls(idle), 1);
  EXPECT_EQ(idle.state()["loaded"], false);
  EXPECT_TRUE(eventually([&] { return !events_of(c.host[0], "unload.freed").empty(); }))
      << get(c.host[0], "/v1/events").dump(2);
  ASSERT_EQ(events_of(c.host[0], "lease.evicting").size(), 1u);
  EXPECT_NE(events_of(c.host[0], "lease.evicting")[0]["message"].get<std::string>().find(
                fmt::format("unloading comfyui on GPU 0 to make room for lease #{}", id)),
            std::string::npos);
  // No other host unloaded anything: the busy ComfyUI is never evicted.
  EXPECT_EQ(unload_calls(busy), 0);
  EXPECT_EQ(busy.state()["loaded"], true);
  for (int i : {1, 2}) {
    EXPECT_TRUE(events_of(c.host[i], "lease.evicting").empty()) << i;
    EXPECT_TRUE(events_of(c.host[i], "unload.started").empty()) << i;
  }
  // The mark is gone with the grant.
  EXPECT_EQ(c.pg->psql(c.db, fmt::format("SELECT COUNT(*) FROM leases WHERE id = {} AND evict_host"
                                         " IS NOT NULL",
                                         id)),
            "0");
}

TEST(ClusterEvictE2E, AHostWithRoomAsItIsWinsOverOneThatWouldHaveToUnload) {
  // gpu1 could take 12 GiB after unloading its idle ComfyUI; gpu2 has room as it is.
  Cluster c("room_wins", {2 * GiB, 400 * MiB, 20 * GiB}, [](int i, Cluster& c) -> std::string {
    if (i != 0) return "";
    return comfyui_toml(c.fake(i, "comfyui", {"--model-bytes", "16GiB"}));
  });
  VRAMD_REQUIRE_POSTGRES(c.pg);
  FakeService& idle = *c.fakes[0];
  wait_comfyui(c.host[0], false);
  // Asked of gpu1: it looks at the lease first (a claim soon after a lease is queued), and must
  // wait for gpu2's and gpu3's word before unloading anything.
  auto l = post_lease(c.host[0], {{"vram", "12GiB"}, {"label", "flux"}});
  ASSERT_TRUE(l) << l.error();
  uint64_t id = (*l)["id"];
  json g = granted(c.host[0], id);
  EXPECT_EQ(g["host"], "gpu2") << g.dump(2);
  // A few more claim rounds: still nothing unloaded for it.
  std::this_thread::sleep_for(1500ms);
  EXPECT_EQ(unload_calls(idle), 0);
  EXPECT_EQ(idle.state()["loaded"], true);
  EXPECT_TRUE(events_of(c.host[0], "lease.evicting").empty());
  EXPECT_TRUE(events_of(c.host[0], "unload.started").empty());
}

TEST(ClusterEvictE2E, AnUnloadThatFreesNothingGivesTheLeaseBackToTheQueueWithTheReason) {
  // gpu1's idle ComfyUI answers its unload call and keeps every byte; gpu2 and gpu3 are full.
  Cluster c("frees_nothing", {2 * GiB, 20 * GiB, 20 * GiB}, [](int i, Cluster& c) -> std::string {
    if (i != 0) return "";
    return comfyui_toml(c.fake(i, "comfyui", {"--model-bytes", "16GiB", "--ignore-unload"}),
                        "unload_timeout = \"2s\"\n");
  });
  VRAMD_REQUIRE_POSTGRES(c.pg);
  FakeService& stubborn = *c.fakes[0];
  wait_comfyui(c.host[0], false);
  auto l = post_lease(c.host[1], {{"vram", "12GiB"}, {"label", "flux"}});
  ASSERT_TRUE(l) << l.error();
  uint64_t id = (*l)["id"];
  // gpu1 tries, the verdict is "ineffective", and the lease is every host's again.
  ASSERT_TRUE(eventually([&] { return !events_of(c.host[0], "lease.eviction_failed").empty(); },
                         std::chrono::seconds(30)))
      << get(c.host[0], "/v1/events").dump(2) << c.host[0].log();
  EXPECT_EQ(unload_calls(stubborn), 1);
  EXPECT_EQ(events_of(c.host[0], "unload.ineffective").size(), 1u)
      << get(c.host[0], "/v1/events").dump(2);
  EXPECT_NE(events_of(c.host[0], "lease.eviction_failed")[0]["message"].get<std::string>().find(
                fmt::format("lease #{} of the shared queue freed too little", id)),
            std::string::npos);
  EXPECT_EQ(c.pg->psql(c.db, fmt::format("SELECT COUNT(*) FROM leases WHERE id = {} AND evict_host"
                                         " IS NOT NULL",
                                         id)),
            "0");
  // Queued, and its reason says why gpu1 cannot take it now.
  json q;
  std::string why;
  ASSERT_TRUE(eventually([&] {
    q = lease_at(c.host[1], id);
    why = q.value("reason", json::object()).value("text", "");
    return why.find("comfyui holds 16.0 GiB, unload ineffective") != std::string::npos;
  })) << q.dump(2);
  EXPECT_EQ(q["state"], "queued");
  EXPECT_NE(why.find("gpu1: needs 12.0 GiB"), std::string::npos) << why;
  EXPECT_EQ(why.find("could take it after unloading"), std::string::npos) << why;
  // Not tried again in a loop: a few more rounds, still one unload call.
  std::this_thread::sleep_for(1500ms);
  EXPECT_EQ(unload_calls(stubborn), 1);
  // Another host gets room: the lease goes there.
  set_used(c.host[2], 400 * MiB);
  json g = granted(c.host[1], id);
  EXPECT_EQ(g["host"], "gpu3") << g.dump(2);
}

// Host `host`'s part of a joined reason: from "gpuN: needs" to the next host's; "" when absent.
std::string part(const std::string& why, const std::string& host) {
  size_t at = why.find(host + ": needs");
  if (at == std::string::npos) return "";
  size_t next = std::string::npos;
  for (const char* other : {"gpu1: needs", "gpu2: needs", "gpu3: needs"})
    if (size_t o = why.find(other, at + 1); o != std::string::npos) next = std::min(next, o);
  return why.substr(at, next == std::string::npos ? std::string::npos : next - at);
}

TEST(ClusterEvictE2E, TheReasonOfALeaseNoHostCanTakeYetNamesEveryHostOnAnyHost) {
  // gpu1 and gpu2 each have an idle ComfyUI (the same reload cost: the lower name unloads);
  // gpu1's takes 8 s to let go of its memory. gpu3 is full.
  Cluster c("reason", {2 * GiB, 2 * GiB, 20 * GiB}, [](int i, Cluster& c) -> std::string {
    if (i == 2) return "";
    std::vector<std::string> args = {"--model-bytes", "16GiB"};
    if (i == 0) args.insert(args.end(), {"--unload-delay", "8s"});
    return comfyui_toml(c.fake(i, "comfyui", args));
  });
  VRAMD_REQUIRE_POSTGRES(c.pg);
  wait_comfyui(c.host[0], false);
  wait_comfyui(c.host[1], false);
  // Kept by gpu2; read on gpu3, which neither keeps it nor makes room for it.
  auto l = post_lease(c.host[1], {{"vram", "12GiB"}, {"label", "flux"}});
  ASSERT_TRUE(l) << l.error();
  uint64_t id = (*l)["id"];
  // Each host's part is as of its last claim round (every 0.5 s): gpu2's says "gpu1 can make
  // room for it more cheaply" until its first round after gpu1 took the lease's mark.
  const std::string gpu2_leaves_it =
      "could take it after unloading comfyui (16.0 GiB, idle); gpu1 is making room for it";
  json q;
  std::string why;
  ASSERT_TRUE(eventually([&] {
    q = lease_at(c.host[2], id);
    why = q.value("reason", json::object()).value("text", "");
    return part(why, "gpu1").find("unloading comfyui for it") != std::string::npos &&
           part(why, "gpu2").find(gpu2_leaves_it) != std::string::npos &&
           !part(why, "gpu3").empty();
  })) << q.dump(2);
  EXPECT_EQ(q["state"], "queued") << q.dump(2);
  EXPECT_EQ(q["host"], "gpu2");
  EXPECT_EQ(q["elsewhere"], true);
  // Every host, in host order, and why: gpu1 makes room, gpu2 could and leaves it to gpu1, gpu3
  // has no room and nothing to unload.
  size_t at1 = why.find("gpu1: needs 12.0 GiB"), at2 = why.find("gpu2: needs 12.0 GiB"),
         at3 = why.find("gpu3: needs 12.0 GiB");
  ASSERT_EQ(at1, 0u) << why;
  EXPECT_LT(at1, at2) << why;
  EXPECT_LT(at2, at3) << why;
  EXPECT_NE(part(why, "gpu1").find("comfyui holds 16.0 GiB, idle"), std::string::npos) << why;
  EXPECT_NE(part(why, "gpu2").find("comfyui holds 16.0 GiB, idle"), std::string::npos) << why;
  EXPECT_NE(part(why, "gpu3").find("4.0 GiB free of 24.0 GiB"), std::string::npos) << why;
  EXPECT_EQ(part(why, "gpu3").find("could take it"), std::string::npos) << why;
  // The keeper says the same (as of its own last round).
  std::string kept;
  EXPECT_TRUE(eventually([&] {
    kept = lease_at(c.host[1], id).value("reason", json::object()).value("text", "");
    return part(kept, "gpu2").find(gpu2_leaves_it) != std::string::npos &&
           !part(kept, "gpu1").empty() && !part(kept, "gpu3").empty();
  })) << kept;

  // Then granted on gpu1, and gpu2's ComfyUI was never unloaded.
  json g = granted(c.host[2], id);
  EXPECT_EQ(g["host"], "gpu1") << g.dump(2);
  EXPECT_EQ(unload_calls(*c.fakes[0]), 1);
  EXPECT_EQ(unload_calls(*c.fakes[1]), 0);
  EXPECT_EQ(c.fakes[1]->state()["loaded"], true);
  EXPECT_TRUE(events_of(c.host[1], "lease.evicting").empty());
}

}  // namespace
}  // namespace vramd::testing
