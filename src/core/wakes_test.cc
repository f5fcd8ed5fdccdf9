// The wake in the core (core/wakes.h) and the depth of each sleep (core/wake.h choose_depth),
// driven through the Arbiter on a virtual clock: requests held for a sleeper, the room claimed
// through admission, the wake call, the load verified; host RAM choosing and deepening sleeps.
#include "core/arbiter.h"

#include <gtest/gtest.h>

#include <fmt/format.h>

namespace vramd {
// Named, not anonymous: its helpers share a unity batch with other tests' (cmake/unity.cmake).
namespace wakes_test {

using namespace std::chrono_literals;

ServiceConfig service(std::string name, std::string kind) {
  ServiceConfig s;
  s.name = std::move(name);
  s.kind = std::move(kind);
  s.url = "http://127.0.0.1:1";
  s.match.cmdline = "svc-" + s.name;
  s.min_idle = 10s;
  return s;
}

// One 24 GiB GPU on a 64 GiB host. Services' processes hold `bytes` on the GPU and `rss` in
// host RAM; every step advances the virtual clock by a second, samples and ticks. The shell's
// part is played here: an unload call frees what `on_unload` says, a wake call loads again.
class Host {
 public:
  explicit Host(std::vector<ServiceConfig> services, HostConfig host = {}) {
    Config c;
    c.gpu.baseline = 400 * MiB;
    c.host = host;
    c.services.assign(services.begin(), services.end());
    int pid = 100;
    for (const auto& s : c.services) pids_[s.name] = pid++;
    arbiter_ = std::make_unique<Arbiter>(c);
  }

  Arbiter& arbiter() { return *arbiter_; }
  MonoTime now() const { return t_; }
  std::map<std::string, Bytes> bytes, rss;
  Bytes mem_available = 40 * GiB, mem_total = 64 * GiB;
  // What an unload leaves on the GPU (a CUDA context), and what a sleep1 adds to host RAM.
  std::map<std::string, Bytes> kept_asleep, host_weights;
  std::map<std::string, Bytes> loaded_bytes;  // what a wake brings back
  bool answer_wakes = true;  // false: CallWake stays unanswered (a wake in flight)
  UnloadCall wake_answer{UnloadCall::Result::requested, "POST /wake_up → 200"};

  std::vector<Action> feed(const Event& e) {
    std::vector<Action> out = arbiter_->handle(e, Now(t_));
    for (const Action& a : out) {
      log_.push_back(a);
      if (const auto* c = std::get_if<CallUnload>(&a)) {
        unload_depths.push_back(c->depth);
        Bytes before = bytes[c->service];
        bytes[c->service] = kept_asleep[c->service];
        if (c->depth == SleepDepth::sleep1) rss[c->service] += host_weights[c->service];
        if (c->depth == SleepDepth::sleep1) mem_available -= host_weights[c->service];
        loaded_bytes.try_emplace(c->service, before);
        pending_.push_back(UnloadCallDone{c->service, c->unload_id,
                                          {UnloadCall::Result::requested, "POST → 200"}, 10ms});
      } else if (const auto* w = std::get_if<CallWake>(&a)) {
        wake_calls.push_back(*w);
        if (answer_wakes) answer_wake(*w);
      } else if (const auto* l = std::get_if<Lifecycle>(&a)) {
        lifecycles.push_back(fmt::format("{} {}", to_string(l->action), l->service));
        if (l->action == Command::stop) {
          mem_available += rss[l->service] > 0 ? host_weights[l->service] : 0;
          bytes[l->service] = 0;
          rss[l->service] = 0;
          pending_.push_back(LifecycleDone{l->service, l->action, true, "stopped"});
        }
      } else if (const auto* f = std::get_if<WakeFinished>(&a)) {
        finished[f->id] = *f;
      } else if (const auto* p = std::get_if<WakeProgressed>(&a)) {
        progress[p->id].push_back(p->text);
      } else if (const auto* r = std::get_if<RememberWakeTime>(&a)) {
        remembered.push_back(r->time);
      } else if (const auto* e = std::get_if<EmitEvent>(&a)) {
        events.push_back(e->event.type + ": " + e->event.message);
      }
    }
    while (!pending_.empty()) {
      Event next = pending_.front();
      pending_.erase(pending_.begin());
      feed(next);
    }
    return out;
  }
  void answer_wake(const CallWake& w) {
    if (wake_answer.result != UnloadCall::Result::requested) {  // refused: nothing loads
      pending_.push_back(WakeCallDone{w.service, w.wake_id, wake_answer, 50ms});
      return;
    }
    bytes[w.service] = loaded_bytes[w.service];
    if (w.depth == SleepDepth::sleep1) {
      rss[w.service] -= std::min(rss[w.service], host_weights[w.service]);
      mem_available += host_weights[w.service];
    }
    pending_.push_back(WakeCallDone{w.service, w.wake_id, wake_answer, 800ms});
  }
  void sample() {
    SampleTaken s;
    GpuSample g;
    g.index = 0;
    g.total = 24 * GiB;
    g.used = 400 * MiB;
    for (const auto& [name, pid] : pids_) {
      Bytes b = bytes[name];
      if (b > 0) {
        g.processes.push_back({pid, b, ""});
        g.used += b;
      }
      ProcessInfo info;
      info.pid = pid;
      info.ppid = 1;
      info.comm = "python3";
      info.cmdline = "svc-" + name;
      info.rss = 1 * GiB + rss[name];
      info.cgroup.kind = CgroupIdentity::Kind::container;  // read where match.container is set
      info.cgroup.runtime = "docker";
      info.cgroup.container_name = name;
      s.host.processes.push_back(info);
    }
    s.host.mem_available = mem_available;
    s.host.mem_total = mem_total;
    s.gpus.backend = "test";
    s.gpus.gpus.push_back(g);
    feed(s);
  }
  void probe(const std::string& name, std::vector<std::string> models) {
    ServiceProbe p;
    p.reachable = true;
    p.busy = false;
    p.models = std::move(models);
    p.can_wake = true;
    feed(ProbeDone{name, p});
  }
  void step(Duration d = 1s) {
    t_ += d;
    sample();
    feed(Tick{});
  }
  void steps(int n) {
    for (int i = 0; i < n; ++i) step();
  }
  // Until the service is asleep (its unload's verdict in).
  bool unload(const std::string& name) {
    feed(UnloadRequested{name, UnloadReason::manual, 0, true});
    for (int i = 0; i < 10 && !arbiter_->service(name)->asleep; ++i) step();
    return arbiter_->service(name)->asleep.has_value();
  }
  uint64_t request(const std::string& service, const std::string& model, bool can_wake = true) {
    uint64_t id = next_id_++;
    feed(WakeRequested{id, service, model, can_wake});
    return id;
  }

  std::vector<SleepDepth> unload_depths;
  std::vector<CallWake> wake_calls;
  std::vector<std::string> lifecycles;
  std::map<uint64_t, WakeFinished> finished;
  std::map<uint64_t, std::vector<std::string>> progress;
  std::vector<WakeTime> remembered;
  std::vector<std::string> events;
  std::vector<Lease> leases() const { return arbiter_->leases(); }

 private:
  std::unique_ptr<Arbiter> arbiter_;
  MonoTime t_{Duration(1'000'000)};
  std::map<std::string, int> pids_;
  std::vector<Event> pending_;
  std::vector<Action> log_;
  uint64_t next_id_ = 1;
};

// A vLLM with sleep mode serving one model: 14 GiB loaded, 500 MiB of CUDA context asleep,
// 9 GiB of weights in host RAM at level 1.
Host vllm_host(HostConfig host = {}) {
  Host h({service("vllm", "vllm")}, host);
  h.bytes["vllm"] = 14 * GiB;
  h.kept_asleep["vllm"] = 500 * MiB;
  h.host_weights["vllm"] = 9 * GiB;
  h.steps(3);
  h.probe("vllm", {"qwen"});
  h.steps(40);  // idle past min_idle
  return h;
}

TEST(WakeDepth, HostRamThatFitsGivesLevelOneAndItsRamIsMeasured) {
  Host h = vllm_host();
  ASSERT_TRUE(h.unload("vllm"));
  ASSERT_EQ(h.unload_depths, std::vector<SleepDepth>{SleepDepth::sleep1});
  const ServiceStatus* st = h.arbiter().service("vllm");
  EXPECT_EQ(st->asleep->depth, SleepDepth::sleep1);
  EXPECT_EQ(st->asleep->host_ram, 9 * GiB);  // its RSS grew by that much
  EXPECT_TRUE(st->asleep->host_ram_measured);
  EXPECT_EQ(st->last_unload->depth, SleepDepth::sleep1);
  EXPECT_EQ(st->last_unload->host_ram_kept, 9 * GiB);
  // Asleep with 500 MiB of context on the GPU: still asleep, its model still its own.
  h.steps(5);
  h.probe("vllm", {"qwen"});
  EXPECT_TRUE(h.arbiter().service("vllm")->asleep.has_value());
  EXPECT_FALSE(h.arbiter().ready_for("vllm", "qwen", true));
}

TEST(WakeDepth, WhatASleeperHoldsIsNotLearnedAsItsModelsLoad) {
  // Put to sleep before its probe named its model: asleep, it lists the model and holds its
  // 500 MiB context. Learned as the model's peak, that would size its wake at 500 MiB.
  Host h({service("vllm", "vllm")});
  h.bytes["vllm"] = 14 * GiB;
  h.kept_asleep["vllm"] = 500 * MiB;
  h.steps(3);
  ASSERT_TRUE(h.unload("vllm"));
  h.probe("vllm", {"qwen"});
  h.steps(5);
  EXPECT_EQ(h.arbiter().service("vllm")->load_peaks.count("qwen"), 0u);
}

TEST(WakeDepth, HostRamShortGivesLevelTwo) {
  Host h = vllm_host();
  h.mem_available = 12 * GiB;  // 14 GiB of weights would not fit over the 6.4 GiB reserve
  h.step();
  ASSERT_TRUE(h.unload("vllm"));
  EXPECT_EQ(h.unload_depths, std::vector<SleepDepth>{SleepDepth::sleep2});
  EXPECT_EQ(h.arbiter().service("vllm")->asleep->depth, SleepDepth::sleep2);
  EXPECT_EQ(h.arbiter().service("vllm")->asleep->host_ram, 0u);
}

TEST(WakeDepth, ARamLeaseWhileAsleepDeepensTheSleeperThenIsGranted) {
  ServiceConfig v = service("vllm", "vllm");
  v.match.cmdline.clear();
  v.match.container = "vllm";  // vramd can stop it (a container)
  Host h({v});
  h.bytes["vllm"] = 14 * GiB;
  h.kept_asleep["vllm"] = 500 * MiB;
  h.host_weights["vllm"] = 9 * GiB;
  h.steps(3);
  h.probe("vllm", {"qwen"});
  h.steps(40);
  ASSERT_TRUE(h.unload("vllm"));
  ASSERT_EQ(h.arbiter().service("vllm")->asleep->depth, SleepDepth::sleep1);
  Bytes free_now = h.mem_available;
  LeaseRequest r;
  r.vram = 1 * GiB;
  r.ram = free_now + 4 * GiB;  // more than is free: only the sleeper's 9 GiB make it fit
  r.label = "trainer";
  uint64_t id = h.arbiter().next_lease_id();
  h.feed(LeaseRequested{id, r});
  EXPECT_EQ(h.arbiter().lease(id)->state, LeaseState::queued);
  h.steps(3);
  ASSERT_EQ(h.lifecycles, std::vector<std::string>{"stop vllm"});
  EXPECT_EQ(h.arbiter().service("vllm")->asleep->depth, SleepDepth::stop);
  h.steps(2);
  EXPECT_EQ(h.arbiter().lease(id)->state, LeaseState::granted);
  bool told = false;
  for (const auto& e : h.events) told |= e.starts_with("service.deepened: stopping vllm");
  EXPECT_TRUE(told);
}

TEST(Wake, ASleeperIsWokenThroughItsClaimAndTheClaimHoldsTheRoomUntilTheLoadShows) {
  Host h = vllm_host();
  ASSERT_TRUE(h.unload("vllm"));
  h.steps(2);
  uint64_t a = h.request("vllm", "qwen");
  uint64_t b = h.request("vllm", "qwen");  // joins the same wake
  h.step();
  ASSERT_EQ(h.wake_calls.size(), 1u);
  EXPECT_EQ(h.wake_calls[0].depth, SleepDepth::sleep1);
  ASSERT_TRUE(h.finished.count(a) && h.finished.count(b));
  EXPECT_EQ(h.finished[a].outcome, WakeOutcome::ready);
  EXPECT_EQ(h.finished[b].outcome, WakeOutcome::ready);
  EXPECT_EQ(h.finished[a].depth, SleepDepth::sleep1);
  EXPECT_FALSE(h.arbiter().service("vllm")->asleep.has_value());
  // Its time is learned (the call's 0 s on this clock counts from the grant), and kept.
  ASSERT_EQ(h.remembered.size(), 1u);
  EXPECT_EQ(h.remembered[0].depth, SleepDepth::sleep1);
  EXPECT_EQ(h.remembered[0].model, "qwen");
  // Until a sample shows the bytes, the claim keeps the room; then it ends.
  bool claim_ended = true;
  for (const auto& l : h.leases()) claim_ended &= !l.request.wake;
  EXPECT_TRUE(claim_ended);  // the sample of this step already showed 14 GiB
  // Progress was told to both: the room it needs, then the wake with its expected time.
  ASSERT_FALSE(h.progress[a].empty());
  EXPECT_EQ(h.progress[a].back(), "waking vllm from level 1, ~3.0 s");
}

TEST(Wake, AWakeTheServerRefusesEndsFailedAndGivesTheRoomBack) {
  Host h = vllm_host();
  ASSERT_TRUE(h.unload("vllm"));
  h.wake_answer = {UnloadCall::Result::failed, "POST /wake_up → 500"};
  uint64_t a = h.request("vllm", "qwen");
  h.step();
  ASSERT_TRUE(h.finished.count(a));
  EXPECT_EQ(h.finished[a].outcome, WakeOutcome::failed);
  EXPECT_EQ(h.finished[a].message, "wake vllm failed: POST /wake_up → 500");
  for (const auto& l : h.leases()) EXPECT_FALSE(l.request.wake) << "the claim outlived the wake";
  EXPECT_TRUE(h.arbiter().service("vllm")->asleep.has_value());  // still asleep
}

TEST(Wake, AWakeWithNoRoomTimesOutAndACancelledOneLetsItsRoomGo) {
  ServiceConfig v = service("vllm", "vllm");
  v.proxy.wake_timeout = 20s;
  ServiceConfig other = service("trainer-svc", "generic_http");
  other.pinned = true;  // never evicted: the room cannot be made
  Host h({v, other});
  h.bytes["vllm"] = 14 * GiB;
  h.kept_asleep["vllm"] = 500 * MiB;
  h.host_weights["vllm"] = 9 * GiB;
  h.steps(3);
  h.probe("vllm", {"qwen"});
  h.steps(40);
  ASSERT_TRUE(h.unload("vllm"));
  h.bytes["trainer-svc"] = 20 * GiB;  // took the card meanwhile
  h.steps(2);
  uint64_t a = h.request("vllm", "qwen");
  h.steps(3);
  EXPECT_FALSE(h.finished.count(a));
  ASSERT_FALSE(h.progress[a].empty());
  EXPECT_TRUE(h.progress[a].back().starts_with("waiting for GPU room: needs")) << h.progress[a].back();
  uint64_t claim = 0;
  for (const auto& l : h.leases())
    if (l.request.wake) claim = l.id;
  ASSERT_NE(claim, 0u);
  // The client goes away: its claim is cancelled, the room goes back to the queue.
  h.feed(WakeCancelled{a});
  EXPECT_EQ(h.finished[a].outcome, WakeOutcome::cancelled);
  EXPECT_EQ(h.arbiter().lease(claim)->state, LeaseState::cancelled);
  EXPECT_TRUE(h.wake_calls.empty());
  // Another waits out its wake_timeout on the virtual clock: timed out, naming the holder.
  uint64_t b = h.request("vllm", "qwen");
  h.steps(21);
  ASSERT_TRUE(h.finished.count(b));
  EXPECT_EQ(h.finished[b].outcome, WakeOutcome::timed_out);
  EXPECT_TRUE(h.finished[b].message.starts_with("vllm did not become ready within 20s"))
      << h.finished[b].message;
  for (const auto& l : h.leases()) EXPECT_FALSE(l.request.wake);
}

TEST(Wake, LearnedWakeTimesOrderTheEvictions) {
  // Two idle image servers hold the card; a lease needs one of them gone. Each would sleep at
  // level 1 (RAM is plenty): the one learned to come back in 1 s goes, not the 40 s one.
  ServiceConfig fast = service("fast", "comfyui");
  ServiceConfig slow = service("slow", "comfyui");
  Host h({fast, slow});
  h.bytes["fast"] = 10 * GiB;
  h.bytes["slow"] = 10 * GiB;
  h.host_weights["fast"] = h.host_weights["slow"] = 6 * GiB;
  h.steps(3);
  h.probe("fast", {});
  h.probe("slow", {});
  h.steps(40);
  std::vector<WakeTime> learned = {{"fast", "", SleepDepth::sleep1, 1s},
                                   {"slow", "", SleepDepth::sleep1, 40s}};
  h.arbiter().restore_wake_times(learned);
  LeaseRequest r;
  r.vram = 8 * GiB;
  r.label = "flux";
  uint64_t id = h.arbiter().next_lease_id();
  h.feed(LeaseRequested{id, r});
  h.steps(5);
  ASSERT_EQ(h.arbiter().lease(id)->state, LeaseState::granted);
  EXPECT_EQ(h.arbiter().lease(id)->evicted, std::vector<std::string>{"fast"});
  // And the other way round.
  Host h2({fast, slow});
  h2.bytes["fast"] = h2.bytes["slow"] = 10 * GiB;
  h2.steps(3);
  h2.probe("fast", {});
  h2.probe("slow", {});
  h2.steps(40);
  std::vector<WakeTime> reversed = {{"fast", "", SleepDepth::sleep1, 40s},
                                    {"slow", "", SleepDepth::sleep1, 1s}};
  h2.arbiter().restore_wake_times(reversed);
  uint64_t id2 = h2.arbiter().next_lease_id();
  h2.feed(LeaseRequested{id2, r});
  h2.steps(5);
  ASSERT_EQ(h2.arbiter().lease(id2)->state, LeaseState::granted);
  EXPECT_EQ(h2.arbiter().lease(id2)->evicted, std::vector<std::string>{"slow"});
}

TEST(Wake, AReadyServiceFinishesAtOnceAndAnUnknownOneIsRefused) {
  Host h = vllm_host();
  uint64_t a = h.request("vllm", "qwen");
  ASSERT_TRUE(h.finished.count(a));
  EXPECT_EQ(h.finished[a].outcome, WakeOutcome::ready);
  uint64_t b = h.request("nope", "");
  EXPECT_EQ(h.finished[b].outcome, WakeOutcome::refused);
  EXPECT_EQ(h.finished[b].message, "no service named 'nope'");
}

// ---- Prewarm (docs/proxy.md "Prewarm") ----

// `v` as the vLLM of vllm_host (14 GiB loaded, 500 MiB of context asleep, 9 GiB of weights at
// level 1), with `history` restored from the store; asked once (a busy spell) when `ask`.
Host asked_vllm(const ServiceConfig& v, bool ask, const std::vector<DemandHistory>& history = {}) {
  Host h({v});
  if (!history.empty()) h.arbiter().restore_demand(history);
  h.bytes["vllm"] = 14 * GiB;
  h.kept_asleep["vllm"] = 500 * MiB;
  h.host_weights["vllm"] = 9 * GiB;
  h.steps(3);
  h.probe("vllm", {"qwen"});
  if (ask) {
    h.feed(RequestsInFlight{"vllm", 1});
    h.step();
    h.feed(RequestsInFlight{"vllm", 0});
  }
  return h;
}

// vLLM with prewarm on, asked once (a busy spell), then evicted for a 16 GiB lease, which is
// still granted when this returns (its id: 900).
// With `comfy`, a ComfyUI holding 4 GiB beside it, idle.
Host evicted_vllm(Duration min_idle = 10s, bool comfy = false) {
  ServiceConfig v = service("vllm", "vllm");
  v.prewarm = true;
  v.min_idle = min_idle;
  std::vector<ServiceConfig> services = {v};
  if (comfy) services.push_back(service("comfy", "comfyui"));
  Host h(services);
  h.bytes["vllm"] = 14 * GiB;
  h.kept_asleep["vllm"] = 500 * MiB;
  h.host_weights["vllm"] = 9 * GiB;
  if (comfy) h.bytes["comfy"] = 4 * GiB;
  h.steps(3);
  h.probe("vllm", {"qwen"});
  if (comfy) h.probe("comfy", {});
  h.feed(RequestsInFlight{"vllm", 1});
  h.step();
  h.feed(RequestsInFlight{"vllm", 0});
  h.steps(5 + int(std::chrono::duration_cast<std::chrono::seconds>(min_idle).count()));
  LeaseRequest r;
  r.vram = 16 * GiB;
  r.gpu = 0;
  r.holder = "train";
  h.feed(LeaseRequested{900, r});
  // Granted once the bytes are gone; asleep once the unload's verdict is in.
  for (int i = 0; i < 20 && (h.arbiter().lease(900)->state != LeaseState::granted ||
                             !h.arbiter().service("vllm")->asleep);
       ++i)
    h.step();
  return h;
}

size_t count_prefix(const std::vector<std::string>& events, const std::string& prefix) {
  return size_t(std::count_if(events.begin(), events.end(), [&](const std::string& e) {
    return e.rfind(prefix, 0) == 0;
  }));
}

TEST(Prewarm, AnEvictedSleeperComesBackWhenTheRoomDoesAndIsCountedUsed) {
  Host h = evicted_vllm();
  ASSERT_EQ(h.arbiter().lease(900)->state, LeaseState::granted);
  ASSERT_TRUE(h.arbiter().service("vllm")->asleep) << fmt::format("{}", fmt::join(h.events, "\n"));
  EXPECT_EQ(h.arbiter().service("vllm")->asleep->reason, UnloadReason::eviction);
  // While the lease holds the room, nothing is woken: 7 GiB free, the wake needs 14. (Within
  // its heartbeat: it has no holder pid.)
  h.steps(20);
  EXPECT_TRUE(h.wake_calls.empty()) << fmt::format("{}", fmt::join(h.events, "\n"));
  h.feed(LeaseReleased{900});
  h.steps(12);
  ASSERT_EQ(h.wake_calls.size(), 1u);
  EXPECT_EQ(h.wake_calls[0].depth, SleepDepth::sleep1);
  EXPECT_EQ(count_prefix(h.events, "service.prewarmed: woke vllm from level 1 for a prewarm"), 1u)
      << fmt::format("{}", fmt::join(h.events, "\n"));
  const ServiceStatus* st = h.arbiter().service("vllm");
  EXPECT_FALSE(st->asleep);
  EXPECT_TRUE(st->prewarmed);
  // The wake time of a prewarm is learned like any other.
  ASSERT_FALSE(h.remembered.empty());
  // A request now finds it awake: the prewarm was used.
  EXPECT_TRUE(h.arbiter().ready_for("vllm", "qwen", true));
  h.feed(RequestsInFlight{"vllm", 1});
  EXPECT_EQ(count_prefix(h.events, "service.prewarm_used: vllm was asked"), 1u);
  EXPECT_FALSE(h.arbiter().service("vllm")->prewarmed);
}

TEST(Prewarm, NeverEvictsAnyoneForItsRoom) {
  Host h = evicted_vllm(10s, /*comfy=*/true);
  ASSERT_EQ(h.arbiter().lease(900)->state, LeaseState::granted);
  ASSERT_EQ(h.unload_depths.size(), 1u);  // vllm's eviction: enough alone
  // The idle ComfyUI grows to 10 GiB meanwhile: with the lease gone, 13.1 GiB are free and the
  // wake needs 14. Evicting the idle ComfyUI would make room; a prewarm never does.
  h.bytes["comfy"] = 10 * GiB;
  h.feed(LeaseReleased{900});
  h.steps(40);
  EXPECT_TRUE(h.wake_calls.empty());
  EXPECT_EQ(count_prefix(h.events, "service.prewarm"), 0u);
  EXPECT_EQ(h.unload_depths.size(), 1u);
  // Once ComfyUI gives its memory back by itself, the room is there and the prewarm comes.
  h.bytes["comfy"] = 1 * GiB;
  h.steps(12);
  EXPECT_EQ(h.wake_calls.size(), 1u);
}

TEST(Prewarm, ALeaseThatNeedsTheRoomSleepsItAgainAtOnceAndItIsNotPrewarmedAgainThisHour) {
  // min_idle 60 s: a prewarmed service that nobody asked gives its room back without it.
  Host h = evicted_vllm(60s);
  h.feed(LeaseReleased{900});
  h.steps(12);
  ASSERT_EQ(h.wake_calls.size(), 1u);
  h.steps(3);
  LeaseRequest r;
  r.vram = 16 * GiB;
  r.gpu = 0;
  r.holder = "train";
  h.feed(LeaseRequested{902, r});
  for (int i = 0; i < 15 && h.arbiter().lease(902)->state != LeaseState::granted; ++i) h.step();
  EXPECT_EQ(h.arbiter().lease(902)->state, LeaseState::granted);
  EXPECT_EQ(h.unload_depths.size(), 2u);
  EXPECT_EQ(count_prefix(h.events, "service.prewarm_unused: vllm goes back to sleep (eviction)"),
            1u)
      << fmt::format("{}", fmt::join(h.events, "\n"));
  // The lease done, the room is back, within the same hour: no second prewarm.
  h.feed(LeaseReleased{902});
  h.steps(40);
  EXPECT_EQ(h.wake_calls.size(), 1u);
  EXPECT_TRUE(h.arbiter().service("vllm")->asleep);
}

TEST(Prewarm, ALeaseQueuedWhileThePrewarmClaimsCancelsIt) {
  Host h = evicted_vllm();
  h.answer_wakes = false;  // the prewarm's wake call stays in flight
  h.feed(LeaseReleased{900});
  h.steps(12);
  ASSERT_EQ(h.wake_calls.size(), 1u);
  // The prewarm's claim is a granted lease of vramd's own, last in line.
  bool claim = false;
  for (const Lease& l : h.leases())
    if (l.request.prewarm && l.state == LeaseState::granted) claim = true;
  EXPECT_TRUE(claim);
  // The call answers; a lease comes while the load is verified: the claim gives its room back.
  h.answer_wake(h.wake_calls[0]);
  h.step();
  LeaseRequest r;
  r.vram = 16 * GiB;
  r.gpu = 0;
  r.holder = "train";
  h.feed(LeaseRequested{903, r});
  for (int i = 0; i < 15 && h.arbiter().lease(903)->state != LeaseState::granted; ++i) h.step();
  EXPECT_EQ(h.arbiter().lease(903)->state, LeaseState::granted);
  for (const Lease& l : h.leases()) EXPECT_FALSE(l.request.prewarm) << l.id;
}

TEST(Prewarm, ASleepByHandIsNotUndoneUntilItIsAskedAgain) {
  ServiceConfig v = service("vllm", "vllm");
  v.prewarm = true;
  Host h = asked_vllm(v, /*ask=*/true);
  h.steps(15);
  ASSERT_TRUE(h.unload("vllm"));
  h.steps(60);
  EXPECT_TRUE(h.wake_calls.empty());
  EXPECT_TRUE(h.arbiter().service("vllm")->asleep);
}

TEST(Prewarm, OffUnlessTheConfigSaysSo) {
  ServiceConfig v = service("vllm", "vllm");  // prewarm unset, [daemon] prewarm false
  Host h = asked_vllm(v, /*ask=*/true);
  h.steps(15);
  LeaseRequest r;
  r.vram = 16 * GiB;
  r.gpu = 0;
  h.feed(LeaseRequested{900, r});
  for (int i = 0; i < 15 && h.arbiter().lease(900)->state != LeaseState::granted; ++i) h.step();
  ASSERT_EQ(h.arbiter().lease(900)->state, LeaseState::granted);
  h.feed(LeaseReleased{900});
  h.steps(30);
  EXPECT_TRUE(h.wake_calls.empty());
}

// The weekly pattern alone: a vLLM put to sleep by its idle TTL counts no last hour, only the
// histogram restored from the store. The virtual clock starts on a Thursday at 00:16 UTC (hour
// 72 of the week).
Host ttl_sleeper_with_history(size_t busy_hour) {
  ServiceConfig v = service("vllm", "vllm");
  v.prewarm = true;
  v.unload_after_idle = 20s;
  DemandHistory d;
  d.service = "vllm";
  d.since = TimePoint(Duration(1'000'000)) - std::chrono::hours(24 * 7 * 4);  // four weeks ago
  d.counts[busy_hour] = 8;  // two spells in that hour, every week
  Host h = asked_vllm(v, /*ask=*/false, {d});
  for (int i = 0; i < 40 && !h.arbiter().service("vllm")->asleep; ++i) h.step();
  return h;
}

TEST(Prewarm, TheWeeklyPatternAloneWakesASleeperAtItsHourAndNotAtAnother) {
  Host busy_now = ttl_sleeper_with_history(72);
  ASSERT_TRUE(busy_now.arbiter().service("vllm")->asleep);
  EXPECT_EQ(busy_now.arbiter().service("vllm")->asleep->reason, UnloadReason::idle);
  busy_now.steps(12);
  EXPECT_EQ(busy_now.wake_calls.size(), 1u) << fmt::format("{}", fmt::join(busy_now.events, "\n"));
  EXPECT_EQ(count_prefix(busy_now.events, "service.prewarmed"), 1u);

  Host busy_later = ttl_sleeper_with_history(100);  // Friday 04:00: nothing expected now
  ASSERT_TRUE(busy_later.arbiter().service("vllm")->asleep);
  busy_later.steps(30);
  EXPECT_TRUE(busy_later.wake_calls.empty());
}

}  // namespace wakes_test
}  // namespace vramd
