// Service policy driven through the Arbiter on a virtual clock: idle TTL, verified unloads, escalation.
#include "core/arbiter.h"

#include <gtest/gtest.h>

namespace vramd {
// Named, not anonymous: its helpers share a unity batch with other tests' (cmake/unity.cmake).
namespace service_policy_test {

using namespace std::chrono_literals;

// A world with one 24 GiB GPU and services whose processes hold memory; every call advances the
// virtual clock and feeds the Arbiter.
class World {
 public:
  explicit World(std::vector<ServiceConfig> services, DaemonConfig daemon = {}) {
    Config c;
    c.daemon = std::move(daemon);
    c.gpu.baseline = 400 * MiB;
    c.services.assign(services.begin(), services.end());
    arbiter_ = std::make_unique<Arbiter>(c);
  }

  // Process `pid` (named by cmdline "svc-NAME") holds `bytes` (nullopt: N/A, card_bytes used).
  void hold(int pid, const std::string& service, std::optional<Bytes> bytes, Bytes card_bytes = 0) {
    procs_[pid] = {service, bytes, bytes ? *bytes : card_bytes};
  }
  void release(int pid) { procs_.erase(pid); }
  void set_util(double pct) { util_ = pct; }

  std::vector<Action> sample() {
    SampleTaken s;
    GpuSample g;
    g.index = 0;
    g.name = "NVIDIA GeForce RTX 3090";
    g.total = 24 * GiB;
    g.used = 400 * MiB;
    g.utilization_pct = util_;
    for (const auto& [pid, p] : procs_) {
      g.processes.push_back({pid, p.bytes, ""});
      g.used += p.card;
      ProcessInfo info;
      info.pid = pid;
      info.ppid = 1;
      info.comm = "python3";
      info.cmdline = "svc-" + p.service;
      info.rss = 2 * GiB;
      s.host.processes.push_back(info);
    }
    s.gpus.backend = "test";
    s.gpus.gpus.push_back(g);
    return feed(s);
  }
  std::vector<Action> probe(const std::string& service, std::optional<bool> busy,
                            std::vector<std::string> models = {"model"},
                            std::optional<Bytes> self_report = std::nullopt) {
    ServiceProbe p;
    p.reachable = true;
    p.busy = busy;
    p.models = std::move(models);
    p.self_reported_vram = self_report;
    return feed(ProbeDone{service, p});
  }
  std::vector<Action> feed(const Event& e) {
    auto actions = arbiter_->handle(e, now_);
    all_.insert(all_.end(), actions.begin(), actions.end());
    return actions;
  }
  void advance(Duration d) { now_ += d; }
  // Advances in sample steps of `step`, sampling (and ticking) each time, for `total`.
  void run(Duration total, Duration step = 250ms) {
    for (Duration t{0}; t < total; t += step) {
      advance(step);
      sample();
      feed(Tick{});
    }
  }

  const Arbiter& arbiter() const { return *arbiter_; }
  Arbiter& arbiter_mut() { return *arbiter_; }
  MonoTime now() const { return now_; }
  template <typename T>
  std::vector<T> all() const {
    std::vector<T> out;
    for (const auto& a : all_)
      if (auto* x = std::get_if<T>(&a)) out.push_back(*x);
    return out;
  }
  void clear() { all_.clear(); }

 private:
  struct Proc {
    std::string service;
    std::optional<Bytes> bytes;
    Bytes card;
  };
  std::unique_ptr<Arbiter> arbiter_;
  std::map<int, Proc> procs_;
  double util_ = 0;
  MonoTime now_{Duration(1'800'000'000'000)};
  std::vector<Action> all_;
};

ServiceConfig svc(std::string name, std::string kind = "comfyui") {
  ServiceConfig s;
  s.name = name;
  s.kind = std::move(kind);
  s.url = "http://127.0.0.1:8188";
  s.match.cmdline = "^svc-" + name + "$";
  return s;
}

TEST(ArbiterUnload, TtlUnloadsAfterTheTtlAndNotBefore) {
  auto c = svc("comfyui");
  c.unload_after_idle = 5min;
  World w({c});
  w.hold(100, "comfyui", 16 * GiB);
  w.sample();
  w.probe("comfyui", false);
  w.run(4min + 50s, 1s);
  for (int i = 0; i < 5; ++i) w.probe("comfyui", false);
  EXPECT_TRUE(w.all<CallUnload>().empty()) << "unloaded before the TTL";
  w.run(15s, 1s);
  ASSERT_EQ(w.all<CallUnload>().size(), 1u);
  EXPECT_EQ(w.all<CallUnload>()[0].service, "comfyui");
  // The server frees it; the verdict is "freed" and no second TTL unload follows.
  w.feed(UnloadCallDone{"comfyui", w.all<CallUnload>()[0].unload_id,
                        {UnloadCall::Result::requested, "POST /free → 200"}, 20ms});
  w.hold(100, "comfyui", 380 * MiB);
  w.run(2s);
  auto done = w.all<UnloadFinished>();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].verdict.outcome, UnloadOutcome::freed);
  EXPECT_EQ(done[0].verdict.reason, UnloadReason::idle);
  EXPECT_EQ(done[0].verdict.before_bytes, 16 * GiB);
  EXPECT_EQ(done[0].verdict.after_bytes, 380 * MiB);
  EXPECT_EQ(done[0].verdict.escalation, Escalation::none);
  w.run(10min, 1s);
  EXPECT_EQ(w.all<CallUnload>().size(), 1u);
}

TEST(ArbiterUnload, TtlNeverUnloadsABusyService) {
  auto c = svc("comfyui");
  c.unload_after_idle = 1min;
  World w({c});
  w.hold(100, "comfyui", 16 * GiB);
  w.sample();
  for (int i = 0; i < 30; ++i) {
    w.probe("comfyui", true);
    w.run(10s, 1s);
  }
  EXPECT_TRUE(w.all<CallUnload>().empty());
  // Idle again: the TTL counts from the end of the work.
  w.probe("comfyui", false);
  w.run(50s, 1s);
  EXPECT_TRUE(w.all<CallUnload>().empty());
  w.run(15s, 1s);
  EXPECT_EQ(w.all<CallUnload>().size(), 1u);
}

TEST(ArbiterUnload, GpuUtilisationWhileAloneCountsAsActivity) {
  auto c = svc("ollama", "ollama");
  c.unload_after_idle = 1min;
  World w({c});
  w.hold(100, "ollama", 8 * GiB);
  w.sample();
  w.probe("ollama", std::nullopt);  // Ollama has no busy call
  w.set_util(80);
  w.run(3min, 1s);
  EXPECT_TRUE(w.all<CallUnload>().empty());
  w.set_util(0);
  w.run(65s, 1s);
  EXPECT_EQ(w.all<CallUnload>().size(), 1u);
}

TEST(ArbiterUnload, AReleaseThatTakesTwoSecondsIsFreedNotIneffective) {
  World w({svc("comfyui")});
  w.hold(100, "comfyui", 16 * GiB);
  w.sample();
  w.probe("comfyui", false);
  w.feed(UnloadRequested{"comfyui", UnloadReason::manual, 7});
  auto call = w.all<CallUnload>().at(0);
  w.feed(UnloadCallDone{"comfyui", call.unload_id, {UnloadCall::Result::requested, "200"}, 5ms});
  EXPECT_TRUE(w.arbiter().fast_sampling());
  w.run(2s);  // nothing moves for 2 s: not a verdict yet
  EXPECT_TRUE(w.all<UnloadFinished>().empty());
  w.hold(100, "comfyui", 370 * MiB);
  w.run(1s);
  auto done = w.all<UnloadFinished>();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].request_id, 7u);
  EXPECT_EQ(done[0].verdict.outcome, UnloadOutcome::freed);
  EXPECT_GE(done[0].verdict.duration, 2s);
  EXPECT_LT(done[0].verdict.duration, 3s);
  EXPECT_FALSE(w.arbiter().fast_sampling());
  EXPECT_EQ(w.all<SetFastSampling>().size(), 2u);
}

TEST(ArbiterUnload, AnsweredButNothingFreedIsIneffectiveAndRestartsARestartableService) {
  auto c2 = svc("comfyui");
  c2.on_ineffective_unload = IneffectiveUnload::restart;
  c2.match.container = "";
  World w2({c2});
  w2.hold(100, "comfyui", 16 * GiB);
  w2.sample();
  w2.probe("comfyui", false);
  w2.feed(UnloadRequested{"comfyui", UnloadReason::manual, 1});
  w2.feed(UnloadCallDone{"comfyui", w2.all<CallUnload>().at(0).unload_id,
                         {UnloadCall::Result::requested, "200"}, 5ms});
  w2.run(31s);
  auto done = w2.all<UnloadFinished>();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].verdict.outcome, UnloadOutcome::ineffective);
  // Matched by cmdline only: vramd cannot restart it, so it reports why.
  EXPECT_EQ(done[0].verdict.escalation, Escalation::report);
  EXPECT_NE(done[0].verdict.message.find("cannot"), std::string::npos) << done[0].verdict.message;
  EXPECT_TRUE(w2.all<Lifecycle>().empty());
}

TEST(ArbiterUnload, IneffectiveUnloadOfAUnitServiceRestartsIt) {
  auto c = svc("comfyui");
  c.on_ineffective_unload = IneffectiveUnload::restart;
  c.match = {};
  c.match.unit = "comfyui.service";
  World w({c});
  // Processes in the unit: build the sample by hand with the cgroup set.
  SampleTaken s;
  GpuSample g;
  g.total = 24 * GiB;
  g.used = 16 * GiB + 400 * MiB;
  g.processes.push_back({100, 16 * GiB, ""});
  s.gpus.gpus.push_back(g);
  ProcessInfo p;
  p.pid = 100;
  p.comm = "python3";
  p.cgroup.kind = CgroupIdentity::Kind::unit;
  p.cgroup.unit = "comfyui.service";
  s.host.processes.push_back(p);
  w.feed(s);
  w.probe("comfyui", false);
  w.feed(UnloadRequested{"comfyui", UnloadReason::manual, 1});
  w.feed(UnloadCallDone{"comfyui", w.all<CallUnload>().at(0).unload_id,
                        {UnloadCall::Result::requested, "200"}, 5ms});
  for (int i = 0; i < 130; ++i) {
    w.advance(250ms);
    w.feed(s);
  }
  auto done = w.all<UnloadFinished>();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].verdict.outcome, UnloadOutcome::ineffective);
  EXPECT_EQ(done[0].verdict.escalation, Escalation::restart);
  auto lc = w.all<Lifecycle>();
  ASSERT_EQ(lc.size(), 1u);
  EXPECT_EQ(lc[0].action, Command::restart);
  EXPECT_EQ(lc[0].via, Control::unit);
  EXPECT_EQ(lc[0].target, "comfyui.service");
}

TEST(ArbiterUnload, ReportPlusBackoffAndNoSecondCallInsideTheBackoff) {
  auto c = svc("comfyui");
  c.unload_after_idle = 1min;
  c.unload_backoff = 10min;
  World w({c});
  w.hold(100, "comfyui", 16 * GiB);
  w.sample();
  w.probe("comfyui", false);
  w.run(61s, 1s);
  ASSERT_EQ(w.all<CallUnload>().size(), 1u);
  w.feed(UnloadCallDone{"comfyui", w.all<CallUnload>().at(0).unload_id,
                        {UnloadCall::Result::requested, "200"}, 5ms});
  w.run(31s);
  auto done = w.all<UnloadFinished>();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].verdict.outcome, UnloadOutcome::ineffective);
  EXPECT_EQ(done[0].verdict.escalation, Escalation::report);
  // Activity and a new idle period inside the backoff: still no second call.
  w.probe("comfyui", true);
  w.probe("comfyui", false);
  w.run(5min, 1s);
  EXPECT_EQ(w.all<CallUnload>().size(), 1u);
  // A manual free inside the backoff is refused with the reason, unless forced.
  w.feed(UnloadRequested{"comfyui", UnloadReason::manual, 9});
  auto refused = w.all<UnloadFinished>().back();
  EXPECT_TRUE(refused.refused);
  EXPECT_NE(refused.verdict.message.find("unload_backoff"), std::string::npos);
  EXPECT_EQ(w.all<CallUnload>().size(), 1u);
  w.feed(UnloadRequested{"comfyui", UnloadReason::manual, 10, true});
  EXPECT_EQ(w.all<CallUnload>().size(), 2u);
}

TEST(ArbiterUnload, BackoffEndsAndTheTtlTriesAgain) {
  auto c = svc("comfyui");
  c.unload_after_idle = 1min;
  c.unload_backoff = 10min;
  World w({c});
  w.hold(100, "comfyui", 16 * GiB);
  w.sample();
  w.probe("comfyui", false);
  w.run(61s, 1s);
  w.feed(UnloadCallDone{"comfyui", w.all<CallUnload>().at(0).unload_id,
                        {UnloadCall::Result::requested, "200"}, 5ms});
  w.run(31s);
  w.probe("comfyui", true);  // worked in between: a new idle period
  w.probe("comfyui", false);
  w.run(11min, 1s);
  EXPECT_EQ(w.all<CallUnload>().size(), 2u);
}

TEST(ArbiterUnload, PartialReleaseIsPartial) {
  World w({svc("comfyui")});
  w.hold(100, "comfyui", 16 * GiB);
  w.sample();
  w.feed(UnloadRequested{"comfyui", UnloadReason::manual, 1});
  w.feed(UnloadCallDone{"comfyui", 1, {UnloadCall::Result::requested, "200"}, 5ms});
  w.hold(100, "comfyui", 8 * GiB);
  w.run(2s);
  auto done = w.all<UnloadFinished>();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].verdict.outcome, UnloadOutcome::partial);
  EXPECT_EQ(done[0].verdict.after_bytes, 8 * GiB);
}

TEST(ArbiterUnload, FailedCallIsFailedAndReported) {
  World w({svc("comfyui")});
  w.hold(100, "comfyui", 16 * GiB);
  w.sample();
  w.feed(UnloadRequested{"comfyui", UnloadReason::manual, 1});
  w.feed(UnloadCallDone{"comfyui", 1, {UnloadCall::Result::failed, "POST /free → 500"}, 5ms});
  auto done = w.all<UnloadFinished>();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].verdict.outcome, UnloadOutcome::failed);
  EXPECT_EQ(done[0].verdict.escalation, Escalation::report);
  EXPECT_NE(done[0].verdict.message.find("500"), std::string::npos);
  EXPECT_FALSE(w.arbiter().fast_sampling());
}

TEST(ArbiterUnload, BusyServiceIsNotUnloadedOnRequest) {
  World w({svc("comfyui")});
  w.hold(100, "comfyui", 16 * GiB);
  w.sample();
  w.probe("comfyui", true);
  w.feed(UnloadRequested{"comfyui", UnloadReason::manual, 3});
  auto done = w.all<UnloadFinished>();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_TRUE(done[0].refused);
  EXPECT_NE(done[0].verdict.message.find("busy"), std::string::npos);
  EXPECT_TRUE(w.all<CallUnload>().empty());
}

TEST(ArbiterUnload, UnknownServiceIsRefused) {
  World w({svc("comfyui")});
  w.feed(UnloadRequested{"comfyuj", UnloadReason::manual, 3});
  auto done = w.all<UnloadFinished>();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_TRUE(done[0].refused);
}

// The field case: ComfyUI holding 15.4 GiB on WSL (per-process N/A) while it reports
// torch_vram_total 0.1 GB: named by residual, unloaded, before → after recorded.
TEST(ArbiterUnload, WslComfyuiNamedByResidualUnloadedAndMeasured) {
  World w({svc("comfyui")});
  w.hold(79, "comfyui", std::nullopt, Bytes(15.4 * GiB));
  w.sample();
  w.probe("comfyui", false, {}, 100'000'000);
  w.sample();
  const auto& gpu = w.arbiter().status().gpus.at(0);
  ASSERT_FALSE(gpu.per_process_available);
  ASSERT_EQ(gpu.holdings.at(0).owner.name, "comfyui");
  EXPECT_EQ(gpu.holdings.at(0).source, Source::residual);
  EXPECT_EQ(gpu.holdings.at(0).bytes, Bytes(15.4 * GiB));
  for (const auto& h : gpu.holdings) EXPECT_NE(h.owner.kind, OwnerKind::unknown);
  w.feed(UnloadRequested{"comfyui", UnloadReason::manual, 1});
  w.feed(UnloadCallDone{"comfyui", 1, {UnloadCall::Result::requested, "200"}, 5ms});
  w.hold(79, "comfyui", std::nullopt, 370 * MiB);
  w.run(2s);
  auto done = w.all<UnloadFinished>();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].verdict.outcome, UnloadOutcome::freed);
  EXPECT_EQ(done[0].verdict.before_bytes, Bytes(15.4 * GiB));
  EXPECT_EQ(done[0].verdict.after_bytes, 370 * MiB);
  ASSERT_TRUE(done[0].verdict.rss_before.has_value());
}

TEST(ArbiterUnload, NoUnloadApiMeansStopWhereVramdCanElseReport) {
  auto c = svc("llama", "llamacpp");
  World w({c});
  w.hold(100, "llama", 8 * GiB);
  w.sample();
  w.feed(UnloadRequested{"llama", UnloadReason::manual, 1});
  w.feed(UnloadCallDone{"llama", 1, {UnloadCall::Result::not_supported, "plain llama-server has no unload API"}, 1ms});
  auto done = w.all<UnloadFinished>();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].verdict.outcome, UnloadOutcome::failed);
  EXPECT_EQ(done[0].verdict.escalation, Escalation::report);
  EXPECT_NE(done[0].verdict.message.find("would stop"), std::string::npos) << done[0].verdict.message;
}

TEST(ArbiterUnload, ServicesSnapshotCarriesStateIdleModelsAndLastUnload) {
  World w({svc("comfyui")});
  w.hold(100, "comfyui", 16 * GiB);
  w.sample();
  w.probe("comfyui", false, {"sdxl"});
  w.run(3s, 1s);
  auto s = w.arbiter().services();
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].state, ServiceState::up);
  EXPECT_EQ(s[0].busy, false);
  EXPECT_EQ(s[0].models, std::vector<std::string>{"sdxl"});
  EXPECT_EQ(s[0].bytes, 16 * GiB);
  ASSERT_TRUE(s[0].idle_since.has_value());
  EXPECT_FALSE(s[0].last_unload.has_value());
}

TEST(ArbiterUnload, UnreachableProbeMarksTheServiceAndEmitsOneEvent) {
  World w({svc("comfyui")});
  ServiceProbe p;
  p.reachable = false;
  p.error = "connect: Connection refused";
  w.feed(ProbeDone{"comfyui", p});
  w.feed(ProbeDone{"comfyui", p});
  EXPECT_EQ(w.arbiter().service("comfyui")->state, ServiceState::unreachable);
  int events = 0;
  for (const auto& e : w.all<EmitEvent>()) events += e.event.type == "service.unreachable";
  EXPECT_EQ(events, 1);
}

// --- Load peaks (core/wake.h): what a wake or start of each model is admitted for ---

std::vector<LoadPeak> remembered(const World& w) {
  std::vector<LoadPeak> out;
  for (const auto& r : w.all<RememberLoadPeak>()) out.push_back(r.peak);
  return out;
}

TEST(ArbiterLoadPeaks, TheOnlyModelsPeakIsLearnedOnceTheLoadSettlesAndStoredOncePerStep) {
  World w({svc("vllm", "vllm")});
  w.sample();
  w.probe("vllm", false, {"llama3"});
  // A load ramps up over three samples, then holds: nothing is stored while it grows.
  for (Bytes b : {2 * GiB, 5 * GiB, 8 * GiB}) {
    w.hold(100, "vllm", b);
    w.advance(1s);
    w.sample();
  }
  EXPECT_TRUE(remembered(w).empty());
  w.advance(1s);
  w.sample();  // settled
  ASSERT_EQ(remembered(w).size(), 1u);
  EXPECT_EQ(remembered(w)[0].service, "vllm");
  EXPECT_EQ(remembered(w)[0].model, "llama3");
  EXPECT_EQ(remembered(w)[0].bytes, 8 * GiB);
  const ServiceStatus* st = w.arbiter().service("vllm");
  EXPECT_EQ(st->last_load_bytes, 8 * GiB);
  // Growth below a step raises the peak but is not worth a write; a step more is.
  w.hold(100, "vllm", 8 * GiB + 32 * MiB);
  w.run(2s, 1s);
  EXPECT_EQ(remembered(w).size(), 1u);
  EXPECT_EQ(w.arbiter().service("vllm")->load_peaks.at("llama3"), 8 * GiB + 32 * MiB);
  w.hold(100, "vllm", 9 * GiB);
  w.run(2s, 1s);
  ASSERT_EQ(remembered(w).size(), 2u);
  EXPECT_EQ(remembered(w)[1].bytes, 9 * GiB);
  // Less later does not lower it.
  w.hold(100, "vllm", 3 * GiB);
  w.run(3s, 1s);
  EXPECT_EQ(w.arbiter().service("vllm")->load_peaks.at("llama3"), 9 * GiB);
}

TEST(ArbiterLoadPeaks, TwoModelsAtOnceTeachNothingAndNoModelsIsTheEmptyName) {
  World w({svc("ollama", "ollama"), svc("comfyui")});
  w.sample();
  w.probe("ollama", false, {"a", "b"});
  w.probe("comfyui", false, {});
  w.hold(100, "ollama", 10 * GiB);
  w.hold(200, "comfyui", 6 * GiB);
  w.run(3s, 1s);
  EXPECT_TRUE(w.arbiter().service("ollama")->load_peaks.empty()) << "whose bytes are whose?";
  EXPECT_EQ(w.arbiter().service("comfyui")->load_peaks.at(""), 6 * GiB);
}

TEST(ArbiterLoadPeaks, RestoredPeaksCountAndAreNotStoredAgain) {
  World w({svc("vllm", "vllm")});
  w.arbiter_mut().restore_load_peaks({{"vllm", "llama3", 12 * GiB}, {"gone", "x", GiB}});
  EXPECT_EQ(w.arbiter().service("vllm")->load_peaks.at("llama3"), 12 * GiB);
  w.sample();
  w.probe("vllm", false, {"llama3"});
  w.hold(100, "vllm", 8 * GiB);
  w.run(3s, 1s);
  EXPECT_TRUE(remembered(w).empty()) << "8 GiB is below the 12 GiB already stored";
  EXPECT_EQ(w.arbiter().service("vllm")->load_peaks.at("llama3"), 12 * GiB);
}


// ---- Probe pacing (core/probe_pacing.h) ----

// What the shell's probe loop does with ScheduleProbe: the wait the last one asked for.
std::optional<Duration> scheduled(const std::vector<Action>& actions, const std::string& service) {
  std::optional<Duration> out;
  for (const auto& a : actions)
    if (auto* p = std::get_if<ScheduleProbe>(&a); p && p->service == service) out = p->after;
  return out;
}

// Runs `total` in 1 s samples, probing `service` when the core's ScheduleProbe says (answering
// `busy`); returns the times of the probes. `unload_ages`: for each CallUnload, how old the
// service's last probe was then.
std::vector<MonoTime> run_paced(World& w, const std::string& service, Duration total,
                                std::optional<bool> busy = false,
                                std::vector<Duration>* unload_ages = nullptr) {
  std::vector<MonoTime> probes;
  MonoTime due = w.now();
  MonoTime end = w.now() + total;
  auto take = [&](const std::vector<Action>& actions) {
    if (auto after = scheduled(actions, service)) due = w.now() + *after;
    for (const auto& a : actions)
      if (std::holds_alternative<CallUnload>(a) && unload_ages && !probes.empty())
        unload_ages->push_back(w.now() - probes.back());
  };
  while (w.now() < end) {
    if (w.now() >= due) {
      probes.push_back(w.now());
      take(w.probe(service, busy));
    }
    w.advance(1s);
    take(w.sample());
    take(w.feed(Tick{}));
  }
  return probes;
}

std::vector<Duration> gaps(const std::vector<MonoTime>& at) {
  std::vector<Duration> out;
  for (size_t i = 1; i < at.size(); ++i) out.push_back(at[i] - at[i - 1]);
  return out;
}

// What the pacing tests start from: `c` alone, holding `bytes`, sampled once.
World holding(Bytes bytes, ServiceConfig c = svc("comfyui"), DaemonConfig daemon = {}) {
  World w({c}, std::move(daemon));
  w.hold(100, c.name, bytes);
  w.sample();
  return w;
}

TEST(ProbePacing, BacksOffWhileTheAnswersRepeatAndTheGpuStandsStill) {
  World w = holding(8 * GiB);
  // probe_interval 2 s, quiet_probe_interval 10 s (the defaults): 2, 2, 4, 8, then 10 s apart.
  auto at = run_paced(w, "comfyui", 60s);
  std::vector<Duration> want = {2s, 2s, 4s, 8s, 10s, 10s, 10s, 10s};
  std::vector<Duration> got = gaps(at);
  ASSERT_GE(got.size(), want.size());
  EXPECT_EQ(std::vector<Duration>(got.begin(), got.begin() + 8), want);
  EXPECT_EQ(w.arbiter().service("comfyui")->pace.due, at.back() + 10s);
}

TEST(ProbePacing, WhatTheGpuShowsBringsTheNextProbeForward) {
  World w = holding(8 * GiB);
  auto at = run_paced(w, "comfyui", 40s);
  MonoTime last = at.back();
  ASSERT_EQ(w.arbiter().service("comfyui")->pace.due, last + 10s);
  // A model loads (its bytes move by more than 64 MiB): probed at once, and backing off starts
  // again from probe_interval.
  w.hold(100, "comfyui", 12 * GiB);
  w.advance(1s);
  auto after = scheduled(w.sample(), "comfyui");
  ASSERT_TRUE(after);
  EXPECT_EQ(w.now() + *after, std::max(w.now(), last + 2s));
  at = run_paced(w, "comfyui", 12s);
  EXPECT_EQ(gaps(at), (std::vector<Duration>{2s, 4s}));
  // Moves below 64 MiB are noise: nothing brought forward.
  run_paced(w, "comfyui", 30s);
  w.hold(100, "comfyui", 12 * GiB + 32 * MiB);
  w.advance(1s);
  EXPECT_FALSE(scheduled(w.sample(), "comfyui"));
  // The GPU it holds memory on works: probe_interval while it does.
  w.set_util(80);
  w.advance(1s);
  EXPECT_TRUE(scheduled(w.sample(), "comfyui"));
  at = run_paced(w, "comfyui", 10s);
  for (Duration g : gaps(at)) EXPECT_EQ(g, 2s);
}

TEST(ProbePacing, BusyAnswersAndWaitingLeasesKeepTheProbeInterval) {
  World w = holding(8 * GiB);
  for (Duration g : gaps(run_paced(w, "comfyui", 30s, /*busy=*/true))) EXPECT_EQ(g, 2s);
  auto at = run_paced(w, "comfyui", 40s);
  ASSERT_EQ(w.arbiter().service("comfyui")->pace.due, at.back() + 10s);
  // A lease that does not fit waits: an eviction may be decided on this service's answers.
  LeaseRequest r;
  r.vram = 20 * GiB;
  r.holder = "job";
  w.feed(LeaseRequested{w.arbiter().next_lease_id(), r});
  w.advance(1s);
  auto after = scheduled(w.sample(), "comfyui");
  ASSERT_TRUE(after);
  EXPECT_LE(*after, 2s);
}

TEST(ProbePacing, OnASharedStoreTheProbesDoNotBackOff) {
  // Another host's lease may be given room here at any claim round, unseen until then.
  DaemonConfig shared;
  shared.store = "postgresql://vramd@db/vramd";
  World w = holding(8 * GiB, svc("comfyui"), shared);
  for (Duration g : gaps(run_paced(w, "comfyui", 40s))) EXPECT_EQ(g, 2s);
}

TEST(ProbePacing, AnIdleTtlIsDecidedOnAFreshProbe) {
  auto c = svc("comfyui");
  c.unload_after_idle = 45s;
  World w = holding(16 * GiB, c);
  std::vector<Duration> ages;
  auto at = run_paced(w, "comfyui", 50s, false, &ages);
  // The probes backed off, then came back to probe_interval before the TTL fell due: the
  // unload was decided on a probe at most 2 s old.
  ASSERT_EQ(ages.size(), 1u);
  EXPECT_LE(ages[0], 2s);
  auto g = gaps(at);
  EXPECT_NE(std::find(g.begin(), g.end(), 8s), g.end());
}

TEST(ProbePacing, ChangesToTheServiceAndHealthThatDisagreesResetThePace) {
  World w = holding(8 * GiB);
  auto at = run_paced(w, "comfyui", 40s);
  ASSERT_EQ(w.arbiter().service("comfyui")->pace.due, at.back() + 10s);
  // Its container restarted: back to probe_interval from the last probe.
  auto after = scheduled(w.feed(ContainerChanged{"comfyui", true}), "comfyui");
  ASSERT_TRUE(after);
  EXPECT_EQ(w.now() + *after, std::max(w.now(), at.back() + 2s));
  // A health check that says it is down while the last probe found it up: probed now.
  at = run_paced(w, "comfyui", 40s);
  after = scheduled(w.feed(HealthChecked{"comfyui", false, "GET /system_stats: refused"}),
                    "comfyui");
  ASSERT_TRUE(after);
  EXPECT_EQ(*after, 0s);
  // One that agrees changes nothing.
  at = run_paced(w, "comfyui", 40s);
  EXPECT_FALSE(scheduled(w.feed(HealthChecked{"comfyui", true, "ok"}), "comfyui"));
}

TEST(ProbePacing, AQuietIntervalOfProbeIntervalMeansNoBackingOff) {
  auto cfg = parse_config("[daemon]\nprobe_interval = \"3s\"\nquiet_probe_interval = \"3s\"\n",
                          "t.toml");
  ASSERT_TRUE(cfg.ok()) << cfg.error();
  EXPECT_EQ(cfg->daemon.quiet_probe_interval, 3s);
  World w = holding(8 * GiB, svc("comfyui"), cfg->daemon);
  for (Duration g : gaps(run_paced(w, "comfyui", 40s))) EXPECT_EQ(g, 3s);
  // Unset: 10 s, or probe_interval when that is longer.
  EXPECT_EQ(parse_config("[daemon]\nprobe_interval = \"30s\"\n", "t.toml")->daemon.quiet_probe_interval,
            30s);
  EXPECT_EQ(parse_config("", "t.toml")->daemon.quiet_probe_interval, 10s);
  auto bad = parse_config("[daemon]\nprobe_interval = \"5s\"\nquiet_probe_interval = \"2s\"\n",
                          "t.toml");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().find("t.toml:3:24: daemon.quiet_probe_interval: must be at least "
                             "probe_interval (5s)"),
            std::string::npos)
      << bad.error();
}

}  // namespace service_policy_test
}  // namespace vramd
