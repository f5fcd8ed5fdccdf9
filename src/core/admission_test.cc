// Leases in the Arbiter on a virtual clock: admission order, per-GPU independence, eviction of
// idle services on demand (cheapest set, never busy or pinned), exclusive groups, reasons,
// holder death and heartbeats, restore after a restart.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "core/arbiter.h"
#include "core/eviction.h"

namespace vramd {
namespace {

using namespace std::chrono_literals;

// Two 24 GiB GPUs; services are processes "svc-NAME" on a GPU; jobs are processes "job" whose
// pid is a lease holder. Unload calls are answered by the world: the service's memory goes.
class World {
 public:
  explicit World(std::vector<ServiceConfig> services, unsigned gpus = 2) : gpus_(gpus) {
    Config c;
    c.gpu.baseline = 0;
    c.services.assign(services.begin(), services.end());
    arbiter_ = std::make_unique<Arbiter>(c);
  }

  void hold(int pid, unsigned gpu, const std::string& cmdline, Bytes bytes) {
    procs_[pid] = {gpu, cmdline, bytes};
  }
  void drop(int pid) { procs_.erase(pid); }
  // Services whose unload frees nothing.
  void ignore_unloads(const std::string& service) { stubborn_.insert(service); }

  std::vector<Action> sample() {
    SampleTaken s;
    for (unsigned i = 0; i < gpus_; ++i) {
      GpuSample g;
      g.index = i;
      g.name = "NVIDIA GeForce RTX 3090";
      g.total = 24 * GiB;
      s.gpus.gpus.push_back(g);
    }
    for (const auto& [pid, p] : procs_) {
      auto& g = s.gpus.gpus[p.gpu];
      g.processes.push_back({pid, p.bytes, ""});
      g.used += p.bytes;
      ProcessInfo info;
      info.pid = pid;
      info.ppid = 1;
      info.comm = "python3";
      info.cmdline = p.cmdline;
      s.host.processes.push_back(info);
    }
    s.host.mem_available = 64 * GiB;
    s.gpus.backend = "test";
    return feed(s);
  }
  void probe(const std::string& service, bool busy) {
    ServiceProbe p;
    p.reachable = true;
    p.busy = busy;
    p.models = {"model"};
    feed(ProbeDone{service, p});
  }
  std::vector<Action> feed(const Event& e) {
    auto actions = arbiter_->handle(e, now_);
    for (const auto& a : actions) {
      all_.push_back(a);
      if (auto* c = std::get_if<CallUnload>(&a)) pending_.push_back(*c);
    }
    return actions;
  }
  // Time passes in 250 ms steps: unload calls are answered, samples and ticks fed.
  void run(Duration total) {
    for (Duration t{0}; t < total; t += 250ms) {
      now_ += 250ms;
      auto calls = std::move(pending_);
      pending_.clear();
      for (const auto& c : calls) {
        unload_calls.push_back(c.service);
        if (!stubborn_.count(c.service))
          for (auto it = procs_.begin(); it != procs_.end();)
            it = it->second.cmdline == "svc-" + c.service ? procs_.erase(it) : std::next(it);
        UnloadCall call;
        call.result = UnloadCall::Result::requested;
        feed(UnloadCallDone{c.service, c.unload_id, call, 50ms});
      }
      sample();
      feed(Tick{});
    }
  }
  void next_id(uint64_t n) { next_id_ = n; }
  uint64_t request(LeaseRequest r) {
    uint64_t id = std::max(next_id_, arbiter_->next_lease_id());  // start leases share the ids
    next_id_ = id + 1;
    feed(LeaseRequested{id, std::move(r)});
    return id;
  }
  LeaseState state(uint64_t id) const { return arbiter_->lease(id)->state; }
  const Lease& lease(uint64_t id) const { return *arbiter_->lease(id); }
  Arbiter& arbiter() { return *arbiter_; }
  MonoTime now() const { return now_; }
  template <typename T>
  std::vector<T> all() const {
    std::vector<T> out;
    for (const auto& a : all_)
      if (auto* x = std::get_if<T>(&a)) out.push_back(*x);
    return out;
  }
  const std::vector<Action>& actions() const { return all_; }
  std::vector<std::string> unload_calls;

 private:
  struct Proc {
    unsigned gpu;
    std::string cmdline;
    Bytes bytes;
  };
  unsigned gpus_;
  std::unique_ptr<Arbiter> arbiter_;
  std::map<int, Proc> procs_;
  std::set<std::string> stubborn_;
  std::vector<CallUnload> pending_;
  MonoTime now_{Duration(1'800'000'000'000)};
  std::vector<Action> all_;
  uint64_t next_id_ = 1;
};

ServiceConfig svc(std::string name, std::string kind = "comfyui") {
  ServiceConfig s;
  s.name = name;
  s.kind = std::move(kind);
  s.url = "http://127.0.0.1:8188";
  s.match.cmdline = "^svc-" + name + "$";
  s.min_idle = 30s;
  return s;
}

LeaseRequest req(Bytes vram, std::optional<unsigned> gpu = 0, int priority = 0,
                 std::string label = "job") {
  LeaseRequest r;
  r.vram = vram;
  r.gpu = gpu;
  r.priority = priority;
  r.label = std::move(label);
  r.holder = "test";
  return r;
}

TEST(ArbiterLeases, GrantsWhatFitsAtOnceAndCountsMaxOfHeldAndLeased) {
  World w({});
  w.sample();
  uint64_t a = w.request(req(10 * GiB));
  EXPECT_EQ(w.state(a), LeaseState::granted);
  EXPECT_EQ(w.lease(a).gpu, 0u);
  // The holder has not allocated yet: its 10 GiB are still promised.
  uint64_t b = w.request(req(15 * GiB));
  EXPECT_EQ(w.state(b), LeaseState::queued);
  EXPECT_NE(w.lease(b).reason.text.find("needs 15.0 GiB on GPU 0; 14.0 GiB free"), std::string::npos)
      << w.lease(b).reason.text;
  // Releasing the first makes room for the second.
  w.feed(LeaseReleased{a, 0});
  EXPECT_EQ(w.state(a), LeaseState::released);
  EXPECT_EQ(w.state(b), LeaseState::granted);
}

TEST(ArbiterLeases, PriorityThenFifoAndNoOvertakingOnTheSameGpu) {
  World w({});
  w.hold(100, 0, "other", 20 * GiB);  // leaves 4 GiB
  w.sample();
  uint64_t big = w.request(req(8 * GiB, 0, 0, "big"));
  uint64_t small = w.request(req(2 * GiB, 0, 0, "small"));
  uint64_t urgent = w.request(req(6 * GiB, 0, 5, "urgent"));
  // Nothing overtakes the head, even what would fit (no starvation of big leases).
  EXPECT_EQ(w.state(small), LeaseState::queued);
  EXPECT_EQ(w.state(big), LeaseState::queued);
  EXPECT_EQ(*w.arbiter().queue_position(urgent), 0u);
  EXPECT_EQ(*w.arbiter().queue_position(big), 1u);
  EXPECT_EQ(*w.arbiter().queue_position(small), 2u);
  EXPECT_EQ(w.arbiter().queue_heads().at(0), urgent);  // the rest wait behind it unvisited
  w.drop(100);
  w.run(250ms);
  // 24 GiB: urgent (6) + big (8) + small (2) all fit, granted in order.
  auto granted = w.all<EmitEvent>();
  std::vector<std::string> order;
  for (const auto& e : granted)
    if (e.event.type == "lease.granted") order.push_back(e.event.subject);
  EXPECT_EQ(order, (std::vector<std::string>{"urgent#3", "big#1", "small#2"}));
}

TEST(ArbiterLeases, ATimedOutLeaseBehindTheHeadSaysSoNotNotYetConsidered_soak) {
  World w({});
  w.hold(100, 0, "other", 20 * GiB);  // leaves 4 GiB
  w.sample();
  uint64_t head = w.request(req(8 * GiB, 0, 0, "big"));
  LeaseRequest r = req(2 * GiB, 0, 0, "small");
  r.wait_timeout = 1min;
  uint64_t behind = w.request(r);
  for (int i = 0; i < 7; ++i) {  // heartbeats keep both alive: only the wait timeout ends one
    w.feed(LeaseHeartbeat{head});
    w.feed(LeaseHeartbeat{behind});
    w.run(9s);
  }
  ASSERT_EQ(w.state(behind), LeaseState::timed_out);
  EXPECT_EQ(w.state(head), LeaseState::queued);
  EXPECT_NE(w.lease(behind).end_reason.find(fmt::format("queued behind lease #{}", head)),
            std::string::npos)
      << w.lease(behind).end_reason;
  EXPECT_EQ(w.lease(behind).end_reason.find("not yet considered"), std::string::npos);
}

TEST(ArbiterLeases, ALeaseBlocksOnlyLeasesForTheSameGpu) {
  World w({});
  w.hold(100, 0, "other", 20 * GiB);
  w.sample();
  uint64_t waits = w.request(req(8 * GiB, 0));
  uint64_t other_gpu = w.request(req(8 * GiB, 1));
  uint64_t any = w.request(req(8 * GiB, std::nullopt));
  EXPECT_EQ(w.state(waits), LeaseState::queued);
  EXPECT_EQ(w.state(other_gpu), LeaseState::granted);
  EXPECT_EQ(w.lease(other_gpu).gpu, 1u);
  EXPECT_EQ(w.state(any), LeaseState::granted);  // GPU 1 still has 16 GiB
  EXPECT_EQ(w.lease(any).gpu, 1u);
}

TEST(ArbiterLeases, EvictsTheCheapestIdleSetNeverBusyOrPinned) {
  auto comfy = svc("comfy", "comfyui");   // 20 s reload
  auto vllm = svc("vllm", "vllm");        // 60 s reload
  auto ollama = svc("ollama", "ollama");  // 10 s reload
  auto pinned = svc("pinned", "ollama");
  pinned.pinned = true;
  auto busy = svc("busy", "ollama");
  World w({comfy, vllm, ollama, pinned, busy}, 1);
  w.hold(101, 0, "svc-comfy", 6 * GiB);
  w.hold(102, 0, "svc-vllm", 8 * GiB);
  w.hold(103, 0, "svc-ollama", 3 * GiB);
  w.hold(104, 0, "svc-pinned", 3 * GiB);
  w.hold(105, 0, "svc-busy", 3 * GiB);
  w.sample();
  for (auto n : {"comfy", "vllm", "ollama", "pinned"}) w.probe(n, false);
  w.probe("busy", true);
  w.run(31s);
  // 1 GiB free; 8 GiB needed: 7 more. comfy (20 s) + ollama (10 s) = 9 GiB for 30 s beats
  // vllm (8 GiB, 60 s); the pinned and busy ones are never candidates.
  uint64_t id = w.request(req(8 * GiB));
  EXPECT_EQ(w.state(id), LeaseState::queued);
  const auto& r = w.lease(id).reason;
  EXPECT_NE(r.text.find("comfy holds 6.0 GiB, idle 31 s: unloading"), std::string::npos) << r.text;
  EXPECT_NE(r.text.find("busy holds 3.0 GiB, busy"), std::string::npos) << r.text;
  EXPECT_NE(r.text.find("; 1 more"), std::string::npos) << r.text;  // four named in the text
  ASSERT_EQ(r.blockers.size(), 5u);
  EXPECT_EQ(r.blockers[4].state, "pinned");
  w.run(250ms);
  std::sort(w.unload_calls.begin(), w.unload_calls.end());
  EXPECT_EQ(w.unload_calls, (std::vector<std::string>{"comfy", "ollama"}));
  w.run(3s);
  EXPECT_EQ(w.state(id), LeaseState::granted) << w.lease(id).reason.text;
  for (const auto& e : w.all<EmitEvent>()) {
    if (e.event.type.starts_with("unload.") && e.event.verdict) {
      EXPECT_EQ(e.event.verdict->reason, UnloadReason::eviction);
    }
  }
}

TEST(ArbiterLeases, ReasonNamesWhoIsInTheWayWhenNothingCanBeEvicted) {
  auto busy = svc("comfyui");
  World w({busy}, 1);
  w.hold(101, 0, "svc-comfyui", 16 * GiB);
  w.hold(102, 0, "stranger", 4 * GiB);
  w.sample();
  w.probe("comfyui", true);
  w.run(1s);
  uint64_t id = w.request(req(12 * GiB));
  w.run(250ms);
  const auto& r = w.lease(id).reason;
  EXPECT_EQ(w.state(id), LeaseState::queued);
  EXPECT_TRUE(w.unload_calls.empty());
  EXPECT_NE(r.text.find("needs 12.0 GiB on GPU 0; 4.0 GiB free; comfyui holds 16.0 GiB, busy"),
            std::string::npos) << r.text;
  EXPECT_NE(r.text.find("waiting for memory to be released"), std::string::npos) << r.text;
  ASSERT_EQ(r.blockers.size(), 2u);
  EXPECT_EQ(r.blockers[0].owner, "comfyui");
  EXPECT_EQ(r.blockers[0].state, "busy");
  EXPECT_EQ(r.blockers[1].kind, "process");
}

TEST(ArbiterLeases, IdleLessThanMinIdleIsNotEvictedYet) {
  World w({svc("comfyui")}, 1);
  w.hold(101, 0, "svc-comfyui", 16 * GiB);
  w.sample();
  w.probe("comfyui", false);
  w.run(5s);
  uint64_t id = w.request(req(12 * GiB));
  w.run(250ms);
  EXPECT_TRUE(w.unload_calls.empty());
  EXPECT_NE(w.lease(id).reason.text.find("(< min_idle 30s)"), std::string::npos)
      << w.lease(id).reason.text;
  w.run(26s);
  EXPECT_EQ(w.unload_calls, std::vector<std::string>{"comfyui"});
  w.run(3s);
  EXPECT_EQ(w.state(id), LeaseState::granted);
}

TEST(ArbiterLeases, IneffectiveEvictionIsNotRetriedInALoop) {
  World w({svc("comfyui")}, 1);
  w.hold(101, 0, "svc-comfyui", 16 * GiB);
  w.ignore_unloads("comfyui");
  w.sample();
  w.probe("comfyui", false);
  w.run(31s);
  LeaseRequest r = req(12 * GiB);
  r.pid = 999;  // watched by pid, so it needs no heartbeat while it waits
  uint64_t id = w.request(r);
  w.run(60s);
  EXPECT_EQ(w.unload_calls, std::vector<std::string>{"comfyui"});  // then the backoff
  EXPECT_EQ(w.state(id), LeaseState::queued);
  EXPECT_NE(w.lease(id).reason.text.find("unload ineffective; next try in"), std::string::npos)
      << w.lease(id).reason.text;
}

TEST(ArbiterLeases, ExclusiveGroupUnloadsTheOtherMembersFirst) {
  auto a = svc("comfyui");
  a.group = "heavy";
  auto b = svc("flux", "generic_http");
  b.group = "heavy";
  World w({a, b}, 1);
  w.hold(101, 0, "svc-comfyui", 4 * GiB);  // fits beside, but the group forbids it
  w.sample();
  w.probe("comfyui", false);
  w.probe("flux", false);
  w.run(1s);  // idle for only 1 s: group members do not wait for min_idle
  LeaseRequest r = req(4 * GiB);
  r.service = "flux";
  uint64_t id = w.request(r);
  EXPECT_EQ(w.state(id), LeaseState::queued);
  w.run(250ms);
  EXPECT_EQ(w.unload_calls, std::vector<std::string>{"comfyui"});
  w.run(3s);
  EXPECT_EQ(w.state(id), LeaseState::granted);
  // A second lease of the group waits for the first to end.
  LeaseRequest r2 = req(1 * GiB);
  r2.group = "heavy";
  uint64_t second = w.request(r2);
  EXPECT_EQ(w.state(second), LeaseState::queued);
  EXPECT_NE(w.lease(second).reason.text.find("another lease of group 'heavy'"), std::string::npos);
  w.feed(LeaseReleased{id, 0});
  EXPECT_EQ(w.state(second), LeaseState::granted);
}

TEST(ArbiterLeases, HolderDeathHeartbeatsAndWaitTimeouts) {
  World w({});
  w.sample();
  LeaseRequest with_pid = req(1 * GiB);
  with_pid.pid = 4242;
  uint64_t a = w.request(with_pid);
  uint64_t b = w.request(req(1 * GiB));  // no pid: heartbeats
  EXPECT_EQ(w.state(a), LeaseState::granted);
  auto holders = w.arbiter().lease_holders();
  ASSERT_EQ(holders.size(), 1u);
  EXPECT_EQ(std::get<1>(holders[0]), 4242);
  w.feed(HolderExited{a});
  EXPECT_EQ(w.state(a), LeaseState::expired);
  EXPECT_EQ(w.lease(a).end_reason, "holder pid 4242 exited");
  w.run(20s);
  w.feed(LeaseHeartbeat{b});
  w.run(20s);
  EXPECT_EQ(w.state(b), LeaseState::granted);  // 20 s since the heartbeat
  w.run(11s);
  EXPECT_EQ(w.state(b), LeaseState::expired);
  EXPECT_NE(w.lease(b).end_reason.find("no heartbeat"), std::string::npos);

  LeaseRequest patient = req(30 * GiB);
  patient.wait_timeout = 5s;
  patient.pid = 4343;
  uint64_t c = w.request(patient);
  w.run(6s);  // deadlines are checked once a second
  EXPECT_EQ(w.state(c), LeaseState::timed_out);
}

// The shell writes each lease change with the event telling it, in one transaction, and finds
// that event as the action right before the LeaseChanged (core/actions.h): so every change of
// every kind (queued, granted, released, expired, timed out, restored and ended) comes so.
void expect_each_change_told_right_before(const std::vector<Action>& actions) {
  int changes = 0;
  for (size_t i = 0; i < actions.size(); ++i) {
    const auto* lc = std::get_if<LeaseChanged>(&actions[i]);
    if (!lc) continue;
    ++changes;
    const auto* e = i > 0 ? std::get_if<EmitEvent>(&actions[i - 1]) : nullptr;
    ASSERT_NE(e, nullptr) << "lease #" << lc->lease.id << " changed to "
                          << to_string(lc->lease.state) << " with no event right before";
    EXPECT_EQ(e->event.type, fmt::format("lease.{}", to_string(lc->lease.state)));
    EXPECT_EQ(e->event.lease, std::optional<uint64_t>(lc->lease.id)) << e->event.message;
    EXPECT_TRUE(e->event.message.starts_with(fmt::format("lease #{} ", lc->lease.id)))
        << e->event.message;
  }
  EXPECT_GT(changes, 0);
}

TEST(ArbiterLeases, EveryLeaseChangeComesRightAfterTheEventTellingIt) {
  std::vector<Lease> kept;
  {
    World w({});
    w.sample();
    LeaseRequest with_pid = req(1 * GiB);
    with_pid.pid = 4242;
    uint64_t a = w.request(with_pid);          // granted
    uint64_t b = w.request(req(1 * GiB));      // granted, heartbeats
    LeaseRequest patient = req(30 * GiB);      // queued, then timed out
    patient.wait_timeout = 2s;
    w.request(patient);
    uint64_t c = w.request(req(2 * GiB));      // granted, then released
    w.feed(HolderExited{a});                   // expired
    w.feed(LeaseReleased{c, 0});
    w.run(3s);
    LeaseRequest held = req(2 * GiB);
    held.pid = 11;
    w.request(held);
    w.request(req(30 * GiB, 0, 0, "waits"));
    uint64_t d = w.request(req(30 * GiB, 0, 0, "gives up"));
    w.feed(LeaseReleased{d, std::nullopt});   // cancelled
    w.run(31s);                                 // b: no heartbeat
    EXPECT_EQ(w.state(b), LeaseState::expired);
    expect_each_change_told_right_before(w.actions());
    kept = w.arbiter().leases();
  }
  World w({});
  w.sample();
  auto actions = w.arbiter().restore_leases(kept, {}, w.now());  // holder 11 is gone
  expect_each_change_told_right_before(actions);
}

TEST(ArbiterLeases, HolderUsingMoreThanLeasedIsAnEventOnce) {
  World w({});
  w.sample();
  LeaseRequest r = req(12 * GiB, 0, 0, "flux");
  r.pid = 500;
  uint64_t id = w.request(r);
  w.hold(500, 0, "job", 14 * GiB + 200 * MiB);
  w.run(1s);
  EXPECT_EQ(w.lease(id).held, 14 * GiB + 200 * MiB);
  int overuse = 0;
  for (const auto& e : w.all<EmitEvent>())
    if (e.event.type == "lease.overuse") {
      ++overuse;
      EXPECT_EQ(e.event.message, "job flux#1 uses 14.2 GiB, leased 12.0 GiB");
    }
  EXPECT_EQ(overuse, 1);
  // Its memory is the lease's in the holdings.
  bool named = false;
  for (const auto& h : w.arbiter().status().gpus[0].holdings)
    named |= h.owner == Owner{OwnerKind::lease, "flux#1"} && h.bytes == 14 * GiB + 200 * MiB;
  EXPECT_TRUE(named);
}

TEST(ArbiterLeases, RestoreKeepsOrderAndEndsLeasesWhoseHoldersDied) {
  std::vector<Lease> kept;
  {
    World w({});
    w.hold(101, 0, "x", 20 * GiB);
    w.sample();
    LeaseRequest g = req(2 * GiB);
    g.pid = 10;
    w.request(g);  // granted, holder 10
    LeaseRequest dead = req(1 * GiB);
    dead.pid = 11;
    w.request(dead);  // granted, holder 11
    w.request(req(8 * GiB, 0, 0, "first"));
    w.request(req(8 * GiB, 0, 0, "second"));
    kept = w.arbiter().leases();
  }
  ASSERT_EQ(kept.size(), 4u);
  World w({});
  w.hold(101, 0, "x", 20 * GiB);
  w.sample();
  auto actions = w.arbiter().restore_leases(kept, {1}, w.now());  // holder 11 is gone
  EXPECT_EQ(w.state(1), LeaseState::granted);
  EXPECT_EQ(w.state(2), LeaseState::expired);
  EXPECT_EQ(w.lease(2).end_reason, "holder exited while vramd was down");
  EXPECT_EQ(*w.arbiter().queue_position(3), 0u);
  EXPECT_EQ(*w.arbiter().queue_position(4), 1u);
  // New leases queue behind the restored ones.
  w.next_id(5);  // the daemon numbers on from the store's highest id
  uint64_t fresh = w.request(req(1 * GiB));
  EXPECT_EQ(*w.arbiter().queue_position(fresh), 2u);
  w.feed(LeaseReleased{1, 0});
  w.run(250ms);
  EXPECT_EQ(w.state(3), LeaseState::queued);  // 8 GiB does not fit in 3 + 1 free
}

TEST(ArbiterLeases, HostRamLeasesCountAgainstMemAvailable) {
  World w({});
  w.sample();  // MemAvailable 64 GiB
  LeaseRequest big = req(1 * GiB);
  big.ram = 60 * GiB;
  uint64_t a = w.request(big);
  EXPECT_EQ(w.state(a), LeaseState::granted);
  EXPECT_EQ(*w.arbiter().ram_available(), 4 * GiB);
  LeaseRequest more = req(1 * GiB);
  more.ram = 8 * GiB;
  uint64_t b = w.request(more);
  EXPECT_EQ(w.state(b), LeaseState::queued);
  EXPECT_NE(w.lease(b).reason.text.find("needs 8.0 GiB host RAM, 4.0 GiB available"), std::string::npos)
      << w.lease(b).reason.text;
  w.feed(LeaseReleased{a, 0});
  EXPECT_EQ(w.state(b), LeaseState::granted);
}



// --- Start admission: a start of a service with vram_estimate waits for room like a lease ---

ServiceConfig run_by_vramd(std::string name, Bytes estimate, std::string group = "") {
  ServiceConfig s = svc(std::move(name));
  s.start = {"python3", "main.py"};
  s.vram_estimate = estimate;
  s.group = std::move(group);
  return s;
}

const Lease* start_lease_of(Arbiter& a, const std::string& service) {
  const ManagedState& m = *a.service(service)->managed;
  return m.start_lease ? a.lease(*m.start_lease) : nullptr;
}

TEST(ArbiterStartAdmission, StartWaitsForRoomEvictsTheIdleHolderThenLaunches) {
  World w({svc("ollama", "ollama"), run_by_vramd("comfy", 16 * GiB)}, 1);
  w.hold(100, 0, "svc-ollama", 20 * GiB);
  w.sample();
  w.probe("ollama", false);
  w.run(31s);  // idle past min_idle
  w.feed(ServiceCommand{"comfy", Command::start, 9});
  EXPECT_TRUE(w.all<SpawnService>().empty());  // 4 GiB free: it waits
  EXPECT_EQ(w.arbiter().service("comfy")->managed->state, ManagedPhase::queued);
  const Lease* l = start_lease_of(w.arbiter(), "comfy");
  ASSERT_NE(l, nullptr);
  EXPECT_TRUE(l->request.start);
  EXPECT_EQ(l->request.vram, 16 * GiB);
  EXPECT_EQ(l->state, LeaseState::queued);
  uint64_t lease_id = l->id;
  // The reason names who is in the way, and the service says why it waits.
  EXPECT_NE(w.arbiter().service("comfy")->managed->reason.find("ollama holds 20.0 GiB"), std::string::npos)
      << w.arbiter().service("comfy")->managed->reason;
  w.run(1s);  // ollama is unloaded for it; then the start lease is granted and comfy launched
  EXPECT_EQ(w.unload_calls, std::vector<std::string>{"ollama"});
  ASSERT_EQ(w.all<SpawnService>().size(), 1u);
  EXPECT_EQ(w.all<SpawnService>()[0].service, "comfy");
  EXPECT_EQ(w.state(lease_id), LeaseState::granted);
  EXPECT_EQ(w.arbiter().service("comfy")->managed->state, ManagedPhase::starting);
  // It comes up: the start lease ends, its memory is its own from then on.
  w.feed(ChildStarted{"comfy", true, 200, 1, "", false});
  w.hold(200, 0, "svc-comfy", 15 * GiB);
  w.run(1s);
  w.feed(HealthChecked{"comfy", true, "200"});
  EXPECT_EQ(w.arbiter().service("comfy")->managed->state, ManagedPhase::running);
  EXPECT_EQ(w.state(lease_id), LeaseState::released);
  bool answered = false;
  for (const auto& f : w.all<CommandFinished>()) answered |= f.request_id == 9 && f.ok;
  EXPECT_TRUE(answered);
}

TEST(ArbiterStartAdmission, ALearnedPeakSizesTheNextStartWithoutAnEstimateAndNamesTheEvicted) {
  ServiceConfig comfy = run_by_vramd("comfy", 0);
  comfy.vram_estimate.reset();
  World w({svc("ollama", "ollama"), comfy}, 1);
  // A first start: nothing known about it, so nothing to admit; it runs and loads 15 GiB.
  w.feed(ServiceCommand{"comfy", Command::start, 1});
  ASSERT_EQ(w.all<SpawnService>().size(), 1u);
  w.feed(ChildStarted{"comfy", true, 200, 1, "", false});
  w.feed(HealthChecked{"comfy", true, "200"});
  w.probe("comfy", false);
  w.hold(200, 0, "svc-comfy", 15 * GiB);
  w.run(2s);
  ASSERT_EQ(w.arbiter().service("comfy")->load_peaks.count("model"), 1u);
  EXPECT_EQ(w.arbiter().service("comfy")->load_peaks.at("model"), 15 * GiB);
  // It is stopped; ollama loads 20 GiB and goes idle.
  w.feed(ServiceCommand{"comfy", Command::stop, 2});
  w.drop(200);
  w.feed(ChildExited{"comfy", 200, 0, std::nullopt});
  w.hold(100, 0, "svc-ollama", 20 * GiB);
  w.sample();
  w.probe("ollama", false);
  w.run(31s);
  // The next start waits for its measured 15 GiB (not "no estimate, start at once"), and the
  // start lease names ollama as evicted for it.
  w.feed(ServiceCommand{"comfy", Command::start, 3});
  EXPECT_EQ(w.all<SpawnService>().size(), 1u) << "started again without room";
  const Lease* l = start_lease_of(w.arbiter(), "comfy");
  ASSERT_NE(l, nullptr);
  EXPECT_EQ(l->request.vram, 15 * GiB);
  uint64_t id = l->id;
  w.run(1s);
  EXPECT_EQ(w.unload_calls, std::vector<std::string>{"ollama"});
  EXPECT_EQ(w.lease(id).evicted, std::vector<std::string>{"ollama"});
  EXPECT_EQ(w.all<SpawnService>().size(), 2u);
}

TEST(ArbiterStartAdmission, ForceSkipsTheWaitAndABusyHolderIsNeverEvicted) {
  World w({svc("ollama", "ollama"), run_by_vramd("comfy", 16 * GiB)}, 1);
  w.hold(100, 0, "svc-ollama", 20 * GiB);
  w.sample();
  w.probe("ollama", true);  // busy
  w.run(31s);
  w.feed(ServiceCommand{"comfy", Command::start, 1});
  w.run(5s);
  EXPECT_TRUE(w.unload_calls.empty());
  EXPECT_TRUE(w.all<SpawnService>().empty());
  EXPECT_NE(start_lease_of(w.arbiter(), "comfy")->reason.text.find("ollama holds 20.0 GiB, busy"),
            std::string::npos);
  uint64_t queued = *w.arbiter().service("comfy")->managed->start_lease;
  // --force: at once; the start lease it waited on is cancelled.
  w.feed(ServiceCommand{"comfy", Command::start, 2, /*force=*/true});
  EXPECT_EQ(w.all<SpawnService>().size(), 1u);
  EXPECT_EQ(w.state(queued), LeaseState::cancelled);
  EXPECT_FALSE(w.arbiter().service("comfy")->managed->start_lease.has_value());
}

TEST(ArbiterStartAdmission, StopWhileQueuedCancelsTheStart) {
  World w({svc("ollama", "ollama"), run_by_vramd("comfy", 16 * GiB)}, 1);
  w.hold(100, 0, "svc-ollama", 20 * GiB);
  w.sample();
  w.probe("ollama", true);
  w.feed(ServiceCommand{"comfy", Command::start, 3});
  uint64_t queued = *w.arbiter().service("comfy")->managed->start_lease;
  w.feed(ServiceCommand{"comfy", Command::stop, 4});
  EXPECT_EQ(w.arbiter().service("comfy")->managed->state, ManagedPhase::stopped);
  EXPECT_EQ(w.state(queued), LeaseState::cancelled);
  std::map<uint64_t, bool> ok;
  for (const auto& f : w.all<CommandFinished>()) ok[f.request_id] = f.ok;
  EXPECT_FALSE(ok.at(3));  // the start was answered: cancelled
  EXPECT_TRUE(ok.at(4));
  w.probe("ollama", false);
  w.run(40s);
  EXPECT_TRUE(w.all<SpawnService>().empty());  // it does not start later
}

TEST(ArbiterStartAdmission, StartingAGroupMemberStopsTheOtherBeforeItLaunches) {
  World w({run_by_vramd("a", 12 * GiB, "img"), run_by_vramd("b", 16 * GiB, "img")}, 1);
  w.feed(ServiceCommand{"a", Command::start, 1, true});
  w.feed(ChildStarted{"a", true, 300, 1, "", false});
  w.hold(300, 0, "svc-a", 12 * GiB);
  w.run(1s);
  w.feed(ServiceCommand{"b", Command::start, 2});
  // a is asked to stop; b waits until a's memory is gone.
  ASSERT_FALSE(w.all<SignalService>().empty());
  EXPECT_EQ(w.all<SignalService>()[0].service, "a");
  EXPECT_EQ(w.all<SpawnService>().size(), 1u);  // only a's
  w.run(1s);
  EXPECT_EQ(w.all<SpawnService>().size(), 1u);  // a still holds 12 GiB
  w.drop(300);
  w.feed(ChildExited{"a", 300, 0, std::nullopt});
  w.run(500ms);
  ASSERT_EQ(w.all<SpawnService>().size(), 2u);
  EXPECT_EQ(w.all<SpawnService>()[1].service, "b");
}

TEST(ArbiterStartAdmission, ALeaseForAServiceStartsItAndCountsItsMemoryAsTheLeases) {
  ServiceConfig comfy = run_by_vramd("comfy", 0);
  comfy.vram_estimate.reset();
  World w({comfy}, 1);
  w.sample();
  LeaseRequest r = req(8 * GiB, 0, 0, "flux");
  r.service = "comfy";
  uint64_t id = w.request(r);
  EXPECT_EQ(w.state(id), LeaseState::granted);
  ASSERT_EQ(w.all<SpawnService>().size(), 1u);  // comfy was down: started for the lease
  EXPECT_EQ(w.all<SpawnService>()[0].service, "comfy");
  w.feed(ChildStarted{"comfy", true, 200, 1, "", false});
  w.hold(200, 0, "svc-comfy", 6 * GiB);
  w.run(250ms);
  EXPECT_EQ(w.lease(id).held, 6 * GiB);  // comfy's memory is the lease's work
  // 24 − 6 used − 2 still promised = 16 GiB free: not 24 − 6 − 8.
  uint64_t fits = w.request(req(16 * GiB, 0, 0, "fits"));
  EXPECT_EQ(w.state(fits), LeaseState::granted);
  w.feed(LeaseReleased{fits, 0});
  uint64_t too_big = w.request(req(17 * GiB, 0, 0, "too-big"));
  EXPECT_EQ(w.state(too_big), LeaseState::queued);
}

TEST(ArbiterStartAdmission, StartLeasesDoNotSurviveARestartOfVramd) {
  World w({run_by_vramd("comfy", 16 * GiB)}, 1);
  Lease kept;
  kept.id = 7;
  kept.seq = 1;
  kept.request = req(16 * GiB);
  kept.request.service = "comfy";
  kept.request.start = true;
  kept.state = LeaseState::queued;
  auto actions = w.arbiter().restore_leases({kept}, {}, w.now(), 12);
  EXPECT_EQ(w.arbiter().lease(7)->state, LeaseState::cancelled);
  EXPECT_EQ(w.arbiter().next_lease_id(), 12u);  // ids go on after the store's highest
  // A client cannot make a start lease.
  LeaseRequest r = req(1 * GiB);
  r.start = true;
  uint64_t id = w.request(r);
  EXPECT_FALSE(w.lease(id).request.start);
}

}  // namespace
}  // namespace vramd
