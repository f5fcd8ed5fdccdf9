// The Arbiter as a router: time (the monotonic clock decides, the wall clock only stamps what
// people read), next_deadline(), and intents handed between the parts.
#include "core/arbiter.h"

#include <gtest/gtest.h>

#include <fmt/format.h>

namespace vramd {
namespace {

using namespace std::chrono_literals;

Config test_config() {
  Config c;
  c.gpu.baseline = 400 * MiB;
  c.daemon.lease_heartbeat = 30s;
  ServiceConfig comfy;
  comfy.name = "comfy";
  comfy.kind = "comfyui";
  comfy.url = "http://127.0.0.1:8188";
  comfy.match.cmdline = "svc-comfy";
  comfy.unload_after_idle = 60s;
  comfy.min_idle = 10s;
  ServiceConfig whisper;
  whisper.name = "whisper";
  whisper.kind = "process";
  whisper.start = {"whisper-server"};
  whisper.health_interval = 5s;
  whisper.start_timeout = 20s;
  whisper.stop_timeout = 5s;
  c.services = {comfy, whisper};
  return c;
}

// What an action decides, without the wall-clock stamps that only people read.
std::string decision(const Action& a) {
  if (auto* e = std::get_if<EmitEvent>(&a))
    return "event " + e->event.type + ": " + e->event.message;
  if (auto* c = std::get_if<CallUnload>(&a)) return "unload " + c->service;
  if (auto* f = std::get_if<SetFastSampling>(&a)) return f->on ? "fast" : "slow";
  if (auto* u = std::get_if<UnloadFinished>(&a)) return "verdict " + u->verdict.message;
  if (auto* l = std::get_if<LeaseChanged>(&a))
    return fmt::format("lease {} {}", l->lease.id, to_string(l->lease.state));
  if (auto* s = std::get_if<SpawnService>(&a)) return "spawn " + s->service;
  if (auto* s = std::get_if<SignalService>(&a))
    return fmt::format("signal {} {}", s->service, s->signal);
  if (auto* h = std::get_if<CheckHealth>(&a)) return "health " + h->service;
  if (auto* r = std::get_if<RecordCrash>(&a)) return "crash " + r->service + " " + r->reason;
  if (auto* c = std::get_if<CommandFinished>(&a))
    return fmt::format("done {} {}", c->request_id, c->message);
  if (auto* l = std::get_if<Lifecycle>(&a)) return "lifecycle " + l->service;
  return "?";
}

// Ten minutes of a host: comfy loads 16 GiB then idles (its TTL unloads it), whisper is started
// and answers its health checks until it crashes once, a lease waits for room and then lets its
// heartbeat lapse. `wall_step(second)` gives the wall clock's offset from the monotonic one.
std::vector<std::string> run_host(const std::function<Duration(int)>& wall_step) {
  Arbiter arbiter(test_config());
  std::vector<std::string> out;
  MonoTime mono{Duration(5'000'000)};
  bool comfy_loaded = true;
  std::optional<int> whisper_pid;
  int next_pid = 100;
  auto feed = [&](const Event& e, int second) {
    Now now{mono,
            TimePoint(mono.time_since_epoch() + Duration(1'700'000'000'000) + wall_step(second))};
    for (const Action& a : arbiter.handle(e, now)) {
      out.push_back(fmt::format("{:4} {}", second, decision(a)));
      if (auto* c = std::get_if<CallUnload>(&a)) {
        comfy_loaded = false;
        arbiter.handle(
            UnloadCallDone{c->service, c->unload_id, {UnloadCall::Result::requested, "ok"}, 20ms},
            now);
      }
      if (std::holds_alternative<SpawnService>(a)) {
        whisper_pid = next_pid++;
        arbiter.handle(ChildStarted{"whisper", true, *whisper_pid, 7, "", false}, now);
      }
      if (std::holds_alternative<CheckHealth>(a))
        arbiter.handle(HealthChecked{"whisper", true, "ok"}, now);
    }
  };
  for (int second = 0; second < 600; ++second) {
    SampleTaken s;
    GpuSample g;
    g.index = 0;
    g.total = 24 * GiB;
    g.used = 400 * MiB;
    if (comfy_loaded) {
      g.processes.push_back({10, 16 * GiB, ""});
      g.used += 16 * GiB;
      ProcessInfo p;
      p.pid = 10;
      p.ppid = 1;
      p.comm = "python3";
      p.cmdline = "svc-comfy";
      s.host.processes.push_back(p);
    }
    s.gpus.gpus.push_back(g);
    s.gpus.backend = "test";
    feed(s, second);
    ServiceProbe probe;
    probe.reachable = true;
    probe.busy = false;
    feed(ProbeDone{"comfy", probe}, second);
    if (second == 2) feed(ServiceCommand{"whisper", Command::start, 1}, second);
    if (second == 5) {
      LeaseRequest r;
      r.vram = 12 * GiB;
      r.label = "flux";
      feed(LeaseRequested{arbiter.next_lease_id(), r}, second);
    }
    if (second == 300 && whisper_pid)
      feed(ChildExited{"whisper", *whisper_pid, 1, std::nullopt}, second);
    feed(Tick{}, second);
    mono += 1s;
  }
  return out;
}

TEST(ArbiterClock, SteppingTheWallClockTwoHoursEitherWayChangesNoDecision) {
  auto steady = run_host([](int) { return Duration(0); });
  // An NTP step forward at 30 s, then back by four hours at 200 s (2 h behind the first run).
  auto stepped = run_host([](int s) {
    return s < 30 ? Duration(0) : s < 200 ? Duration(2h) : -Duration(2h);
  });
  ASSERT_EQ(steady.size(), stepped.size());
  for (size_t i = 0; i < steady.size(); ++i) ASSERT_EQ(steady[i], stepped[i]) << "decision " << i;
  // The run decided things worth comparing: a TTL unload, a grant, an expiry, a crash, a restart.
  auto has = [&](const std::string& what) {
    for (const auto& line : steady)
      if (line.find(what) != std::string::npos) return true;
    return false;
  };
  EXPECT_TRUE(has("event unload.started"));
  EXPECT_TRUE(has("event lease.granted"));
  EXPECT_TRUE(has("event lease.expired"));
  EXPECT_TRUE(has("event service.crashed"));
  EXPECT_TRUE(has("event service.backoff"));
  EXPECT_TRUE(has("health whisper"));
}

TEST(ArbiterClock, EventsCarryTheWallTimeAndSnapshotsTheMonotonicOne) {
  Arbiter arbiter(test_config());
  MonoTime mono{Duration(5'000'000)};
  TimePoint wall{Duration(1'800'000'000'000)};
  auto actions = arbiter.handle(ServiceCommand{"whisper", Command::start, 1}, Now{mono, wall});
  auto actions2 = arbiter.handle(ChildStarted{"whisper", true, 42, 7, "", false}, Now{mono, wall});
  bool found = false;
  for (const auto& a : actions2)
    if (auto* e = std::get_if<EmitEvent>(&a); e && e->event.type == "service.started") {
      EXPECT_EQ(e->event.at, wall);
      found = true;
    }
  EXPECT_TRUE(found);
  ASSERT_TRUE(arbiter.service("whisper")->managed->started_at);
  EXPECT_EQ(*arbiter.service("whisper")->managed->started_at, mono);
  // Shown to people by the clocks' offset at the moment it is read.
  Now later{mono + 10s, wall + 2h};
  EXPECT_EQ(later.wall_of(mono), wall + 2h - 10s);
}

TEST(ArbiterDeadline, NothingIsDueUntilSomethingHasADeadline) {
  Arbiter arbiter(test_config());
  EXPECT_EQ(arbiter.next_deadline(), std::nullopt);
  MonoTime t{Duration(5'000'000)};
  arbiter.handle(ServiceCommand{"whisper", Command::start, 1}, t);
  arbiter.handle(ChildStarted{"whisper", true, 42, 7, "", false}, t);
  // Starting: the first health check 25 ms after the start.
  EXPECT_EQ(arbiter.next_deadline(), t + 25ms);
  arbiter.handle(Tick{}, t + 1s);  // asks for the check
  // While the check is in flight, the next deadline is the start timeout.
  EXPECT_EQ(arbiter.next_deadline(), t + 20s + 1ms);
  arbiter.handle(HealthChecked{"whisper", true, "ok"}, t + 1500ms);
  EXPECT_EQ(arbiter.next_deadline(), t + 1500ms + 5s);  // health_interval while running
  arbiter.handle(ServiceCommand{"whisper", Command::stop, 2}, t + 2s);
  EXPECT_EQ(arbiter.next_deadline(), t + 2s + 5s);  // SIGKILL after stop_timeout
  // A lease without a holder pid: its heartbeat runs out.
  LeaseRequest r;
  r.vram = 1 * GiB;
  arbiter.handle(LeaseRequested{arbiter.next_lease_id(), r}, t + 3s);
  EXPECT_EQ(arbiter.next_deadline(), t + 2s + 5s);  // still the sooner one
  arbiter.handle(ChildExited{"whisper", 42, 0, std::nullopt}, t + 4s);
  EXPECT_EQ(arbiter.next_deadline(), t + 3s + 30s + 1ms);
}

TEST(ArbiterIntents, AnIneffectiveUnloadOfAServiceVramdRunsRestartsItThroughSupervision) {
  Config c = test_config();
  c.services[1].kind = "comfyui";
  c.services[1].url = "http://127.0.0.1:8190";
  c.services[1].on_ineffective_unload = IneffectiveUnload::restart;
  Arbiter arbiter(c);
  MonoTime t{Duration(5'000'000)};
  arbiter.handle(ServiceCommand{"whisper", Command::start, 1}, t);
  arbiter.handle(ChildStarted{"whisper", true, 42, 7, "", false}, t);
  arbiter.handle(HealthChecked{"whisper", true, "ok"}, t + 1s);
  ServiceProbe probe;
  probe.reachable = true;
  probe.busy = false;
  arbiter.handle(ProbeDone{"whisper", probe}, t + 1s);
  auto sample = [&](MonoTime at) {
    SampleTaken s;
    GpuSample g;
    g.total = 24 * GiB;
    g.used = 8 * GiB + 400 * MiB;
    g.processes.push_back({42, 8 * GiB, ""});
    s.gpus.gpus.push_back(g);
    ProcessInfo p;
    p.pid = 42;
    p.comm = "whisper-server";
    s.host.processes.push_back(p);
    return arbiter.handle(s, at);
  };
  sample(t + 2s);
  arbiter.handle(UnloadRequested{"whisper", UnloadReason::manual, 9}, t + 2s);
  arbiter.handle(UnloadCallDone{"whisper", 1, {UnloadCall::Result::requested, "ok"}, 10ms}, t + 2s);
  std::vector<Action> after;
  for (int i = 1; i <= 40; ++i) {
    auto a = sample(t + 2s + i * 1s);
    auto b = arbiter.handle(Tick{}, t + 2s + i * 1s);
    after.insert(after.end(), a.begin(), a.end());
    after.insert(after.end(), b.begin(), b.end());
  }
  bool verdict = false, sigterm = false;
  for (const auto& a : after) {
    if (auto* u = std::get_if<UnloadFinished>(&a)) {
      verdict = true;
      EXPECT_EQ(u->verdict.outcome, UnloadOutcome::ineffective);
      EXPECT_EQ(u->verdict.escalation, Escalation::restart);
    }
    if (auto* s = std::get_if<SignalService>(&a))
      sigterm |= s->service == "whisper" && s->pid == 42;
  }
  EXPECT_TRUE(verdict);
  EXPECT_TRUE(sigterm) << "the restart went through supervision: SIGTERM to the child";
  EXPECT_EQ(arbiter.service("whisper")->managed->state, ManagedPhase::stopping);
}

}  // namespace
}  // namespace vramd

namespace vramd {
namespace {

// A GPU process listening on `port` with `bytes` on GPU 0 (and nothing else on the host).
SampleTaken one_server(int pid, int port, Bytes bytes) {
  SampleTaken s;
  GpuSample g;
  g.index = 0;
  g.total = 24 * GiB;
  g.used = 400 * MiB + bytes;
  g.processes.push_back({pid, bytes, ""});
  s.gpus.gpus.push_back(g);
  s.gpus.backend = "test";
  ProcessInfo p;
  p.pid = pid;
  p.ppid = 1;
  p.comm = "python3";
  p.cmdline = "python3 main.py";
  s.host.processes.push_back(p);
  s.host.listeners = {{port, pid}};
  return s;
}

ServiceConfig found_comfy(const std::string& name, int port) {
  ServiceConfig c;
  c.name = name;
  c.kind = "comfyui";
  c.url = fmt::format("http://127.0.0.1:{}", port);
  c.discovered_by = "GET /system_stats: system and devices";
  return c;
}

TEST(ArbiterDiscovery, ADiscoveredServiceIsNamedProbedAndLeftAlone) {
  Config c;
  c.gpu.baseline = 400 * MiB;
  Arbiter arbiter(c);
  Now now{MonoTime(Duration(5'000'000)), TimePoint(Duration(1'700'000'000'000))};
  auto at = [&](int s) {
    return Now{now.mono + std::chrono::seconds(s), now.wall + std::chrono::seconds(s)};
  };
  arbiter.handle(one_server(40, 8188, 16 * GiB), at(0));
  ASSERT_EQ(arbiter.status().gpus[0].holdings[0].owner.kind, OwnerKind::process);

  auto actions = arbiter.handle(ServiceDiscovered{found_comfy("comfyui", 8188)}, at(1));
  bool watch = false, event = false;
  for (const auto& a : actions) {
    if (auto* w = std::get_if<WatchService>(&a)) watch = w->service == "comfyui";
    if (auto* e = std::get_if<EmitEvent>(&a))
      event = e->event.type == "service.discovered" &&
              e->event.message.find("left alone") != std::string::npos;
  }
  EXPECT_TRUE(watch);
  EXPECT_TRUE(event);
  // Its port names its bytes from the next sample on.
  EXPECT_EQ(arbiter.scan_request().ports, std::vector<int>{8188});
  arbiter.handle(one_server(40, 8188, 16 * GiB), at(2));
  const Holding& h = arbiter.status().gpus[0].holdings[0];
  EXPECT_EQ(h.owner, (Owner{OwnerKind::service, "comfyui"}));
  ServiceProbe probe;
  probe.reachable = true;
  probe.busy = false;
  arbiter.handle(ProbeDone{"comfyui", probe}, at(3));
  const ServiceStatus* st = arbiter.service("comfyui");
  ASSERT_NE(st, nullptr);
  EXPECT_TRUE(st->discovered);
  EXPECT_EQ(st->bytes, 16 * GiB);
  EXPECT_FALSE(st->can_unload);
  EXPECT_EQ(st->control, Control::none);

  // Found again (same url, or a second pass): one service still.
  EXPECT_TRUE(arbiter.handle(ServiceDiscovered{found_comfy("comfyui-2", 8188)}, at(4)).empty());
  EXPECT_EQ(arbiter.services().size(), 1u);

  // An unload is refused; a lease that needs its room waits and names it.
  bool refused = false;
  for (const auto& a : arbiter.handle(UnloadRequested{"comfyui", UnloadReason::manual, 7, false}, at(5)))
    if (auto* f = std::get_if<UnloadFinished>(&a))
      refused = f->refused && f->verdict.message.find("discovered") != std::string::npos;
  EXPECT_TRUE(refused);
  LeaseRequest r;
  r.vram = 12 * GiB;
  r.gpu = 0;
  int unload_calls = 0;
  for (int s = 6; s < 100; ++s) {  // well past min_idle
    std::vector<Action> out = arbiter.handle(one_server(40, 8188, 16 * GiB), at(s));
    if (s == 6) out = arbiter.handle(LeaseRequested{arbiter.next_lease_id(), r}, at(s));
    for (const auto& a : out) unload_calls += std::holds_alternative<CallUnload>(a);
  }
  EXPECT_EQ(unload_calls, 0);
  ASSERT_EQ(arbiter.leases().size(), 1u);
  EXPECT_EQ(arbiter.leases()[0].state, LeaseState::queued);
  EXPECT_NE(arbiter.leases()[0].reason.text.find("comfyui holds 16.0 GiB, discovered, left alone"),
            std::string::npos)
      << arbiter.leases()[0].reason.text;
}

}  // namespace
}  // namespace vramd
