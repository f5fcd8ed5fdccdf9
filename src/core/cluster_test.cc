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

// gpu1's GPU 0: 6 GiB free, an idle comfyui holding 16 GiB that may be unloaded (20 s reload).
ClaimContext with_idle_comfyui() {
  ClaimContext c = one_gpu(6 * GiB);
  c.gpus[0].holders = "comfyui holds 16.0 GiB, idle 5 min";
  c.gpus[0].evictable.push_back({"comfyui", 16 * GiB, 20s, MonoTime(1s)});
  c.at = MonoTime(100s);
  c.patience = 30s;
  return c;
}

Lease queued_at(uint64_t id, Bytes vram, MonoTime at) {
  Lease l = queued(id, vram);
  l.requested_at = at;
  return l;
}

TEST(ChooseClaims, AHostMakesRoomOnlyOnceEveryOtherHostHasSaidItCannotTakeTheLeaseAsItIs) {
  ClaimContext c = with_idle_comfyui();
  // gpu2 has not said why it cannot take it yet (it may have room: then it grants it, and says
  // nothing): gpu1 waits, and says what it could do.
  std::map<uint64_t, ClaimPeers> peers;
  peers[1].unconsidered = 1;
  ClaimDecision d = choose_claims(c, {queued_at(1, 12 * GiB, MonoTime(95s))}, peers);
  EXPECT_TRUE(d.grant.empty());
  EXPECT_TRUE(d.evict.empty());
  EXPECT_EQ(d.evict_costs.at(1), 20000);
  EXPECT_EQ(d.reasons.at(1),
            "gpu1: needs 12.0 GiB; GPU 0: 6.0 GiB free of 24.0 GiB; comfyui holds 16.0 GiB, idle 5 "
            "min; could take it after unloading comfyui (16.0 GiB, idle); first, the other hosts' "
            "word that none has room for it as it is");

  // Every other live host has said why it cannot: gpu1 unloads comfyui for it.
  peers[1].unconsidered = 0;
  d = choose_claims(c, {queued_at(1, 12 * GiB, MonoTime(95s))}, peers);
  ASSERT_EQ(d.evict.size(), 1u);
  EXPECT_EQ(d.evict[0].lease, 1u);
  EXPECT_EQ(d.evict[0].gpu, 0u);
  EXPECT_EQ(d.evict[0].services, std::vector<std::string>{"comfyui"});
  EXPECT_TRUE(d.grant.empty());
  EXPECT_EQ(d.reasons.at(1),
            "gpu1: needs 12.0 GiB; GPU 0: 6.0 GiB free of 24.0 GiB; comfyui holds 16.0 GiB, idle 5 "
            "min; unloading comfyui for it");

  // A host that never says (it is live, its claims fail) holds it up for `patience` only; a
  // lease that names this host waits for no one.
  peers[1].unconsidered = 1;
  EXPECT_EQ(choose_claims(c, {queued_at(1, 12 * GiB, MonoTime(70s))}, peers).evict.size(), 1u);
  Lease named = queued_at(1, 12 * GiB, MonoTime(95s));
  named.request.host = "gpu1";
  EXPECT_EQ(choose_claims(c, {named}, peers).evict.size(), 1u);

  // Nothing evictable, or not enough: no eviction, and the reason does not promise one.
  c.gpus[0].evictable[0].bytes = 4 * GiB;
  peers[1].unconsidered = 0;
  d = choose_claims(c, {queued_at(1, 12 * GiB, MonoTime(95s))}, peers);
  EXPECT_TRUE(d.evict.empty());
  EXPECT_FALSE(d.evict_costs.count(1));
  EXPECT_EQ(d.reasons.at(1).find("could take it"), std::string::npos) << d.reasons.at(1);
}

TEST(ChooseClaims, OnlyTheCheapestHostMakesRoomAndNeverWhileAnotherIs) {
  ClaimContext c = with_idle_comfyui();
  std::vector<Lease> l = {queued_at(1, 12 * GiB, MonoTime(95s))};
  std::map<uint64_t, ClaimPeers> peers;
  peers[1].evict_costs = {{"gpu2", 10000}};  // gpu2 would unload something quicker to reload
  ClaimDecision d = choose_claims(c, l, peers);
  EXPECT_TRUE(d.evict.empty());
  EXPECT_NE(d.reasons.at(1).find("gpu2 can make room for it more cheaply"), std::string::npos);
  peers[1].evict_costs = {{"gpu0", 20000}};  // as cheap: the lower name does it
  EXPECT_TRUE(choose_claims(c, l, peers).evict.empty());
  peers[1].evict_costs = {{"gpu2", 20000}};
  EXPECT_EQ(choose_claims(c, l, peers).evict.size(), 1u);

  // Another host is making room for it: this one does not too.
  peers[1].evict_costs.clear();
  peers[1].making_room = "gpu3";
  d = choose_claims(c, l, peers);
  EXPECT_TRUE(d.evict.empty());
  EXPECT_TRUE(d.unmark.empty());
  EXPECT_NE(d.reasons.at(1).find("could take it after unloading comfyui (16.0 GiB, idle); gpu3 is "
                                 "making room for it"),
            std::string::npos)
      << d.reasons.at(1);
  // ... but a host with room as it is still takes it.
  c.gpus[0].free = 13 * GiB;
  d = choose_claims(c, l, peers);
  ASSERT_EQ(d.grant.size(), 1u);
  EXPECT_TRUE(d.evict.empty());
}

TEST(ChooseClaims, WhileItUnloadsTheLeaseHoldsTheLineAndIfThatFreedTooLittleItGoesBack) {
  ClaimContext c = with_idle_comfyui();
  c.gpus[0].evictable.clear();  // comfyui is being unloaded: no candidate any more
  c.evicting[1] = {1, 0, {"comfyui"}};
  std::map<uint64_t, ClaimPeers> peers;
  peers[1].making_room = "gpu1";
  std::vector<Lease> l = {queued_at(1, 12 * GiB, MonoTime(95s)),
                          queued_at(2, 4 * GiB, MonoTime(96s))};
  ClaimDecision d = choose_claims(c, l, peers);
  EXPECT_TRUE(d.grant.empty());  // #2 would fit the 6 GiB, but the room is #1's
  EXPECT_TRUE(d.evict.empty());
  EXPECT_TRUE(d.unmark.empty());
  EXPECT_NE(d.reasons.at(1).find("; unloading comfyui for it"), std::string::npos)
      << d.reasons.at(1);
  EXPECT_EQ(d.reasons.at(2), "gpu1: needs 4.0 GiB; queued behind lease #1");

  // The unload has its verdict and freed nothing: the lease is every host's again.
  c.evicting.clear();
  c.gpus[0].holders = "comfyui holds 16.0 GiB, unload ineffective; next try in 8 min";
  d = choose_claims(c, l, peers);
  EXPECT_EQ(d.unmark, std::vector<uint64_t>{1});
  EXPECT_TRUE(d.evict.empty());
  EXPECT_NE(
      d.reasons.at(1).find("unloading for it freed too little: back to the queue for every host"),
      std::string::npos)
      << d.reasons.at(1);

  // Behind another lease here now (which took the room): given back all the same.
  std::vector<Lease> behind = {queued_at(3, 20 * GiB, MonoTime(90s)), l[0]};
  d = choose_claims(c, behind, peers);
  EXPECT_EQ(d.unmark, std::vector<uint64_t>{1});
  EXPECT_EQ(d.reasons.at(1), "gpu1: needs 12.0 GiB; queued behind lease #3");

  // It freed enough: granted here, where the memory went.
  c.gpus[0].free = 22 * GiB;
  d = choose_claims(c, l, peers);
  EXPECT_EQ(d.grant, (std::vector<std::pair<uint64_t, unsigned>>{{1, 0}, {2, 0}}));
  EXPECT_TRUE(d.unmark.empty());
}

TEST(ChooseClaims, TheGpuWhereUnloadingCostsLeastIsWhereTheLeaseWaits) {
  ClaimContext c = with_idle_comfyui();  // GPU 0: comfyui, 20 s
  c.gpus.push_back({1, 8 * GiB, 24 * GiB, "ollama holds 10.0 GiB, idle 2 min"});
  c.gpus[1].evictable.push_back({"ollama", 10 * GiB, 10s, MonoTime(2s)});  // 10 s
  ClaimDecision d = choose_claims(c, {queued_at(1, 12 * GiB, MonoTime(95s))});
  ASSERT_EQ(d.evict.size(), 1u);
  EXPECT_EQ(d.evict[0].gpu, 1u);
  EXPECT_EQ(d.evict[0].services, std::vector<std::string>{"ollama"});
  EXPECT_EQ(d.evict_costs.at(1), 10000);
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
  // In touch with the store from the start (self-fencing; the Fence tests say otherwise).
  explicit Host(bool in_touch = true) {
    if (in_touch) feed(StoreContact{now.mono});
  }
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

// One host with one 24 GiB GPU and a ComfyUI ("comfy", process svc-comfy) holding 16 GiB.
struct ComfyHost {
  Arbiter arbiter{config()};
  Now now = Now(MonoTime(10s));
  Bytes comfy_bytes = 16 * GiB;
  static Config config() {
    Config c;
    c.gpu.baseline = 0;
    ServiceConfig s;
    s.name = "comfy";
    s.kind = "comfyui";
    s.url = "http://127.0.0.1:8188";
    s.match.cmdline = "^svc-comfy$";
    s.min_idle = 30s;
    c.services.push_back(s);
    return c;
  }
  ComfyHost() { feed(StoreContact{now.mono}); }
  std::vector<Action> feed(const Event& e) { return arbiter.handle(e, now); }
  void sample() {
    SampleTaken s;
    GpuSample g;
    g.index = 0;
    g.name = "NVIDIA GeForce RTX 3090";
    g.total = 24 * GiB;
    if (comfy_bytes) {
      g.processes.push_back({101, comfy_bytes, ""});
      ProcessInfo info;
      info.pid = 101;
      info.ppid = 1;
      info.comm = "python3";
      info.cmdline = "svc-comfy";
      s.host.processes.push_back(info);
    }
    g.used = comfy_bytes;
    s.gpus.gpus.push_back(g);
    s.gpus.backend = "test";
    s.host.mem_available = 64 * GiB;
    feed(s);
  }
  void probe(bool busy) {
    ServiceProbe p;
    p.reachable = true;
    p.busy = busy;
    p.models = {"model"};
    feed(ProbeDone{"comfy", p});
  }
};

int unload_calls(const std::vector<Action>& actions) {
  int n = 0;
  for (const auto& a : actions) n += std::holds_alternative<CallUnload>(a);
  return n;
}

TEST(ClusterAdmission, AClaimOffersOnlyIdleServicesAndItsEvictionUnloadsThroughServicePolicy) {
  ComfyHost h;
  h.sample();
  h.probe(true);  // busy
  h.now.mono += 40s;
  h.sample();
  h.probe(true);
  ClaimContext busy = h.arbiter.begin_claim("gpu1", h.now);
  ASSERT_EQ(busy.gpus.size(), 1u);
  EXPECT_TRUE(busy.gpus[0].evictable.empty());  // never a busy service
  h.feed(ClusterSynced{});

  h.probe(false);
  h.now.mono += 40s;  // idle past min_idle
  h.sample();
  h.probe(false);
  ClaimContext idle = h.arbiter.begin_claim("gpu1", h.now);
  ASSERT_EQ(idle.gpus[0].evictable.size(), 1u);
  EXPECT_EQ(idle.gpus[0].evictable[0].service, "comfy");
  EXPECT_EQ(idle.gpus[0].evictable[0].bytes, 16 * GiB);
  EXPECT_EQ(idle.patience, Config{}.daemon.host_timeout);

  // The claim chose to make room for lease 2050 (queued on another host): comfy is unloaded.
  ClusterSynced s;
  s.evict.push_back({2050, 0, {"comfy"}});
  auto actions = h.feed(s);
  EXPECT_EQ(unload_calls(actions), 1);
  EXPECT_TRUE(has_event(actions, "lease.evicting"));
  EXPECT_EQ(h.arbiter.service("comfy")->state, ServiceState::unloading);
  uint64_t unload_id = 0;
  for (const auto& a : actions)
    if (auto* c = std::get_if<CallUnload>(&a)) unload_id = c->unload_id;
  // While it unloads, the next claim knows it is making room for 2050 and offers comfy to none.
  ClaimContext during = h.arbiter.begin_claim("gpu1", h.now);
  ASSERT_TRUE(during.evicting.count(2050));
  EXPECT_EQ(during.evicting.at(2050).services, std::vector<std::string>{"comfy"});
  EXPECT_TRUE(during.gpus[0].evictable.empty());
  // A second answer asking the same is not a second unload.
  EXPECT_EQ(unload_calls(h.feed(s)), 0);

  // The unload's verdict: the eviction is over, the claim no longer says it makes room.
  UnloadCall call;
  call.result = UnloadCall::Result::requested;
  h.feed(UnloadCallDone{"comfy", unload_id, call, 50ms});
  h.comfy_bytes = 0;
  for (int i = 0; i < 8; ++i) {
    h.now.mono += 250ms;
    h.sample();
  }
  ASSERT_NE(h.arbiter.service("comfy")->state, ServiceState::unloading);
  ClaimContext after = h.arbiter.begin_claim("gpu1", h.now);
  EXPECT_TRUE(after.evicting.empty());
  EXPECT_EQ(after.gpus[0].free, 24 * GiB);
}

TEST(ClusterAdmission, AServiceBusySinceTheClaimIsNotEvicted) {
  ComfyHost h;
  h.sample();
  h.probe(false);
  h.now.mono += 40s;
  h.sample();
  h.probe(false);
  ClaimContext ctx = h.arbiter.begin_claim("gpu1", h.now);
  ASSERT_EQ(ctx.gpus[0].evictable.size(), 1u);
  h.probe(true);  // a request came in while the claim was in the store
  ClusterSynced s;
  s.evict.push_back({2050, 0, {"comfy"}});
  auto actions = h.feed(s);
  EXPECT_EQ(unload_calls(actions), 0);
  EXPECT_FALSE(has_event(actions, "lease.evicting"));
  EXPECT_TRUE(h.arbiter.begin_claim("gpu1", h.now).evicting.empty());  // the store's mark goes
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

// ---- Self-fencing and tokens (issue 30; docs/api.md "Guarantees") ----

// A shared lease claimed here (queued here first): `id`, with `on_lost`.
void claim_here(Host& h, uint64_t id, OnHostLost on_lost, uint64_t token) {
  LeaseRequest r;
  r.vram = 2 * GiB;
  r.cluster = true;
  r.pid = 700 + static_cast<int>(id);
  r.on_host_lost = on_lost;
  h.feed(LeaseRequested{id, r});
  h.arbiter.begin_claim("gpu1", h.now);
  ClusterSynced s;
  Lease c = *h.arbiter.lease(id);
  c.state = LeaseState::granted;
  c.gpu = 0;
  c.token = token;
  s.claimed.push_back(c);
  h.feed(s);
}

bool has_lease_change(const std::vector<Action>& actions, uint64_t id, LeaseState state) {
  for (const auto& a : actions)
    if (auto* c = std::get_if<LeaseChanged>(&a); c && c->lease.id == id && c->lease.state == state)
      return true;
  return false;
}

TEST(Fence, CutOffForHalfTheHostTimeoutAHostGivesUpItsSharedLeasesAndOnlyThose) {
  Host h;  // in touch at 10 s; host_timeout 30 s: its shared leases are its own until 25 s
  h.sample();
  claim_here(h, 1, OnHostLost::requeue, 41);
  claim_here(h, 2, OnHostLost::end, 42);
  LeaseRequest local;
  local.vram = 1 * GiB;
  local.pid = 900;
  h.feed(LeaseRequested{3, local});
  ASSERT_EQ(h.arbiter.lease(1)->state, LeaseState::granted);
  EXPECT_EQ(h.arbiter.lease(1)->token, 41u);
  ASSERT_EQ(h.arbiter.lease(3)->state, LeaseState::granted);
  // The fence is a deadline of its own, to the millisecond (not the once-a-second walk).
  EXPECT_EQ(h.arbiter.next_deadline(), MonoTime(25s));

  h.now = Now(MonoTime(25s) - 1ms);
  h.feed(Tick{});
  EXPECT_EQ(h.arbiter.lease(1)->state, LeaseState::granted);
  h.now = Now(MonoTime(25s));
  auto actions = h.feed(Tick{});
  EXPECT_TRUE(has_event(actions, "lease.lost"));
  EXPECT_EQ(h.arbiter.lease(1)->state, LeaseState::lost);
  EXPECT_NE(h.arbiter.lease(1)->end_reason.find("cut off from the store for 15 s"), std::string::npos)
      << h.arbiter.lease(1)->end_reason;
  EXPECT_NE(h.arbiter.lease(1)->end_reason.find("left for the store to re-queue"), std::string::npos);
  EXPECT_EQ(h.arbiter.lease(2)->state, LeaseState::lost);
  EXPECT_NE(h.arbiter.lease(2)->end_reason.find("ended (on_host_lost = end)"), std::string::npos);
  // Both are written (the store keeps a requeue's row for a claim round to queue again).
  EXPECT_TRUE(has_lease_change(actions, 1, LeaseState::lost));
  EXPECT_TRUE(has_lease_change(actions, 2, LeaseState::lost));
  EXPECT_EQ(h.arbiter.cluster_fenced(), std::vector<uint64_t>{1});
  EXPECT_TRUE(h.arbiter.cluster_granted().empty());
  EXPECT_EQ(h.arbiter.lease(3)->state, LeaseState::granted);  // this host's own: never fenced
  // Cut off, it claims nothing, and says why.
  ClaimContext ctx = h.arbiter.begin_claim("gpu1", h.now);
  EXPECT_NE(ctx.cut_off.find("cut off from the store for 15 s"), std::string::npos) << ctx.cut_off;
  h.feed(ClusterSynced{});
}

TEST(Fence, HeartbeatsInTimeKeepTheLeaseForAsLongAsTheyCome) {
  Host h;
  h.sample();
  claim_here(h, 1, OnHostLost::requeue, 7);
  for (int i = 1; i <= 24; ++i) {  // two minutes, a heartbeat taken every 5 s
    h.now = Now(MonoTime(10s + i * 5s));
    h.feed(StoreContact{h.now.mono});
    h.feed(Tick{});
  }
  EXPECT_EQ(h.arbiter.lease(1)->state, LeaseState::granted);
  EXPECT_EQ(h.arbiter.next_deadline(), MonoTime(130s + 15s));
  // A heartbeat whose answer comes late counts from when it was sent, not from its answer.
  h.now = Now(MonoTime(150s));
  h.feed(StoreContact{MonoTime(131s)});
  EXPECT_EQ(h.arbiter.next_deadline(), MonoTime(146s));
  h.now = Now(MonoTime(146s));
  h.feed(Tick{});
  EXPECT_EQ(h.arbiter.lease(1)->state, LeaseState::lost);
}

TEST(Fence, AHostNeverInTouchSinceItStartedClaimsNothingAndHoldsNoSharedLease) {
  Host h(/*in_touch=*/false);
  h.sample();
  LeaseRequest r;
  r.vram = 2 * GiB;
  r.cluster = true;
  r.pid = 777;
  h.feed(LeaseRequested{1, r});
  ClaimContext ctx = h.arbiter.begin_claim("gpu1", h.now);
  EXPECT_EQ(ctx.cut_off, "no heartbeat written to the store yet");
  ClaimDecision d = choose_claims(ctx, {*h.arbiter.lease(1)});
  EXPECT_TRUE(d.grant.empty());
  EXPECT_NE(d.reasons[1].find("no heartbeat written to the store yet"), std::string::npos);
  h.feed(ClusterSynced{});

  // A shared lease restored granted (the previous process held it) is given up at the first
  // tick when no heartbeat has been taken since the start.
  Host back(/*in_touch=*/false);
  Lease kept = *h.arbiter.lease(1);
  kept.state = LeaseState::granted;
  kept.gpu = 0;
  kept.granted_at = MonoTime(5s);
  back.arbiter.restore_leases({kept}, {1}, back.now, 2);
  auto actions = back.feed(Tick{});
  EXPECT_EQ(back.arbiter.lease(1)->state, LeaseState::lost);
  EXPECT_NE(back.arbiter.lease(1)->end_reason.find("no heartbeat written to the store since vramd "
                                                   "started"),
            std::string::npos);
  // With one heartbeat taken before the restore (as the daemon does), it is kept.
  Host fresh;
  fresh.arbiter.restore_leases({kept}, {1}, fresh.now, 2);
  fresh.feed(Tick{});
  EXPECT_EQ(fresh.arbiter.lease(1)->state, LeaseState::granted);
}

TEST(Fence, AFencedLeaseComesBackQueuedHereAndAClaimAnsweredLateIsGivenUpAtOnce) {
  Host h;
  h.sample();
  claim_here(h, 1, OnHostLost::requeue, 5);
  h.now = Now(MonoTime(40s));
  h.feed(Tick{});
  ASSERT_EQ(h.arbiter.lease(1)->state, LeaseState::lost);
  // Back in touch: the claim round queues its row again, kept here; never granted by itself.
  h.feed(StoreContact{MonoTime(40s)});
  ClusterSynced s;
  Lease back = after_host_lost(*h.arbiter.lease(1), "gpu1", h.now);
  back.state = LeaseState::queued;
  s.requeued_here.push_back(back);
  s.fence_done.push_back(1);
  h.arbiter.begin_claim("gpu1", h.now);
  auto actions = h.feed(s);
  EXPECT_TRUE(has_event(actions, "lease.requeued"));
  EXPECT_EQ(h.arbiter.lease(1)->state, LeaseState::queued);
  EXPECT_FALSE(h.arbiter.lease(1)->request.pid);  // its holder was told it was lost
  EXPECT_EQ(h.arbiter.cluster_queued(10), std::vector<uint64_t>{1});
  EXPECT_TRUE(h.arbiter.cluster_fenced().empty());

  // A claim that was asked in touch and answered after the fence fell due is given back at once.
  // Its holder still waits: the lease stays queued (never granted, never lost) and is fenced, for
  // the next round to queue its row again.
  h.now = Now(MonoTime(56s));  // 16 s after the last heartbeat
  h.arbiter.begin_claim("gpu1", h.now);
  ClusterSynced late;
  Lease c = *h.arbiter.lease(1);
  c.state = LeaseState::granted;
  c.gpu = 0;
  c.token = 9;
  late.claimed.push_back(c);
  actions = h.feed(late);
  EXPECT_EQ(h.arbiter.lease(1)->state, LeaseState::queued);
  EXPECT_FALSE(has_event(actions, "lease.granted"));
  EXPECT_FALSE(has_event(actions, "lease.lost"));
  EXPECT_TRUE(has_event(actions, "lease.claim_given_up"));
  EXPECT_FALSE(has_lease_change(actions, 1, LeaseState::granted));
  EXPECT_NE(h.arbiter.lease(1)->reason.text.find("cut off from the store for 16 s"),
            std::string::npos)
      << h.arbiter.lease(1)->reason.text;
  EXPECT_TRUE(h.arbiter.cluster_granted().empty());
  EXPECT_EQ(h.arbiter.cluster_fenced(), std::vector<uint64_t>{1});
  EXPECT_EQ(h.arbiter.cluster_queued(10), std::vector<uint64_t>{1});  // told if it moved
  // Back in touch, the round queues its row again; it waits here as before and a claim in touch
  // grants it.
  h.feed(StoreContact{MonoTime(57s)});
  h.now = Now(MonoTime(57s));
  ClusterSynced again;
  again.requeued_here.push_back(back);
  again.fence_done.push_back(1);
  h.arbiter.begin_claim("gpu1", h.now);
  h.feed(again);
  EXPECT_EQ(h.arbiter.lease(1)->state, LeaseState::queued);
  EXPECT_TRUE(h.arbiter.cluster_fenced().empty());
  EXPECT_EQ(h.arbiter.cluster_queued(10), std::vector<uint64_t>{1});
  h.arbiter.begin_claim("gpu1", h.now);
  c.token = 10;
  ClusterSynced in_time;
  in_time.claimed.push_back(c);
  actions = h.feed(in_time);
  EXPECT_EQ(h.arbiter.lease(1)->state, LeaseState::granted);
  EXPECT_EQ(h.arbiter.lease(1)->token, 10u);

  // A lease with on_host_lost = end claimed late is granted and ended lost at once, as before:
  // its row is not queued again by a fence.
  h.now = Now(MonoTime(80s));  // 23 s after the last heartbeat
  LeaseRequest r;
  r.vram = 1 * GiB;
  r.cluster = true;
  r.pid = 990;
  r.on_host_lost = OnHostLost::end;
  h.feed(LeaseRequested{2, r});
  h.arbiter.begin_claim("gpu1", h.now);
  ClusterSynced late_end;
  Lease e = *h.arbiter.lease(2);
  e.state = LeaseState::granted;
  e.gpu = 0;
  e.token = 11;
  late_end.claimed.push_back(e);
  actions = h.feed(late_end);
  EXPECT_EQ(h.arbiter.lease(2)->state, LeaseState::lost);
}

TEST(Fence, AFencedLeaseReleasedThroughAnotherHostMeanwhileEndsHereWithItsEvent) {
  Host h;
  h.sample();
  claim_here(h, 1, OnHostLost::requeue, 5);
  h.now = Now(MonoTime(40s));
  h.feed(Tick{});
  ASSERT_EQ(h.arbiter.lease(1)->state, LeaseState::lost);
  ASSERT_EQ(h.arbiter.cluster_fenced(), std::vector<uint64_t>{1});
  // Back in touch: its holder released it through another host's API meanwhile. The store
  // leaves the row for this host to end: its end and its event, one write (Daemon::apply).
  h.feed(StoreContact{MonoTime(40s)});
  ClusterSynced s;
  Lease end = *h.arbiter.lease(1);
  end.state = LeaseState::released;
  end.end_reason = "released from another host's API";
  s.fence_released.push_back(end);
  s.fence_done.push_back(1);
  h.arbiter.begin_claim("gpu1", h.now);
  auto actions = h.feed(s);
  bool paired = false;
  for (size_t i = 0; i + 1 < actions.size(); ++i) {
    auto* e = std::get_if<EmitEvent>(&actions[i]);
    auto* lc = std::get_if<LeaseChanged>(&actions[i + 1]);
    if (e && lc && e->event.type == "lease.released" && e->event.lease == 1u &&
        lc->lease.id == 1u && lc->lease.state == LeaseState::released)
      paired = true;
  }
  EXPECT_TRUE(paired);
  EXPECT_EQ(h.arbiter.lease(1)->state, LeaseState::released);
  EXPECT_EQ(h.arbiter.lease(1)->end_reason, "released from another host's API");
  EXPECT_TRUE(h.arbiter.cluster_fenced().empty());
  EXPECT_TRUE(h.arbiter.cluster_granted().empty());
  // Told once: a later round that says it again changes nothing.
  h.arbiter.begin_claim("gpu1", h.now);
  actions = h.feed(s);
  EXPECT_FALSE(has_event(actions, "lease.released"));
}

// A lost host's lease its holder released meanwhile (through this host's API) is told as
// released, not as lost with its host: its holder asked for that end.
TEST(Fence, ALostHostsLeaseReleasedMeanwhileIsToldReleased) {
  Host h;
  h.sample();
  ClusterSynced s;
  s.answers_claim = false;
  LostHost lost;
  lost.host = "gpu2";
  Lease asked;
  asked.id = 7;
  asked.state = LeaseState::released;
  asked.end_reason = "released from another host's API (its host gpu2 was lost)";
  Lease gone;
  gone.id = 8;
  gone.state = LeaseState::released;  // on_host_lost = end
  gone.end_reason = "host gpu2 lost (no heartbeat)";
  lost.released = {asked};
  lost.ended = {gone};
  s.lost_hosts.push_back(lost);
  auto actions = h.feed(s);
  std::map<uint64_t, std::string> told;
  for (const auto& a : actions)
    if (auto* e = std::get_if<EmitEvent>(&a); e && e->event.lease) told[*e->event.lease] = e->event.type;
  EXPECT_EQ(told[7], "lease.released");
  EXPECT_EQ(told[8], "lease.host_lost");
}

TEST(Fence, AQueuedLeaseAnotherHostTookOverWhileThisOneWasCutOffIsNoLongerKeptHere) {
  Host h;
  h.sample();
  LeaseRequest r;
  r.vram = 2 * GiB;
  r.cluster = true;
  r.pid = 777;
  h.feed(LeaseRequested{1, r});
  ASSERT_EQ(h.arbiter.cluster_queued(10), std::vector<uint64_t>{1});
  h.arbiter.begin_claim("gpu1", h.now);
  ClusterSynced s;
  MovedLease m;
  m.id = 1;
  m.host = "gpu2";
  m.kept_there = true;
  s.moved.push_back(m);
  auto actions = h.feed(s);
  EXPECT_TRUE(has_event(actions, "lease.moved"));
  EXPECT_TRUE(h.arbiter.cluster_queued(10).empty());  // its heartbeats go through the store now
  ASSERT_TRUE(h.arbiter.lease(1));
  EXPECT_EQ(h.arbiter.lease(1)->state, LeaseState::queued);
  EXPECT_EQ(h.arbiter.lease(1)->elsewhere, "gpu2");
  // Its wait timeout and heartbeats are that host's: nothing of it ends here.
  h.now = Now(MonoTime(10min));
  h.feed(StoreContact{h.now.mono});
  actions = h.feed(Tick{});
  for (const auto& a : actions) EXPECT_FALSE(std::holds_alternative<LeaseChanged>(a));
}

TEST(Fence, ACutOffHostLeavesTheDeadlinesOfTheSharedLeasesItKeepsQueuedUntilItIsBackInTouch) {
  Host h;  // in touch at 10 s; lease_heartbeat 30 s
  h.sample();
  LeaseRequest r;
  r.vram = 2 * GiB;
  r.cluster = true;  // no pid: it needs heartbeats
  h.feed(LeaseRequested{1, r});
  LeaseRequest local = r;
  local.cluster = false;
  local.vram = 50 * GiB;  // never fits: stays queued
  h.feed(LeaseRequested{2, local});
  h.now = Now(MonoTime(10s + 31s));
  h.feed(Tick{});
  // Cut off since 10 s: another host may have taken lease 1 over and heard its heartbeats.
  EXPECT_EQ(h.arbiter.lease(1)->state, LeaseState::queued);
  EXPECT_EQ(h.arbiter.lease(2)->state, LeaseState::expired);  // this host's own: as ever
  // Back in touch, and still its own (no claim round said otherwise): it expires.
  h.feed(StoreContact{h.now.mono});
  h.now = Now(h.now.mono + 2s);
  h.feed(Tick{});
  EXPECT_EQ(h.arbiter.lease(1)->state, LeaseState::expired);
}

TEST(Tokens, EachGrantTakesALargerOneAndARestoreGoesOnFromTheLargestKept) {
  Host h;
  h.sample();
  LeaseRequest r;
  r.vram = 1 * GiB;
  r.pid = 900;
  h.feed(LeaseRequested{1, r});
  h.feed(LeaseRequested{2, r});
  uint64_t t1 = h.arbiter.lease(1)->token, t2 = h.arbiter.lease(2)->token;
  EXPECT_GT(t1, 0u);
  EXPECT_GT(t2, t1);
  Host back;
  Lease kept = *h.arbiter.lease(2);
  kept.token = 500;
  back.arbiter.restore_leases({kept}, {2}, back.now, 3);
  back.sample();
  back.feed(LeaseRequested{3, r});
  EXPECT_EQ(back.arbiter.lease(2)->token, 500u);
  EXPECT_EQ(back.arbiter.lease(3)->token, 501u);
}

}  // namespace
}  // namespace vramd
