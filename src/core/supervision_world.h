// For the supervision tests only (supervision_test.cc, supervision_containers_test.cc,
// supervision_units_test.cc): the Arbiter on a virtual clock with the services it supervises,
// every action it answers recorded, and `Driven`, one service driven the way its backend (a
// process vramd runs, a container's engine, systemd) tells vramd what happened. The tests of
// what all three backends share run over Driven (supervision_test.cc, `EverySupervised`).
#pragma once

#include <algorithm>
#include <csignal>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/arbiter.h"

namespace vramd::supervision_world {

using namespace std::chrono_literals;

class World {
 public:
  explicit World(std::vector<ServiceConfig> services) {
    Config c;
    c.gpu.baseline = 0;
    c.services.assign(services.begin(), services.end());
    arbiter_ = std::make_unique<Arbiter>(c);
  }
  explicit World(ServiceConfig svc) : World(std::vector<ServiceConfig>{std::move(svc)}) {}

  std::vector<Action> feed(const Event& e) {
    auto actions = arbiter_->handle(e, now_);
    for (auto& a : actions) {
      if (auto* s = std::get_if<SpawnService>(&a)) spawns.push_back(s->service);
      if (auto* s = std::get_if<SignalService>(&a)) signals.push_back({s->service, s->signal});
      if (auto* s = std::get_if<Lifecycle>(&a)) asked.push_back(*s);
      if (auto* s = std::get_if<CheckHealth>(&a)) checks.push_back(s->service);
      if (auto* s = std::get_if<RecordCrash>(&a)) crashes.push_back(*s);
      if (auto* s = std::get_if<CommandFinished>(&a)) finished.push_back(*s);
      if (auto* s = std::get_if<EmitEvent>(&a)) events.push_back(s->event);
    }
    return actions;
  }
  // A sample where `pid` (if any) holds `bytes` on GPU 0; its cgroup names no unit or container.
  void sample(int pid = 0, Bytes bytes = 0) {
    SampleTaken s;
    GpuSample g;
    g.index = 0;
    g.total = 24 * GiB;
    if (pid) {
      g.processes.push_back(ProcessMemory{pid, bytes});
      g.used = bytes;
      ProcessInfo p;
      p.pid = pid;
      p.ppid = 1;
      p.comm = "python3";
      p.cmdline = "python main.py";
      s.host.processes.push_back(p);
    }
    s.gpus.gpus.push_back(g);
    feed(s);
  }
  void tick(Duration d) {
    for (Duration t{0}; t < d; t += 250ms) {
      now_ += 250ms;
      feed(Tick{});
    }
  }
  // Time moves to the Arbiter's next deadline (none: stays), and ticks.
  void tick_to_deadline() {
    if (auto d = deadline(); d && *d > now_) now_ = *d;
    feed(Tick{});
  }
  // Its supervision state as shown, or nullptr (an engine's service before the engine told).
  const ManagedState* m(const std::string& name = "comfy") const {
    const ServiceStatus* s = arbiter_->service(name);
    return s && s->managed ? &*s->managed : nullptr;
  }
  Bytes bytes(const std::string& name = "comfy") const { return arbiter_->service(name)->bytes; }
  std::optional<MonoTime> deadline() const { return arbiter_->next_deadline(); }
  MonoTime now() const { return now_; }

  size_t count(const std::string& type) const {
    return static_cast<size_t>(std::count_if(events.begin(), events.end(),
                                             [&](const EventRecord& e) { return e.type == type; }));
  }
  bool has(const std::string& type) const { return count(type) > 0; }
  // The first event of `type`, or nullptr.
  const EventRecord* event(const std::string& type) const {
    for (const auto& e : events)
      if (e.type == type) return &e;
    return nullptr;
  }

  std::vector<std::string> spawns, checks;
  std::vector<std::pair<std::string, int>> signals;
  std::vector<Lifecycle> asked;
  std::vector<RecordCrash> crashes;
  std::vector<CommandFinished> finished;
  std::vector<EventRecord> events;

 private:
  std::unique_ptr<Arbiter> arbiter_;
  MonoTime now_{Duration(1'800'000'000'000)};
};

// "comfy" run by `via` (managed: vramd runs `python3 main.py`; container `comfyui`; unit
// `comfyui.service`), with the same settings for all three: stop_timeout 7 s, 3 failed checks
// restart it, 2 restarts in restart_window at most; the other timings are the defaults.
inline ServiceConfig comfy_run_by(Control via) {
  ServiceConfig s;
  s.name = "comfy";
  s.kind = "comfyui";
  s.url = "http://127.0.0.1:8188";
  if (via == Control::managed) s.start = {"python3", "main.py"};
  if (via == Control::container) s.match.container = "comfyui";
  if (via == Control::unit) s.match.unit = "comfyui.service";
  s.stop_timeout = 7s;
  s.health_failures = 3;
  s.max_restarts = 2;
  return s;
}

// One service, "comfy", and what its backend would tell vramd: a child's start and exit for a
// process, the engine's answers and state for a container or a unit.
class Driven {
 public:
  explicit Driven(Control via) : via(via), w(comfy_run_by(via)) {
    if (via != Control::managed) w.feed(state(false));  // the engine's first word: it is down
  }

  // A client's start, stop or restart.
  void ask(Command c, uint64_t request) { w.feed(ServiceCommand{"comfy", c, request, false}); }
  // Starts vramd asked for so far: spawns, or starts and restarts asked of the engine.
  size_t starts_asked() const {
    if (via == Control::managed) return w.spawns.size();
    return static_cast<size_t>(std::count_if(w.asked.begin(), w.asked.end(), [](const auto& l) {
      return l.action == Command::start || l.action == Command::restart;
    }));
  }
  // The start vramd asked for is under way: the child's pid (a new one each time), or the
  // engine's "done" (and, for a unit, its MainPID).
  void start_confirmed() {
    ++pid;
    if (via == Control::managed) {
      w.feed(ChildStarted{"comfy", true, pid, 99, "", false});
      return;
    }
    Command last = w.asked.empty() ? Command::start : w.asked.back().action;
    w.feed(LifecycleDone{"comfy", last, true, "done"});
    if (via == Control::unit) w.feed(state(true));
  }
  // Asked to start, confirmed, and healthy at its first check.
  void bring_up(uint64_t request = 1) {
    ask(Command::start, request);
    start_confirmed();
    w.tick(1s);
    w.feed(HealthChecked{"comfy", true, "GET /system_stats → 200"});
  }
  // It ended on its own with status `code`.
  void exits(int code) {
    if (via == Control::managed) {
      w.feed(ChildExited{"comfy", pid, code, std::nullopt});
      return;
    }
    ContainerChanged e = state(false);
    e.died = true;
    e.exit_code = code;
    if (via == Control::unit) e.result = parse_unit_result(code == 0 ? "success" : "exit-code");
    w.feed(e);
  }
  // Its processes hold `bytes` on GPU 0 (0: none), as a sample shows: a process's child and a
  // unit's MainPID are named by their pid; a container by its cgroup, which this sample does not
  // give (its memory reads 0 here).
  void holds(Bytes bytes) {
    if (bytes == 0 || via == Control::container)
      w.sample();
    else
      w.sample(pid, bytes);
  }
  // The stop vramd asked for is done: the child ended by SIGTERM, or the engine's die and its
  // "done" (a unit's die is read as systemd says it: Result=success).
  void stop_confirmed() {
    if (via == Control::managed) {
      w.feed(ChildExited{"comfy", pid, std::nullopt, SIGTERM});
      return;
    }
    ContainerChanged e = state(false);
    e.died = true;
    if (via == Control::unit) {
      e.signal = SIGTERM;
      e.result = parse_unit_result("success");
    } else {
      e.exit_code = 143;
    }
    w.feed(e);
    w.feed(LifecycleDone{"comfy", Command::stop, true, "done"});
  }
  // The crash record names it by its backend: its pid, its container, its unit.
  void expect_named(const RecordCrash& r) const {
    switch (via) {
      case Control::managed:
        EXPECT_EQ(r.pid, pid);
        break;
      case Control::container:
        EXPECT_EQ(r.container, "comfyui");
        EXPECT_EQ(r.unit, "");
        break;
      default:
        EXPECT_EQ(r.unit, "comfyui.service");
        EXPECT_EQ(r.container, "");
        break;
    }
  }
  // "comfy (pid 501)", "comfy (container comfyui)", "comfy (unit comfyui.service)".
  std::string label() const {
    if (via == Control::managed) return "comfy (pid " + std::to_string(pid) + ")";
    return via == Control::container ? "comfy (container comfyui)" : "comfy (unit comfyui.service)";
  }
  const ManagedState& m() const { return *w.m(); }

  const Control via;
  World w;
  int pid = 500;

 private:
  // The engine's word: running or not (a unit's MainPID when it runs), no restart policy.
  ContainerChanged state(bool running) const {
    ContainerChanged e;
    e.service = "comfy";
    e.running = running;
    e.restart_policy = EngineRestart::no;
    if (via == Control::unit && running) e.main_pid = pid;
    return e;
  }
};

inline std::string backend_name(const testing::TestParamInfo<Control>& info) {
  return info.param == Control::managed ? "process" : to_string(info.param);
}

}  // namespace vramd::supervision_world
