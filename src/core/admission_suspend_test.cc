// Preemptible leases in the Arbiter on a virtual clock (issue 28): a job suspended for work of
// higher priority when nothing idle can make the room, verified by the GPU's numbers, charged to
// host RAM, refused where host RAM cannot hold it, resumed first when its room is back, left
// running when the utility fails, and kept across a restart of vramd.
#include <gtest/gtest.h>

#include "core/arbiter.h"

namespace vramd {
namespace suspend_lease_test {

using namespace std::chrono_literals;

// One 24 GiB GPU. Jobs are processes whose pid holds a lease; the "utility" answers each
// SuspendLease / ResumeLease one step later: a checkpointed pid leaves the GPU's process list.
class Host {
 public:
  explicit Host(std::vector<ServiceConfig> services = {}) {
    Config c;
    c.gpu.baseline = 0;
    c.services.assign(services.begin(), services.end());
    arbiter_ = std::make_unique<Arbiter>(c);
    SuspendOffer offer;
    offer.offered = true;
    offer.tool = "cuda-checkpoint";
    offer.form = "action";
    feed(SuspendProbed{offer});
  }
  void hold(int pid, Bytes bytes, bool checkpointed = false) {
    procs_[pid] = {bytes, checkpointed, false, 1};
  }
  void parent(int pid, int ppid) { procs_.at(pid).ppid = ppid; }
  // Locked by a suspend cut short: its memory still on the GPU, its CUDA calls blocked.
  void lock(int pid) { procs_.at(pid).locked = true; }
  void drop(int pid) { procs_.erase(pid); }
  Bytes mem_available = 64 * GiB;
  std::string fail_suspend;  // the utility's words when a suspend fails; "" succeeds
  bool bytes_stay = false;   // the utility says done, but the memory stays on the GPU (UVM)
  bool checkpointed(int pid) const { return procs_.at(pid).checkpointed; }

  std::vector<Action> sample() {
    SampleTaken s;
    GpuSample g;
    g.index = 0;
    g.name = "NVIDIA GeForce RTX 3090";
    g.total = 24 * GiB;
    for (const auto& [pid, p] : procs_) {
      ProcessInfo info;
      info.pid = pid;
      info.ppid = p.ppid;
      info.comm = "python3";
      info.cmdline = "job";
      s.host.processes.push_back(info);
      if (p.checkpointed) continue;  // its memory is in host RAM
      g.processes.push_back({pid, p.bytes, ""});
      g.used += p.bytes;
    }
    s.gpus.gpus.push_back(g);
    s.host.mem_available = mem_available;
    s.host.mem_total = 128 * GiB;
    s.gpus.backend = "test";
    return feed(s);
  }
  std::vector<Action> feed(const Event& e) {
    auto actions = arbiter_->handle(e, now_);
    for (const auto& a : actions) {
      all_.push_back(a);
      if (const auto* s = std::get_if<SuspendLease>(&a)) suspends_.push_back(*s);
      if (const auto* r = std::get_if<ResumeLease>(&a)) resumes_.push_back(*r);
      if (const auto* c = std::get_if<CheckSuspension>(&a)) checks_.push_back(*c);
    }
    return actions;
  }
  // vramd starts again with the leases its store kept (`alive`: their holders still run).
  void restore(std::vector<Lease> kept, const std::vector<uint64_t>& alive) {
    for (const auto& a : arbiter_->restore_leases(std::move(kept), alive, now_)) {
      all_.push_back(a);
      if (const auto* r = std::get_if<ResumeLease>(&a)) resumes_.push_back(*r);
      if (const auto* c = std::get_if<CheckSuspension>(&a)) checks_.push_back(*c);
    }
  }
  void run(Duration total) {
    for (Duration t{0}; t < total; t += 250ms) {
      now_ += 250ms;
      for (const auto& s : std::exchange(suspends_, {})) {
        ++suspend_calls;
        if (fail_suspend.empty() && !bytes_stay)
          for (int pid : s.pids) procs_.at(pid).checkpointed = true;
        feed(LeaseSuspendDone{s.id, fail_suspend.empty(), fail_suspend, 2s});
      }
      for (const auto& r : std::exchange(resumes_, {})) {
        ++resume_calls;
        for (int pid : r.pids) procs_.at(pid).checkpointed = procs_.at(pid).locked = false;
        feed(LeaseResumeDone{r.id, true, "", 1s});
      }
      for (const auto& c : std::exchange(checks_, {})) {  // --get-state of each pid
        ++check_calls;
        SuspensionChecked checked{c.lease, c.service, {}, {}, {}, ""};
        for (int pid : c.pids) {
          const Proc& p = procs_.at(pid);
          (p.locked ? checked.locked : p.checkpointed ? checked.checkpointed : checked.running)
              .push_back(pid);
        }
        feed(checked);
      }
      sample();
      feed(Tick{});
    }
  }
  uint64_t request(LeaseRequest r) {
    uint64_t id = std::max(next_id_, arbiter_->next_lease_id());
    next_id_ = id + 1;
    feed(LeaseRequested{id, std::move(r)});
    return id;
  }
  const Lease& lease(uint64_t id) const { return *arbiter_->lease(id); }
  LeaseState state(uint64_t id) const { return lease(id).state; }
  Arbiter& arbiter() { return *arbiter_; }
  MonoTime now() const { return now_; }
  std::vector<EventRecord> events(const std::string& type) const {
    std::vector<EventRecord> out;
    for (const auto& a : all_)
      if (const auto* e = std::get_if<EmitEvent>(&a); e && e->event.type == type)
        out.push_back(e->event);
    return out;
  }
  std::vector<std::string> event_types() const {
    std::vector<std::string> out;
    for (const auto& a : all_)
      if (const auto* e = std::get_if<EmitEvent>(&a)) out.push_back(e->event.type);
    return out;
  }
  int suspend_calls = 0, resume_calls = 0, check_calls = 0;

 private:
  struct Proc {
    Bytes bytes;
    bool checkpointed;
    bool locked;
    int ppid;
  };
  std::unique_ptr<Arbiter> arbiter_;
  std::map<int, Proc> procs_;
  std::vector<SuspendLease> suspends_;
  std::vector<ResumeLease> resumes_;
  std::vector<CheckSuspension> checks_;
  MonoTime now_{Duration(1'800'000'000'000)};
  std::vector<Action> all_;
  uint64_t next_id_ = 1;
};

LeaseRequest job(Bytes vram, int priority, std::string label, std::optional<int> pid = {},
                 bool preemptible = false) {
  LeaseRequest r;
  r.vram = vram;
  r.gpu = 0;
  r.priority = priority;
  r.label = std::move(label);
  r.holder = "test";
  r.pid = pid;
  r.preemptible = preemptible;
  return r;
}

// A preemptible batch job of 16 GiB, running, on a 24 GiB card.
uint64_t start_batch(Host& h, int pid = 100, int priority = 0) {
  h.sample();
  uint64_t id = h.request(job(16 * GiB, priority, "batch", pid, true));
  EXPECT_EQ(h.state(id), LeaseState::granted);
  h.hold(pid, 16 * GiB);
  h.run(500ms);
  EXPECT_EQ(h.lease(id).held, 16 * GiB);
  return id;
}

TEST(PreemptibleLeases, SuspendedForHigherPriorityThenResumedWhenItsRoomIsBack) {
  Host h;
  uint64_t batch = start_batch(h);
  uint64_t urgent = h.request(job(10 * GiB, 5, "urgent", 200));
  // Nothing idle to unload: the batch job is suspended for it.
  EXPECT_EQ(h.state(urgent), LeaseState::queued);
  ASSERT_TRUE(h.lease(batch).suspension);
  EXPECT_EQ(h.lease(batch).suspension->step, LeaseSuspension::Step::suspending);
  EXPECT_EQ(h.lease(batch).suspension->pids, std::vector<int>{100});
  EXPECT_EQ(h.lease(batch).suspension->for_whom, "lease #2 (urgent#2)");
  h.run(1s);
  // The utility said done and the bytes left the GPU: suspended, and the room is urgent's.
  EXPECT_TRUE(h.checkpointed(100));
  EXPECT_EQ(h.state(batch), LeaseState::suspended);
  EXPECT_EQ(h.state(urgent), LeaseState::granted);
  auto suspended = h.events("lease.suspended");
  ASSERT_EQ(suspended.size(), 1u);
  EXPECT_EQ(suspended[0].message,
            "lease #1 (batch#1) suspended for lease #2 (urgent#2): 16.0 GiB of GPU 0 moved to "
            "host RAM in 2.0 s");
  EXPECT_TRUE(h.arbiter().lease(batch)->suspension->at);

  // Urgent runs; the batch job stays suspended while its 16 GiB do not fit.
  h.hold(200, 10 * GiB);
  h.run(5s);
  EXPECT_EQ(h.state(batch), LeaseState::suspended);
  EXPECT_EQ(h.resume_calls, 0);
  // Urgent ends: the batch job is resumed on its GPU, and only once.
  h.drop(200);
  h.feed(LeaseReleased{urgent, 0});
  h.run(1s);
  EXPECT_EQ(h.resume_calls, 1);
  EXPECT_FALSE(h.checkpointed(100));
  EXPECT_EQ(h.state(batch), LeaseState::granted);
  EXPECT_FALSE(h.lease(batch).suspension);
  auto resumed = h.events("lease.resumed");
  ASSERT_EQ(resumed.size(), 1u);
  EXPECT_NE(resumed[0].message.find("lease #1 (batch#1) resumed on GPU 0 after 6 s suspended: "
                                    "16.0 GiB back in 1.0 s"),
            std::string::npos)
      << resumed[0].message;
  EXPECT_EQ(h.suspend_calls, 1);
}

TEST(PreemptibleLeases, WorkOfNoHigherPriorityNeverSuspendsIt) {
  Host h;
  uint64_t batch = start_batch(h, 100, 3);
  uint64_t same = h.request(job(10 * GiB, 3, "same", 200));
  h.run(2s);
  EXPECT_EQ(h.suspend_calls, 0);
  EXPECT_EQ(h.state(batch), LeaseState::granted);
  EXPECT_EQ(h.state(same), LeaseState::queued);
  EXPECT_NE(h.lease(same).reason.text.find("batch#1 holds 16.0 GiB, granted lease"),
            std::string::npos)
      << h.lease(same).reason.text;
}

TEST(PreemptibleLeases, ALeaseNotMarkedPreemptibleIsNeverSuspended) {
  Host h;
  h.sample();
  uint64_t plain = h.request(job(16 * GiB, 0, "plain", 100, false));
  h.hold(100, 16 * GiB);
  h.run(500ms);
  h.request(job(10 * GiB, 5, "urgent", 200));
  h.run(2s);
  EXPECT_EQ(h.suspend_calls, 0);
  EXPECT_EQ(h.state(plain), LeaseState::granted);
}

TEST(PreemptibleLeases, HostRamThatCannotHoldItsBytesRefusesTheSuspend) {
  Host h;
  h.mem_available = 12 * GiB;  // less than the job's 16 GiB (less the host reserve)
  uint64_t batch = start_batch(h);
  uint64_t urgent = h.request(job(10 * GiB, 5, "urgent", 200));
  h.run(2s);
  EXPECT_EQ(h.suspend_calls, 0);
  EXPECT_EQ(h.state(batch), LeaseState::granted);
  EXPECT_EQ(h.state(urgent), LeaseState::queued);
  // With the RAM to hold it, the next pass suspends it.
  h.mem_available = 64 * GiB;
  h.run(2s);
  EXPECT_EQ(h.suspend_calls, 1);
  EXPECT_EQ(h.state(batch), LeaseState::suspended);
  EXPECT_EQ(h.state(urgent), LeaseState::granted);
}

TEST(PreemptibleLeases, AFailedSuspendLeavesItRunningSaysWhyAndIsNotTriedAgain) {
  Host h;
  h.fail_suspend =
      "cuda-checkpoint --action checkpoint --pid 100: Could not checkpoint on process ID 100: "
      "OS call failed or operation not supported on this OS (exit 1); put back to running";
  uint64_t batch = start_batch(h);
  uint64_t urgent = h.request(job(10 * GiB, 5, "urgent", 200));
  h.run(3s);
  EXPECT_EQ(h.suspend_calls, 1);
  EXPECT_EQ(h.state(batch), LeaseState::granted);
  EXPECT_FALSE(h.lease(batch).suspension);
  EXPECT_EQ(h.lease(batch).suspend_refused, h.fail_suspend);
  auto failed = h.events("lease.suspend_failed");
  ASSERT_EQ(failed.size(), 1u);
  EXPECT_NE(failed[0].message.find("could not be suspended, left running: " + h.fail_suspend),
            std::string::npos);
  EXPECT_EQ(h.state(urgent), LeaseState::queued);
}

TEST(PreemptibleLeases, ASuspendWhoseBytesStayOnTheGpuIsUndoneAfterItsWindow) {
  Host h;
  uint64_t batch = start_batch(h);
  // The utility says done, but the memory stays (a UVM allocation, say).
  h.bytes_stay = true;
  h.request(job(10 * GiB, 5, "urgent", 200));
  h.run(29s);
  EXPECT_EQ(h.lease(batch).suspension->step, LeaseSuspension::Step::verifying);
  h.run(2s);
  ASSERT_EQ(h.events("lease.suspend_ineffective").size(), 1u);
  EXPECT_EQ(h.resume_calls, 1);
  EXPECT_EQ(h.state(batch), LeaseState::granted);
  EXPECT_FALSE(h.lease(batch).suspension);
  EXPECT_EQ(h.lease(batch).suspend_refused, "suspended, but 16.0 GiB stayed on GPU 0");
}

TEST(PreemptibleLeases, ItsRoomIsItsBeforeAnythingNewOfNoHigherPriority) {
  Host h;
  uint64_t batch = start_batch(h);
  uint64_t urgent = h.request(job(10 * GiB, 5, "urgent", 200));
  h.run(1s);
  ASSERT_EQ(h.state(batch), LeaseState::suspended);
  h.hold(200, 10 * GiB);
  h.run(500ms);
  // 14 GiB free: a new 6 GiB lease of priority 0 would fit, but waits for the batch job.
  uint64_t late = h.request(job(6 * GiB, 0, "late", 300));
  h.run(1s);
  EXPECT_EQ(h.state(late), LeaseState::queued);
  EXPECT_NE(h.lease(late).reason.text.find("queued behind suspended lease #1"), std::string::npos)
      << h.lease(late).reason.text;
  // One of higher priority than the suspended job is not held back.
  uint64_t higher = h.request(job(2 * GiB, 1, "higher", 400));
  EXPECT_EQ(h.state(higher), LeaseState::granted);
  h.feed(LeaseReleased{higher, 0});
  // Urgent ends: the batch job resumes first, then late takes what is left.
  h.drop(200);
  h.feed(LeaseReleased{urgent, 0});
  h.run(1s);
  EXPECT_EQ(h.state(batch), LeaseState::granted);
  EXPECT_EQ(h.state(late), LeaseState::granted);
  auto types = h.event_types();
  // Asked to resume before late was granted: late got what the resume left.
  auto resumed = std::find(types.begin(), types.end(), "lease.resuming");
  auto granted_late = std::find_if(resumed, types.end(),
                                   [](const std::string& t) { return t == "lease.granted"; });
  EXPECT_NE(resumed, types.end());
  EXPECT_NE(granted_late, types.end());
}

TEST(PreemptibleLeases, SuspendedSurvivesARestartAndResumesWhenItsRoomIsBack) {
  std::vector<Lease> kept;
  uint64_t batch = 0, urgent = 0;
  {
    Host h;
    batch = start_batch(h);
    urgent = h.request(job(10 * GiB, 5, "urgent", 200));
    h.run(1s);
    ASSERT_EQ(h.state(batch), LeaseState::suspended);
    kept = h.arbiter().leases();
  }
  // vramd restarts while urgent holds its 10 GiB and the job is checkpointed.
  Host h;
  h.hold(100, 16 * GiB, true);
  h.hold(200, 10 * GiB);
  h.sample();
  h.restore(kept, {batch, urgent});
  EXPECT_EQ(h.state(batch), LeaseState::suspended);
  ASSERT_TRUE(h.lease(batch).suspension);
  EXPECT_EQ(h.lease(batch).suspension->step, LeaseSuspension::Step::suspended);
  EXPECT_EQ(h.lease(batch).suspension->pids, std::vector<int>{100});
  EXPECT_EQ(h.lease(batch).suspension->for_whom, "lease #2 (urgent#2)");
  h.run(2s);
  EXPECT_EQ(h.check_calls, 1);   // the utility is asked again: still checkpointed
  EXPECT_EQ(h.state(batch), LeaseState::suspended);
  EXPECT_EQ(h.resume_calls, 0);  // its 16 GiB do not fit beside urgent's 10
  h.drop(200);
  h.feed(LeaseReleased{urgent, 0});
  h.run(1s);
  EXPECT_EQ(h.resume_calls, 1);
  EXPECT_EQ(h.state(batch), LeaseState::granted);
  EXPECT_FALSE(h.checkpointed(100));
}

// A sample taken while the utility ran showed the bytes gone (and gave their room to the work
// that asked): the utility's answer makes it suspended at once, not a sample later.
TEST(PreemptibleLeases, ItIsSuspendedWhenTheUtilitySaysDoneIfTheBytesWereSeenGoneAlready) {
  Host h;
  uint64_t batch = start_batch(h);
  uint64_t urgent = h.request(job(10 * GiB, 5, "urgent", 200));
  ASSERT_TRUE(h.lease(batch).suspension);
  h.hold(100, 16 * GiB, /*checkpointed=*/true);  // the copy is done; the utility has not exited
  h.sample();
  EXPECT_EQ(h.state(urgent), LeaseState::granted);
  EXPECT_EQ(h.lease(batch).suspension->step, LeaseSuspension::Step::suspending);
  h.feed(LeaseSuspendDone{batch, true, "", 2s});
  EXPECT_EQ(h.state(batch), LeaseState::suspended);
  EXPECT_EQ(h.events("lease.suspended").size(), 1u);
}

// The store said suspended, but the job's resume ended as vramd stopped: the utility says it
// runs, so it holds its grant again (its room is not handed to others), with no resume asked.
TEST(PreemptibleLeases, AResumeThatEndedWhileVramdWasDownIsSeenAtItsStart) {
  std::vector<Lease> kept;
  uint64_t batch = 0;
  {
    Host h;
    batch = start_batch(h);
    uint64_t urgent = h.request(job(10 * GiB, 5, "urgent", 200));
    h.run(1s);
    ASSERT_EQ(h.state(batch), LeaseState::suspended);
    h.feed(LeaseReleased{urgent, 0});
    kept = h.arbiter().leases();  // saved as the resume was asked
  }
  Host h;
  h.hold(100, 16 * GiB);  // resumed: on the GPU again
  h.sample();
  h.restore(kept, {batch});
  h.run(1s);
  EXPECT_EQ(h.check_calls, 1);
  EXPECT_EQ(h.resume_calls, 0);
  EXPECT_EQ(h.state(batch), LeaseState::granted);
  EXPECT_FALSE(h.lease(batch).suspension);
  auto resumed = h.events("lease.resumed");
  ASSERT_EQ(resumed.size(), 1u);
  EXPECT_NE(resumed[0].message.find("found running on GPU 0 at vramd's start"), std::string::npos)
      << resumed[0].message;
  // Its room is its own: a lease of 10 GiB more waits (only 8 GiB are free).
  uint64_t next = h.request(job(10 * GiB, 0, "next", 300));
  h.run(1s);
  EXPECT_EQ(h.state(next), LeaseState::queued);
}

// vramd died while the utility suspended the job: whatever it got to, the job runs again (a
// locked process is unlocked, a checkpointed one restored) and nothing is left half-suspended.
TEST(PreemptibleLeases, ASuspendCutShortByARestartIsPutBackToRunning) {
  std::vector<Lease> kept;
  uint64_t batch = 0;
  {
    Host h;
    batch = start_batch(h);
    h.request(job(10 * GiB, 5, "urgent", 200));  // asks the suspend; the utility never answers
    ASSERT_TRUE(h.lease(batch).suspension);
    ASSERT_EQ(h.lease(batch).suspension->step, LeaseSuspension::Step::suspending);
    kept = h.arbiter().leases();
  }
  Host h;
  h.hold(100, 16 * GiB);
  h.lock(100);  // the lock went through, the checkpoint did not
  h.sample();
  h.restore(kept, {batch});
  h.run(1s);
  EXPECT_EQ(h.resume_calls, 1);
  EXPECT_FALSE(h.checkpointed(100));
  EXPECT_EQ(h.state(batch), LeaseState::granted);
  EXPECT_FALSE(h.lease(batch).suspension);
  EXPECT_EQ(h.events("lease.resumed").size(), 1u);
}

// Two processes: the restart caught one checkpointed and one locked. Both are resumed at once,
// room or not: the job cannot go on half suspended.
TEST(PreemptibleLeases, AJobFoundHalfSuspendedAtStartIsResumedAtOnce) {
  std::vector<Lease> kept;
  uint64_t batch = 0;
  {
    Host h;
    h.sample();
    batch = h.request(job(16 * GiB, 0, "batch", 100, true));
    h.hold(100, 8 * GiB);
    h.hold(101, 8 * GiB);  // its child, on the GPU too
    h.parent(101, 100);
    h.run(500ms);
    uint64_t urgent = h.request(job(10 * GiB, 5, "urgent", 200));
    h.run(1s);
    ASSERT_EQ(h.state(batch), LeaseState::suspended);
    ASSERT_EQ(h.lease(batch).suspension->pids, (std::vector<int>{100, 101}));
    h.feed(LeaseReleased{urgent, 0});
    kept = h.arbiter().leases();
  }
  Host h;
  h.hold(100, 8 * GiB, true);
  h.hold(101, 8 * GiB);
  h.parent(101, 100);
  h.lock(101);
  h.hold(300, 4 * GiB);  // something else holds room meanwhile: the resume does not wait
  h.sample();
  h.restore(kept, {batch});
  h.run(1s);
  EXPECT_EQ(h.check_calls, 1);
  EXPECT_EQ(h.resume_calls, 1);
  EXPECT_EQ(h.state(batch), LeaseState::granted);
  EXPECT_FALSE(h.checkpointed(100));
  auto resuming = h.events("lease.resuming");
  ASSERT_EQ(resuming.size(), 1u);
  EXPECT_NE(resuming[0].message.find("running: none; locked: 101; checkpointed: 100"),
            std::string::npos)
      << resuming[0].message;
}

}  // namespace suspend_lease_test
}  // namespace vramd
