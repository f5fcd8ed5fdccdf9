// Suspend as a depth for services (issue 28, item 3), through the Arbiter on a virtual clock: a
// service with no unload call of its own, or whose unload was refused, is suspended by
// cuda-checkpoint where host RAM takes its bytes; verified by the GPU's numbers like any unload;
// woken by a restore whose time is learned; stopped instead where host RAM is short or the
// utility fails; and found suspended at vramd's start.
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/arbiter.h"

namespace vramd {
// Named, not anonymous: its helpers share a unity batch with other tests' (cmake/unity.cmake).
namespace service_suspend_test {

using namespace std::chrono_literals;

ServiceConfig service(std::string name, std::string kind) {
  ServiceConfig s;
  s.name = std::move(name);
  s.kind = std::move(kind);
  if (s.kind != "process") s.url = "http://127.0.0.1:1";
  s.match.cmdline = "svc-" + s.name;
  s.match.container = s.name;  // vramd can stop it (Lifecycle)
  s.min_idle = 10s;
  return s;
}

// One 24 GiB GPU on a 64 GiB host; each service is one process (pid 100, 101, ...). The shell's
// part is played here: the utility checkpoints a pid (its bytes leave the GPU and join its RSS)
// and restores it; a server's unload call answers `unload_answer`; a stop ends the process's
// memory.
class Host {
 public:
  explicit Host(std::vector<ServiceConfig> services, bool offered = true) {
    Config c;
    c.gpu.baseline = 0;
    c.services.assign(services.begin(), services.end());
    int pid = 100;
    for (const auto& s : c.services) pids_[s.name] = pid++;
    arbiter_ = std::make_unique<Arbiter>(c);
    SuspendOffer offer;
    offer.offered = offered;
    offer.tool = "cuda-checkpoint";
    offer.form = "action";
    feed(SuspendProbed{offer});
  }

  std::map<std::string, Bytes> bytes;
  std::set<int> checkpointed;
  Bytes mem_available = 40 * GiB;
  UnloadCall unload_answer{UnloadCall::Result::requested, "POST /free → 200"};
  std::string fail_suspend;  // the utility's words when a suspend fails; "" succeeds

  int pid(const std::string& name) const { return pids_.at(name); }
  Arbiter& arbiter() { return *arbiter_; }
  const ServiceStatus& status(const std::string& name) { return *arbiter_->service(name); }

  void feed(const Event& e) {
    std::vector<Event> pending;
    for (const Action& a : arbiter_->handle(e, Now(t_))) {
      if (const auto* c = std::get_if<CallUnload>(&a)) {
        unloads.push_back(*c);
        pending.push_back(unload(*c));
      } else if (const auto* w = std::get_if<CallWake>(&a)) {
        wakes.push_back(*w);
        later_.push_back(wake(*w));  // answered at the next step: the restore takes time
      } else if (const auto* c = std::get_if<CheckSuspension>(&a)) {
        checks.push_back(*c);
        SuspensionChecked done{c->lease, c->service, {}, {}, {}, ""};
        for (int p : c->pids)
          (checkpointed.count(p) ? done.checkpointed : done.running).push_back(p);
        pending.push_back(done);
      } else if (const auto* l = std::get_if<Lifecycle>(&a)) {
        lifecycles.push_back(fmt::format("{} {}", to_string(l->action), l->service));
        if (l->action == Command::stop) {
          bytes[l->service] = 0;
          pending.push_back(LifecycleDone{l->service, l->action, true, "stopped"});
        }
      } else if (const auto* f = std::get_if<WakeFinished>(&a)) {
        finished[f->id] = *f;
      } else if (const auto* r = std::get_if<RememberWakeTime>(&a)) {
        remembered.push_back(r->time);
      } else if (const auto* ev = std::get_if<EmitEvent>(&a)) {
        events.push_back(ev->event.type + ": " + ev->event.message);
      }
    }
    for (const Event& next : pending) feed(next);
  }
  void sample() {
    SampleTaken s;
    GpuSample g;
    g.index = 0;
    g.total = 24 * GiB;
    for (const auto& [name, p] : pids_) {
      Bytes b = checkpointed.count(p) ? 0 : bytes[name];
      if (b > 0) {
        g.processes.push_back({p, b, ""});
        g.used += b;
      }
      ProcessInfo info;
      info.pid = p;
      info.ppid = 1;
      info.comm = "python3";
      info.cmdline = "svc-" + name;
      info.rss = 1 * GiB + (checkpointed.count(p) ? bytes[name] : 0);
      info.cgroup.kind = CgroupIdentity::Kind::container;
      info.cgroup.runtime = "docker";
      info.cgroup.container_name = name;
      s.host.processes.push_back(info);
    }
    s.host.mem_available = mem_available;
    s.host.mem_total = 64 * GiB;
    s.gpus.backend = "test";
    s.gpus.gpus.push_back(g);
    feed(s);
  }
  void probe(const std::string& name) {
    ServiceProbe p;
    p.reachable = true;
    p.busy = false;
    feed(ProbeDone{name, p});
  }
  void step(Duration d = 1s) {
    t_ += d;
    for (const Event& e : std::exchange(later_, {})) feed(e);
    sample();
    feed(Tick{});
  }
  void steps(int n) {
    for (int i = 0; i < n; ++i) step();
  }
  uint64_t lease(Bytes vram) {
    LeaseRequest r;
    r.vram = vram;
    r.gpu = 0;
    r.label = "flux";
    r.holder = "test";
    uint64_t id = next_lease_++;
    feed(LeaseRequested{id, r});
    return id;
  }
  uint64_t request(const std::string& name, bool can_wake) {
    uint64_t id = next_wake_++;
    feed(WakeRequested{id, name, "", can_wake});
    return id;
  }
  LeaseState lease_state(uint64_t id) { return arbiter_->lease(id)->state; }
  bool said(const std::string& what) const {
    for (const auto& e : events)
      if (e.find(what) != std::string::npos) return true;
    return false;
  }

  std::vector<CallUnload> unloads;
  std::vector<CallWake> wakes;
  std::vector<CheckSuspension> checks;
  std::vector<std::string> lifecycles, events;
  std::map<uint64_t, WakeFinished> finished;
  std::vector<WakeTime> remembered;

 private:
  Event unload(const CallUnload& c) {
    if (c.depth == SleepDepth::suspend) {
      if (!fail_suspend.empty())
        return UnloadCallDone{c.service, c.unload_id, {UnloadCall::Result::failed, fail_suspend},
                              1s};
      for (int p : c.pids) checkpointed.insert(p);
      mem_available -= bytes[c.service];
      return UnloadCallDone{c.service, c.unload_id,
                            {UnloadCall::Result::requested, "cuda-checkpoint: suspended"}, 2s};
    }
    if (c.service.rfind("proc", 0) == 0)  // a `process`: its adapter has no unload call
      return UnloadCallDone{c.service, c.unload_id,
                            {UnloadCall::Result::not_supported, "a process has no unload call"},
                            0ms};
    if (unload_answer.result == UnloadCall::Result::requested) bytes[c.service] = 0;
    return UnloadCallDone{c.service, c.unload_id, unload_answer, 10ms};
  }
  Event wake(const CallWake& w) {
    if (w.depth == SleepDepth::suspend) {
      for (int p : w.pids) checkpointed.erase(p);
      mem_available += bytes[w.service];
    }
    return WakeCallDone{w.service, w.wake_id,
                        {UnloadCall::Result::requested, "cuda-checkpoint: restored"}, 1500ms};
  }

  std::unique_ptr<Arbiter> arbiter_;
  MonoTime t_{Duration(1'000'000)};
  std::map<std::string, int> pids_;
  std::vector<Event> later_;
  uint64_t next_lease_ = 1, next_wake_ = 1;
};

// A `process` service (WhisperX, say) holding 10 GiB, idle past its min_idle.
Host whisper_host(bool offered = true) {
  Host h({service("proc-whisper", "process")}, offered);
  h.bytes["proc-whisper"] = 10 * GiB;
  h.steps(2);
  h.probe("proc-whisper");
  h.steps(15);
  return h;
}

TEST(ServiceSuspend, AServiceWithoutAnUnloadCallIsSuspendedForALeaseAndRestoredByItsWake) {
  Host h = whisper_host();
  uint64_t flux = h.lease(20 * GiB);
  h.steps(3);
  ASSERT_EQ(h.unloads.size(), 1u);
  EXPECT_EQ(h.unloads[0].depth, SleepDepth::suspend);
  EXPECT_EQ(h.unloads[0].pids, std::vector<int>{100});
  EXPECT_TRUE(h.lifecycles.empty());  // not stopped: suspended
  // Verified like an unload: its bytes left the GPU; they are in host RAM now.
  const ServiceStatus& st = h.status("proc-whisper");
  ASSERT_TRUE(st.asleep);
  EXPECT_EQ(st.asleep->depth, SleepDepth::suspend);
  EXPECT_EQ(st.asleep->pids, std::vector<int>{100});
  EXPECT_EQ(st.asleep->host_ram, 10 * GiB);
  EXPECT_EQ(st.last_unload->outcome, UnloadOutcome::freed);
  EXPECT_TRUE(h.said("asleep at suspend (pids 100), keeping 10.0 GiB in host RAM"));
  EXPECT_EQ(h.lease_state(flux), LeaseState::granted);

  // The lease ends; a request for it: the wake is a restore (a `process` has no wake call).
  h.feed(LeaseReleased{flux, 0});
  h.step();
  uint64_t req = h.request("proc-whisper", /*can_wake=*/false);
  h.steps(2);
  ASSERT_EQ(h.wakes.size(), 1u);
  EXPECT_EQ(h.wakes[0].depth, SleepDepth::suspend);
  EXPECT_EQ(h.wakes[0].pids, std::vector<int>{100});
  ASSERT_TRUE(h.finished.count(req));
  EXPECT_EQ(h.finished[req].outcome, WakeOutcome::ready);
  EXPECT_FALSE(h.status("proc-whisper").asleep);
  EXPECT_TRUE(h.checkpointed.empty());
  // Its wake time is learned at that depth, and what the next eviction is costed at.
  ASSERT_EQ(h.remembered.size(), 1u);
  EXPECT_EQ(h.remembered[0].depth, SleepDepth::suspend);
  EXPECT_GT(h.remembered[0].took, 0ms);
  EXPECT_EQ(expected_wake(h.status("proc-whisper"), "", SleepDepth::suspend),
            h.remembered[0].took);
}

// Nothing can ask a `process` for work: it is restored once its room is free and nobody wants
// it, as a suspended lease is resumed.
TEST(ServiceSuspend, ASuspendedProcessIsRestoredOnceItsRoomIsFreeAndNobodyWantsIt) {
  Host h = whisper_host();
  uint64_t flux = h.lease(20 * GiB);
  h.steps(3);
  ASSERT_TRUE(h.status("proc-whisper").asleep);
  h.steps(15);
  EXPECT_TRUE(h.wakes.empty());  // its room is the lease's
  h.feed(LeaseReleased{flux, 0});
  h.steps(15);
  ASSERT_EQ(h.wakes.size(), 1u);
  EXPECT_EQ(h.wakes[0].depth, SleepDepth::suspend);
  EXPECT_FALSE(h.status("proc-whisper").asleep);
  EXPECT_TRUE(h.checkpointed.empty());
  EXPECT_TRUE(h.said("service.woken: woke proc-whisper"))
      << fmt::format("{}", fmt::join(h.events, "\n"));
  EXPECT_TRUE(h.said("for its room, free again"));
  EXPECT_FALSE(h.status("proc-whisper").prewarmed);  // not a prewarm: evicted by min_idle rules
}

TEST(ServiceSuspend, HostRamThatCannotTakeItsBytesStopsItInstead) {
  Host h = whisper_host();
  h.mem_available = 12 * GiB;  // 10 % of 64 GiB is reserved: 5.6 GiB of room, not 10
  h.steps(2);
  h.lease(20 * GiB);
  h.steps(3);
  ASSERT_GE(h.unloads.size(), 1u);
  EXPECT_NE(h.unloads[0].depth, SleepDepth::suspend);
  EXPECT_TRUE(h.checkpointed.empty());
  EXPECT_EQ(h.lifecycles, std::vector<std::string>{"stop proc-whisper"});
}

TEST(ServiceSuspend, WithoutTheUtilityItIsStoppedAsBefore) {
  Host h = whisper_host(/*offered=*/false);
  h.lease(20 * GiB);
  h.steps(3);
  for (const auto& u : h.unloads) EXPECT_NE(u.depth, SleepDepth::suspend);
  EXPECT_EQ(h.lifecycles, std::vector<std::string>{"stop proc-whisper"});
}

TEST(ServiceSuspend, AFailedSuspendStopsItAndIsNotTriedAgain) {
  Host h = whisper_host();
  h.fail_suspend = "pid 100: Could not checkpoint: operation not supported (UVM memory)";
  h.lease(20 * GiB);
  h.steps(3);
  ASSERT_EQ(h.unloads.size(), 1u);
  EXPECT_EQ(h.unloads[0].depth, SleepDepth::suspend);
  EXPECT_EQ(h.lifecycles, std::vector<std::string>{"stop proc-whisper"});
  EXPECT_TRUE(h.said("the suspend failed: pid 100: Could not checkpoint"));
  EXPECT_EQ(h.status("proc-whisper").suspend_refused, h.fail_suspend);
  // It comes back and is unloaded again (forced past its backoff): stopped, no suspend tried.
  h.bytes["proc-whisper"] = 10 * GiB;
  h.steps(2);
  h.feed(UnloadRequested{"proc-whisper", UnloadReason::manual, 0, true});
  h.steps(3);
  ASSERT_EQ(h.unloads.size(), 2u);
  EXPECT_NE(h.unloads[1].depth, SleepDepth::suspend);
  EXPECT_EQ(h.lifecycles.size(), 2u);
}

// A server whose unload is refused (ComfyUI answering 500): its processes are suspended instead,
// within the same unload, and from then on while vramd runs.
TEST(ServiceSuspend, ARefusedUnloadIsFollowedByASuspend) {
  Host h({service("comfyui", "comfyui")});
  h.bytes["comfyui"] = 12 * GiB;
  h.unload_answer = {UnloadCall::Result::failed, "POST /free → 500"};
  h.steps(2);
  h.probe("comfyui");
  h.steps(15);
  h.feed(UnloadRequested{"comfyui", UnloadReason::manual, 0, true});
  h.steps(3);
  ASSERT_EQ(h.unloads.size(), 2u);
  EXPECT_NE(h.unloads[0].depth, SleepDepth::suspend);
  EXPECT_EQ(h.unloads[1].depth, SleepDepth::suspend);
  EXPECT_EQ(h.unloads[0].unload_id, h.unloads[1].unload_id);  // one unload, one verdict
  EXPECT_TRUE(h.said("unload.suspending: comfyui: its unload call failed: POST /free → 500; "
                     "suspending its processes instead (pids 100)"));
  ASSERT_TRUE(h.status("comfyui").asleep);
  EXPECT_EQ(h.status("comfyui").asleep->depth, SleepDepth::suspend);
  EXPECT_EQ(h.status("comfyui").last_unload->outcome, UnloadOutcome::freed);
}

// vramd restarted while a service was suspended: its pids are not on the GPU, so it holds
// nothing; the utility says they are checkpointed, and its next request restores them.
TEST(ServiceSuspend, AServiceSuspendedBeforeVramdStartedIsFoundAndWokenByARestore) {
  Host h({service("proc-whisper", "process")});
  h.bytes["proc-whisper"] = 10 * GiB;
  h.checkpointed.insert(100);
  h.steps(2);
  ASSERT_EQ(h.checks.size(), 1u);
  EXPECT_EQ(h.checks[0].service, "proc-whisper");
  EXPECT_EQ(h.checks[0].pids, std::vector<int>{100});
  ASSERT_TRUE(h.status("proc-whisper").asleep);
  EXPECT_EQ(h.status("proc-whisper").asleep->depth, SleepDepth::suspend);
  EXPECT_TRUE(h.said("service.found_suspended: proc-whisper: pids 100 are suspended"));
  h.steps(3);
  EXPECT_EQ(h.checks.size(), 1u);  // read once
  h.probe("proc-whisper");
  uint64_t req = h.request("proc-whisper", false);
  h.steps(2);
  ASSERT_EQ(h.wakes.size(), 1u);
  EXPECT_EQ(h.wakes[0].pids, std::vector<int>{100});
  EXPECT_EQ(h.finished[req].outcome, WakeOutcome::ready);
  EXPECT_TRUE(h.checkpointed.empty());
}

TEST(ServiceSuspend, AServiceHoldingMemoryOrRunningIsNotTakenForSuspended) {
  Host h({service("proc-whisper", "process"), service("proc-idle", "process")});
  h.bytes["proc-whisper"] = 10 * GiB;  // on the GPU: not read
  h.steps(3);
  ASSERT_EQ(h.checks.size(), 1u);  // proc-idle holds nothing: read, and it runs
  EXPECT_EQ(h.checks[0].service, "proc-idle");
  EXPECT_FALSE(h.status("proc-idle").asleep);
  EXPECT_FALSE(h.status("proc-whisper").asleep);
}

}  // namespace service_suspend_test
}  // namespace vramd
