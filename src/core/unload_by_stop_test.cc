// Issue 46: a server without an unload call (a plain llama-server, a `process`) is unloaded by
// its stop where vramd can stop it, with the verdict of the GPU's numbers and no backoff; one
// vramd can neither unload nor stop is never an eviction candidate, and a lease's reason says so.
// The Arbiter on a virtual clock, a llama-server's process holding 3 GiB of a 24 GiB GPU.
#include <csignal>

#include <gtest/gtest.h>

#include "core/arbiter.h"

namespace vramd {
// Named, not anonymous: its helpers share a unity batch with other tests' (cmake/unity.cmake).
namespace unload_by_stop_test {

using namespace std::chrono_literals;

constexpr int kPid = 4242;
constexpr const char* kNoUnload =
    "plain llama-server has no unload: stopping the process frees its memory (router mode has "
    "POST /models/unload)";

// "sup": kind llamacpp, router unset (assumed, as in the issue), run by vramd when `runs`.
ServiceConfig llama(bool runs) {
  ServiceConfig s;
  s.name = "sup";
  s.kind = "llamacpp";
  s.url = "http://127.0.0.1:8080";
  s.match.cmdline = "llama-server";
  if (runs) s.start = {"llama-server", "-m", "m.gguf", "--port", "8080"};
  s.min_idle = 30s;
  return s;
}

class Host {
 public:
  explicit Host(bool runs) {
    Config c;
    c.gpu.baseline = 0;
    c.services.push_back(llama(runs));
    arbiter_ = std::make_unique<Arbiter>(c);
    if (runs) feed(ChildStarted{"sup", true, kPid, 99, "", /*adopted=*/true});
    sample();
    ServiceProbe p;
    p.reachable = true;
    p.busy = false;
    p.models = {"m"};
    feed(ProbeDone{"sup", p});
  }

  // The driver lists kPid with `bytes` (none: not listed); the host lists it while `alive`.
  void sample() {
    SampleTaken s;
    GpuSample g;
    g.index = 0;
    g.name = "NVIDIA GeForce RTX 3090";
    g.total = 24 * GiB;
    g.used = on_gpu;
    if (on_gpu) g.processes.push_back({kPid, on_gpu, ""});
    if (alive) {
      ProcessInfo info;
      info.pid = kPid;
      info.ppid = 1;
      info.comm = "llama-server";
      info.cmdline = "llama-server -m m.gguf --port 8080";
      s.host.processes.push_back(info);
    }
    s.gpus.backend = "test";
    s.gpus.gpus.push_back(g);
    feed(s);
  }
  std::vector<Action> feed(const Event& e) {
    auto actions = arbiter_->handle(e, now_);
    for (const auto& a : actions) {
      if (auto* u = std::get_if<CallUnload>(&a)) {
        // Its adapter has no unload call: it answers at once.
        later_.push_back(UnloadCallDone{
            u->service, u->unload_id, {UnloadCall::Result::not_supported, kNoUnload}, 1ms});
        ++unload_calls;
      }
      if (auto* s = std::get_if<SignalService>(&a)) signals.push_back(s->signal);
      if (std::holds_alternative<SpawnService>(a)) ++spawns;
      if (auto* f = std::get_if<UnloadFinished>(&a)) verdicts.push_back(f->verdict);
      if (auto* e2 = std::get_if<EmitEvent>(&a)) events.push_back(e2->event);
    }
    all_.insert(all_.end(), actions.begin(), actions.end());
    std::vector<Event> now_due;
    now_due.swap(later_);
    for (const auto& d : now_due) feed(d);
    return actions;
  }
  // Samples every 250 ms for `d`, with ticks (and the client's heartbeats of `lease`).
  void run(Duration d) {
    for (Duration t{0}; t < d; t += 250ms) {
      now_ += 250ms;
      sample();
      feed(Tick{});
      if (lease) feed(LeaseHeartbeat{*lease});
    }
  }
  const Arbiter& arbiter() const { return *arbiter_; }
  size_t count(const std::string& type) const {
    size_t n = 0;
    for (const auto& e : events) n += e.type == type;
    return n;
  }

  Bytes on_gpu = 3 * GiB;
  bool alive = true;
  std::optional<uint64_t> lease;
  int unload_calls = 0;
  int spawns = 0;
  std::vector<int> signals;
  std::vector<UnloadVerdict> verdicts;
  std::vector<EventRecord> events;

 private:
  std::unique_ptr<Arbiter> arbiter_;
  MonoTime now_{Duration(1'800'000'000'000)};
  std::vector<Action> all_;
  std::vector<Event> later_;
};

TEST(UnloadByStop, APlainLlamaServerVramdRunsIsFreedByItsStopWithoutBackoff) {
  Host h(/*runs=*/true);
  h.feed(UnloadRequested{"sup", UnloadReason::manual, 1});
  ASSERT_EQ(h.unload_calls, 1);
  // Its adapter says it has no unload call: the stop is its unload.
  ASSERT_EQ(h.signals, std::vector<int>{SIGTERM});
  EXPECT_TRUE(h.verdicts.empty()) << h.verdicts[0].message;  // judged by the GPU, not yet
  EXPECT_EQ(h.count("unload.stopping"), 1u);
  // It exits: the host no longer lists it while the driver still lists its memory for a moment.
  h.alive = false;
  h.feed(ChildExited{"sup", kPid, std::nullopt, SIGTERM});
  h.run(500ms);
  for (const auto& held : h.arbiter().status().gpus.at(0).holdings) {
    if (held.bytes == 0) continue;
    EXPECT_EQ(held.owner, (Owner{OwnerKind::service, "sup"}));  // not process ?[4242]
  }
  EXPECT_EQ(h.arbiter().service("sup")->bytes, 3 * GiB);
  EXPECT_TRUE(h.verdicts.empty()) << h.verdicts[0].message;
  h.on_gpu = 0;  // released
  h.run(1s);
  ASSERT_EQ(h.verdicts.size(), 1u);
  const UnloadVerdict& v = h.verdicts[0];
  EXPECT_EQ(v.outcome, UnloadOutcome::freed) << v.message;
  EXPECT_EQ(v.before_bytes, 3 * GiB);
  EXPECT_EQ(v.after_bytes, 0u);
  EXPECT_EQ(v.depth, SleepDepth::stop);
  EXPECT_NE(v.message.find("stopped instead"), std::string::npos) << v.message;
  EXPECT_EQ(h.count("unload.freed"), 1u);
  EXPECT_EQ(h.count("unload.failed"), 0u);
  const ServiceStatus* st = h.arbiter().service("sup");
  EXPECT_FALSE(st->backoff_until.has_value());  // nothing to wait out before the next
  ASSERT_TRUE(st->asleep.has_value());
  EXPECT_EQ(st->asleep->depth, SleepDepth::stop);  // a request starts it again
  EXPECT_FALSE(st->can_unload);                    // learned from its adapter's answer
}

// A request while its stop runs waits for the verdict, then starts it again (it used to wait on
// a stop nobody followed with a start).
TEST(UnloadByStop, ARequestDuringTheStopStartsItOnceTheVerdictIsIn) {
  Host h(/*runs=*/true);
  h.feed(UnloadRequested{"sup", UnloadReason::manual, 1});
  h.feed(WakeRequested{1, "sup", "m", false});
  EXPECT_EQ(h.spawns, 0);
  h.alive = false;
  h.feed(ChildExited{"sup", kPid, std::nullopt, SIGTERM});
  h.on_gpu = 0;
  h.run(1500ms);
  ASSERT_EQ(h.verdicts.size(), 1u);
  EXPECT_EQ(h.verdicts[0].outcome, UnloadOutcome::freed);
  EXPECT_EQ(h.spawns, 1);
}

TEST(UnloadByStop, AStopThatFreesNothingIsNotFreed) {
  Host h(/*runs=*/true);
  h.feed(UnloadRequested{"sup", UnloadReason::manual, 1});
  ASSERT_EQ(h.signals, std::vector<int>{SIGTERM});
  // It ignores SIGTERM and SIGKILL does not come back in time: its bytes stay (the verdict is
  // the GPU's, whatever the stop did).
  h.run(60s);
  ASSERT_EQ(h.verdicts.size(), 1u);
  EXPECT_EQ(h.verdicts[0].outcome, UnloadOutcome::ineffective) << h.verdicts[0].message;
  EXPECT_TRUE(h.arbiter().service("sup")->backoff_until.has_value());
}

TEST(UnloadByStop, ALeaseThatNeedsItsRoomStopsItAndIsGranted) {
  Host h(/*runs=*/true);
  h.run(40s);  // idle past min_idle
  h.feed(LeaseRequested{1, LeaseRequest{.vram = 22 * GiB, .holder = "vramd run"}});
  ASSERT_EQ(h.signals, std::vector<int>{SIGTERM});
  h.alive = false;
  h.feed(ChildExited{"sup", kPid, std::nullopt, SIGTERM});
  h.on_gpu = 0;
  h.run(2s);
  ASSERT_EQ(h.verdicts.size(), 1u);
  EXPECT_EQ(h.verdicts[0].outcome, UnloadOutcome::freed) << h.verdicts[0].message;
  EXPECT_EQ(h.verdicts[0].reason, UnloadReason::eviction);
  const Lease* l = h.arbiter().lease(1);
  ASSERT_NE(l, nullptr);
  EXPECT_EQ(l->state, LeaseState::granted) << l->reason.text;
}

TEST(UnloadByStop, APlainLlamaServerVramdCannotStopIsNoCandidateAndTheReasonSaysSo) {
  Host h(/*runs=*/false);
  h.run(40s);
  h.feed(LeaseRequested{1, LeaseRequest{.vram = 22 * GiB, .holder = "vramd run"}});
  h.lease = 1;
  // Router mode is assumed until its adapter answers: asked once, and it has none.
  EXPECT_EQ(h.unload_calls, 1);
  ASSERT_EQ(h.verdicts.size(), 1u);
  EXPECT_EQ(h.verdicts[0].outcome, UnloadOutcome::failed);
  EXPECT_TRUE(h.signals.empty());
  EXPECT_FALSE(h.arbiter().service("sup")->backoff_until.has_value());
  h.run(15min);  // never again: not a candidate, and no backoff running out
  EXPECT_EQ(h.unload_calls, 1);
  EXPECT_EQ(h.count("unload.failed"), 1u);
  const Lease* l = h.arbiter().lease(1);
  ASSERT_NE(l, nullptr);
  EXPECT_EQ(l->state, LeaseState::queued);
  EXPECT_NE(l->reason.text.find("sup holds 3.0 GiB, vramd cannot free it"), std::string::npos)
      << l->reason.text;
  // By hand: refused at once, saying why.
  h.feed(UnloadRequested{"sup", UnloadReason::manual, 2});
  EXPECT_EQ(h.unload_calls, 1);
  ASSERT_EQ(h.verdicts.size(), 2u);
  EXPECT_NE(h.verdicts[1].message.find("vramd cannot free sup"), std::string::npos)
      << h.verdicts[1].message;
}

}  // namespace unload_by_stop_test
}  // namespace vramd
