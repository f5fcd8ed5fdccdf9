// One queue across hosts (core/cluster.h): which candidates of the shared queue a host grants, the
// reasons of the others, what a lost host's leases become, and how Admission takes a claim's
// answer (granted in place, granted from another host, moved elsewhere, dropped when re-queued).
#include <gtest/gtest.h>

#include "core/arbiter.h"
#include "core/cluster.h"

namespace vramd {
namespace {

using namespace std::chrono_literals;

Lease queued(uint64_t id, Bytes vram, std::optional<unsigned> gpu = std::nullopt) {
  Lease l;
  l.id = id;
  l.request.vram = vram;
  l.request.gpu = gpu;
  l.request.cluster = true;
  return l;
}

ClaimContext one_gpu(Bytes free, Bytes total = 24 * GiB) {
  ClaimContext c;
  c.host = "gpu1";
  c.sampled = true;
  c.gpus.push_back({0, free, total, "comfyui holds 16.0 GiB, busy"});
  return c;
}

TEST(ChooseClaims, GrantsInOrderWhatFitsAndTheFirstThatDoesNotHoldsTheLine) {
  ClaimDecision d = choose_claims(one_gpu(10 * GiB), {queued(1, 4 * GiB), queued(2, 4 * GiB),
                                                      queued(3, 4 * GiB), queued(4, 1 * GiB)});
  ASSERT_EQ(d.grant.size(), 2u);
  EXPECT_EQ(d.grant[0], (std::pair<uint64_t, unsigned>{1, 0}));
  EXPECT_EQ(d.grant[1], (std::pair<uint64_t, unsigned>{2, 0}));
  // #3 does not fit the 2 GiB left: it holds the line, #4 (which would fit) waits behind it.
  EXPECT_EQ(d.reasons.at(3),
            "gpu1: needs 4.0 GiB; GPU 0: 2.0 GiB free of 24.0 GiB; comfyui holds 16.0 GiB, busy");
  EXPECT_EQ(d.reasons.at(4), "gpu1: needs 1.0 GiB; queued behind lease #3");
}

TEST(ChooseClaims, TightestFitAcrossGpusAndAGpuTheHostLacks) {
  ClaimContext c = one_gpu(20 * GiB);
  c.gpus.push_back({1, 6 * GiB, 24 * GiB, ""});
  ClaimDecision d = choose_claims(c, {queued(1, 5 * GiB), queued(2, 1 * GiB, 7u)});
  ASSERT_EQ(d.grant.size(), 1u);
  EXPECT_EQ(d.grant[0], (std::pair<uint64_t, unsigned>{1, 1}));  // the tighter hole
  EXPECT_EQ(d.reasons.at(2), "gpu1: needs 1.0 GiB on GPU 7; no such GPU here");
}

TEST(ChooseClaims, NothingBeforeTheFirstSampleAndHostRamCounts) {
  ClaimContext c = one_gpu(20 * GiB);
  c.sampled = false;
  ClaimDecision d = choose_claims(c, {queued(1, 1 * GiB)});
  EXPECT_TRUE(d.grant.empty());
  EXPECT_EQ(d.reasons.at(1), "gpu1: needs 1.0 GiB; not yet sampled");

  c.sampled = true;
  c.ram = 8 * GiB;
  Lease big = queued(2, 1 * GiB);
  big.request.ram = 16 * GiB;
  d = choose_claims(c, {big});
  EXPECT_TRUE(d.grant.empty());
  EXPECT_NE(d.reasons.at(2).find("needs 16.0 GiB host RAM, 8.0 GiB available"), std::string::npos);
}

TEST(AfterHostLost, RequeuedWithoutItsGpuAndHolderOrEndedAsTheLeaseAsked) {
  Now now = Now(MonoTime(100s));
  Lease l = queued(5, 2 * GiB);
  l.state = LeaseState::granted;
  l.gpu = 0;
  l.granted_at = MonoTime(50s);
  l.request.pid = 4242;
  Lease r = after_host_lost(l, "gpu3", now);
  EXPECT_EQ(r.state, LeaseState::queued);
  EXPECT_FALSE(r.gpu);
  EXPECT_FALSE(r.granted_at);
  EXPECT_FALSE(r.request.pid);
  EXPECT_NE(r.reason.text.find("host gpu3 was lost"), std::string::npos);

  l.request.on_host_lost = OnHostLost::end;
  Lease e = after_host_lost(l, "gpu3", now);
  EXPECT_EQ(e.state, LeaseState::released);
  EXPECT_EQ(e.end_reason, "host gpu3 lost (no heartbeat)");
  EXPECT_EQ(e.ended_at, MonoTime(100s));
}

// The Arbiter of one host with one 24 GiB GPU.
struct Host {
  Arbiter arbiter{Config{}};
  Now now = Now(MonoTime(10s));
  std::vector<Action> feed(const Event& e) { return arbiter.handle(e, now); }
  void sample(Bytes used = 0) {
    SampleTaken s;
    GpuSample g;
    g.index = 0;
    g.name = "NVIDIA GeForce RTX 3090";
    g.total = 24 * GiB;
    g.used = used;
    s.gpus.gpus.push_back(g);
    s.gpus.backend = "test";
    s.host.mem_available = 64 * GiB;
    feed(s);
  }
};

bool has_event(const std::vector<Action>& actions, const std::string& type) {
  for (const auto& a : actions)
    if (auto* e = std::get_if<EmitEvent>(&a); e && e->event.type == type) return true;
  return false;
}

TEST(ClusterAdmission, ASharedLeaseIsGrantedOnlyByAClaimAndTheClaimPausesLocalGrants) {
  Host h;
  h.sample();
  LeaseRequest r;
  r.vram = 2 * GiB;
  r.cluster = true;
  r.pid = 777;
  h.feed(LeaseRequested{1, r});
  h.feed(Tick{});
  ASSERT_TRUE(h.arbiter.lease(1));
  EXPECT_EQ(h.arbiter.lease(1)->state, LeaseState::queued);  // the local pass leaves it
  EXPECT_EQ(h.arbiter.cluster_queued(10), std::vector<uint64_t>{1});

  // A claim: the room is the claim's until its answer; a local lease waits meanwhile.
  ClaimContext ctx = h.arbiter.begin_claim("gpu1", h.now);
  ASSERT_EQ(ctx.gpus.size(), 1u);
  EXPECT_EQ(ctx.gpus[0].free, 24 * GiB);
  LeaseRequest local;
  local.vram = 1 * GiB;
  h.feed(LeaseRequested{2, local});
  EXPECT_EQ(h.arbiter.lease(2)->state, LeaseState::queued);

  ClusterSynced s;
  Lease c = *h.arbiter.lease(1);
  c.state = LeaseState::granted;
  c.gpu = 0;
  s.claimed.push_back(c);
  auto actions = h.feed(s);
  EXPECT_TRUE(has_event(actions, "lease.granted"));
  EXPECT_EQ(h.arbiter.lease(1)->state, LeaseState::granted);
  EXPECT_EQ(h.arbiter.lease(1)->request.pid, 777);  // queued here: its holder is here
  EXPECT_EQ(h.arbiter.lease(2)->state, LeaseState::granted);  // the pause is lifted
  EXPECT_EQ(h.arbiter.cluster_granted(), std::vector<uint64_t>{1});
}

TEST(ClusterAdmission, MovedLeasesReadAsGrantedElsewhereAndReQueuedOnesAreDropped) {
  Host h;
  h.sample();
  LeaseRequest r;
  r.vram = 2 * GiB;
  r.cluster = true;
  h.feed(LeaseRequested{1, r});
  h.feed(LeaseRequested{2, r});
  h.arbiter.begin_claim("gpu1", h.now);
  ClusterSynced s;
  Lease c = *h.arbiter.lease(2);
  c.state = LeaseState::granted;
  c.gpu = 0;
  s.claimed.push_back(c);
  s.moved.push_back({1, "gpu2", 0u, false});
  s.reasons[1] = "gpu1: needs 2.0 GiB; gpu2: ...";
  h.feed(s);
  const Lease* moved = h.arbiter.lease(1);
  ASSERT_TRUE(moved);
  EXPECT_EQ(moved->state, LeaseState::granted);
  EXPECT_EQ(moved->elsewhere, "gpu2");
  EXPECT_TRUE(h.arbiter.cluster_queued(10).empty());

  // This host was taken for lost and lease 2 re-queued by another: dropped here, no write.
  h.arbiter.begin_claim("gpu1", h.now);
  ClusterSynced again;
  again.lost.push_back(2);
  auto actions = h.feed(again);
  EXPECT_TRUE(has_event(actions, "lease.dropped"));
  for (const auto& a : actions) EXPECT_FALSE(std::holds_alternative<LeaseChanged>(a));
  EXPECT_TRUE(h.arbiter.cluster_granted().empty());
}

TEST(ClusterAdmission, IdsOfOneHostStayInItsSlot) {
  Host h;
  h.arbiter.set_lease_id_space(1024, 3);
  EXPECT_EQ(h.arbiter.next_lease_id(), 3u);
  LeaseRequest r;
  r.vram = 1 * GiB;
  h.feed(LeaseRequested{3, r});
  EXPECT_EQ(h.arbiter.next_lease_id(), 1027u);
  // A lease claimed from another host (id 2050: slot 2) leaves this host's ids in its slot.
  h.arbiter.begin_claim("gpu3", h.now);
  ClusterSynced s;
  Lease c;
  c.id = 2050;
  c.state = LeaseState::granted;
  c.gpu = 0;
  c.request.vram = 1 * GiB;
  c.request.cluster = true;
  s.claimed.push_back(c);
  h.feed(s);
  EXPECT_EQ(h.arbiter.lease(2050)->state, LeaseState::granted);
  EXPECT_EQ(h.arbiter.next_lease_id(), 1027u);
  h.feed(LeaseRequested{1027, r});
  EXPECT_EQ(h.arbiter.next_lease_id(), 2051u);
  // A restore with a foreign id above this host's keeps the slot too.
  Host back;
  back.arbiter.set_lease_id_space(1024, 3);
  Lease kept = c;
  kept.id = 5000;  // slot 904's
  back.feed(Tick{});
  back.arbiter.restore_leases({kept}, {}, back.now, 1);
  EXPECT_EQ(back.arbiter.next_lease_id(), 5123u);  // 5 * 1024 + 3
}

}  // namespace
}  // namespace vramd
