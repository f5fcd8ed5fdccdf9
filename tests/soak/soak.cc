// The soak (issue 14, item 5; tests/soak/README.md): simulated days of a GPU host on a virtual
// clock, through the very Arbiter the daemon runs, with a simulated shell that does what the
// daemon's backends do and misbehaves the ways real ones do: services that go unreachable,
// unloads that fail, free nothing or free half, a managed service that crashes, fails its health
// checks, fails to start and ignores SIGTERM, GPU reads that fail, lease holders that vanish or
// stop their heartbeats. Checked every simulated minute: the core's memory stays bounded
// (history frames and series, leases kept), no service stays in a transitional state past its
// timeout, no queued lease waits without a reason. Prints one line per simulated day; exit 1 on
// the first violations (listed), 0 when none.
//
//   vramd_soak [--days N] [--seed S]       (ctest soak_short: --days 1)
#include <sys/resource.h>

#include <csignal>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/arbiter.h"
#include "core/service_kinds.h"

namespace vramd {
namespace {

using namespace std::chrono_literals;

constexpr Bytes kTotal = 24 * GiB;
constexpr Bytes kBaseline = 400 * MiB;

Config soak_config() {
  Config c;
  c.gpu.baseline = kBaseline;
  c.daemon.lease_heartbeat = 30s;
  c.daemon.sample_interval = 1s;
  auto svc = [](std::string name, std::string kind, Bytes) {
    ServiceConfig s;
    s.name = name;
    s.kind = std::move(kind);
    s.url = "http://127.0.0.1:1";
    s.match.cmdline = "svc-" + name;
    s.unload_after_idle = 10min;
    s.min_idle = 30s;
    return s;
  };
  ServiceConfig comfy = svc("comfy", "comfyui", 0);
  ServiceConfig ollama = svc("ollama", "ollama", 0);
  ServiceConfig whisper = svc("whisper", "process", 0);
  whisper.start = {"whisper-server"};
  whisper.health_interval = 5s;
  whisper.start_timeout = 20s;
  whisper.stop_timeout = 5s;
  whisper.max_restarts = 5;
  whisper.restart_window = 10min;
  c.services = {comfy, ollama, whisper};
  return c;
}

// One simulated server process holding memory.
struct FakeProc {
  int pid = 0;
  std::string cmdline;
  Bytes bytes = 0;
  bool ignores_term = false;
};

class Soak {
 public:
  explicit Soak(uint64_t seed) : arbiter_(soak_config()), rng_(seed) {}

  int run(int days) {
    // The loaded services, and their work from time to time.
    procs_[comfy_pid_] = {comfy_pid_, "svc-comfy", 16 * GiB};
    procs_[ollama_pid_] = {ollama_pid_, "svc-ollama", 5 * GiB};
    at(now_, [this] { feed(ServiceCommand{"whisper", Command::start, next_request_++}); });
    schedule_sample(now_);
    for (const auto& s : arbiter_.config().services)
      if (s.kind != "process") schedule_probe(s.name, now_);
    schedule_leases(now_);
    schedule_misbehaviour(now_);
    const MonoTime end = start_ + std::chrono::hours(24) * days;
    MonoTime next_check = start_ + 1min;
    int day = 0;
    while (!agenda_.empty() && agenda_.begin()->first < end) {
      auto it = agenda_.begin();
      now_ = it->first;
      auto fn = std::move(it->second);
      agenda_.erase(it);
      fn();
      if (auto due = arbiter_.next_deadline(); due && *due <= now_) feed(Tick{});
      if (now_ >= next_check) {
        check();
        next_check += 1min;
      }
      if (now_ >= start_ + std::chrono::hours(24) * (day + 1)) report(++day);
      if (violations_.size() >= 20) break;
    }
    if (day < days) report(days);
    for (const auto& v : violations_) std::fprintf(stderr, "VIOLATION %s\n", v.c_str());
    return violations_.empty() ? 0 : 1;
  }

 private:
  using Fn = std::function<void()>;
  void at(MonoTime t, Fn fn) { agenda_.emplace(t, std::move(fn)); }
  bool chance(double p) { return std::uniform_real_distribution<double>(0, 1)(rng_) < p; }
  Duration between(Duration lo, Duration hi) {
    return Duration(std::uniform_int_distribution<int64_t>(lo.count(), hi.count())(rng_));
  }
  Now clock() const {
    return Now{now_, TimePoint(now_.time_since_epoch() + Duration(1'700'000'000'000))};
  }

  void feed(const Event& e) {
    ++handled_;
    for (Action& a : arbiter_.handle(e, clock())) act(a);
  }

  // What the daemon's backends would do with each action, misbehaving now and then.
  void act(const Action& a) {
    if (auto* e = std::get_if<EmitEvent>(&a)) {
      ++events_[e->event.type];
      ++events_today_;
      recent_.push_back(fmt::format("{} {} {}: {}", format_duration(now_ - start_), e->event.type,
                                    e->event.subject, e->event.message));
      if (recent_.size() > 40) recent_.erase(recent_.begin());
    } else if (auto* c = std::get_if<CallUnload>(&a)) {
      call_unload(*c);
    } else if (auto* f = std::get_if<SetFastSampling>(&a)) {
      fast_ = f->on;
    } else if (auto* l = std::get_if<LeaseChanged>(&a)) {
      lease_changed(l->lease);
    } else if (std::get_if<SpawnService>(&a)) {
      spawn_whisper();
    } else if (auto* s = std::get_if<SignalService>(&a)) {
      signal(s->pid, s->signal);
    } else if (auto* h = std::get_if<CheckHealth>(&a)) {
      std::string name = h->service;
      at(now_ + between(10ms, 300ms), [this, name] {
        bool up = whisper_pid_ && now_ - whisper_started_ > 3s && !chance(0.02);
        feed(HealthChecked{name, up, up ? "GET /health → 200" : "connect: Connection refused"});
      });
    } else if (auto* lc = std::get_if<Lifecycle>(&a)) {
      LifecycleDone done{lc->service, lc->action, !chance(0.3), "simulated"};
      at(now_ + 1s, [this, done] { feed(done); });
    } else if (std::get_if<UnloadFinished>(&a) || std::get_if<CommandFinished>(&a) ||
               std::get_if<RecordCrash>(&a)) {
      ++replies_;
    }
  }

  void call_unload(const CallUnload& c) {
    std::string name = c.service;
    uint64_t id = c.unload_id;
    int pid = name == "comfy" ? comfy_pid_ : name == "ollama" ? ollama_pid_ : 0;
    // The server's answer: refused now and then (ollama's more often), slow sometimes.
    bool refused = chance(name == "ollama" ? 0.2 : 0.05);
    Duration took = chance(0.1) ? between(5s, 15s) : between(20ms, 500ms);
    at(now_ + took, [this, name, id, refused, pid, took] {
      UnloadCall call{refused ? UnloadCall::Result::failed : UnloadCall::Result::requested,
                      refused ? "POST → 500" : "POST → 200"};
      feed(UnloadCallDone{name, id, call, took});
      if (refused || !procs_.count(pid)) return;
      // What the memory does: freed, half freed, or not at all (an ineffective unload).
      double r = std::uniform_real_distribution<double>(0, 1)(rng_);
      Bytes keep = r < 0.15 ? procs_[pid].bytes : r < 0.3 ? procs_[pid].bytes / 2 : 300 * MiB;
      at(now_ + between(200ms, 4s), [this, pid, keep] {
        if (procs_.count(pid)) procs_[pid].bytes = keep;
      });
    });
  }

  void spawn_whisper() {
    at(now_ + between(10ms, 200ms), [this] {
      if (chance(0.05)) {
        feed(ChildStarted{"whisper", false, 0, 0, "port 9000 is taken by python3[77]", false});
        // Someone starts it again later (as a person would after reading the event).
        at(now_ + 10min, [this] {
          feed(ServiceCommand{"whisper", Command::start, next_request_++});
        });
        return;
      }
      int pid = next_pid_++;
      whisper_pid_ = pid;
      whisper_started_ = now_;
      procs_[pid] = {pid, "svc-whisper", 0, chance(0.2)};
      feed(ChildStarted{"whisper", true, pid, 7, "", false});
      at(now_ + 3s, [this, pid] {
        if (procs_.count(pid)) procs_[pid].bytes = 3 * GiB;
      });
    });
  }

  void signal(int pid, int sig) {
    if (!procs_.count(pid)) return;
    if (sig == SIGTERM && procs_[pid].ignores_term) return;
    at(now_ + between(100ms, 2s), [this, pid, sig] { exit_child(pid, std::nullopt, sig); });
  }

  void exit_child(int pid, std::optional<int> code, std::optional<int> sig) {
    if (!procs_.count(pid) || pid != whisper_pid_) return;
    procs_.erase(pid);
    whisper_pid_ = 0;
    feed(ChildExited{"whisper", pid, code, sig});
  }

  void lease_changed(const Lease& l) {
    if (is_active(l.state)) {
      stored_[l.id] = l;
      if (l.state == LeaseState::granted && l.request.pid && !holder_bytes_.count(*l.request.pid)) {
        int pid = *l.request.pid;
        Bytes use = l.request.vram * 9 / 10;
        holder_bytes_[pid] = 0;
        at(now_ + 2s, [this, pid, use] {
          if (holder_bytes_.count(pid)) holder_bytes_[pid] = use;
        });
      }
    } else {
      stored_.erase(l.id);
      if (l.request.pid) holder_bytes_.erase(*l.request.pid);
      ++ended_[to_string(l.state)];
    }
  }

  void schedule_sample(MonoTime t) {
    at(t, [this] {
      SampleTaken s;
      s.gpus.backend = "soak";
      if (gpu_error_until_ > now_) {
        s.gpus.error = "nvmlDeviceGetCount: Unknown Error";
      } else {
        GpuSample g;
        g.index = 0;
        g.uuid = "GPU-soak";
        g.name = "NVIDIA GeForce RTX 3090";
        g.total = kTotal;
        g.used = kBaseline;
        for (const auto& [pid, p] : procs_) {
          if (p.bytes == 0) continue;
          g.processes.push_back({pid, p.bytes, ""});
          g.used += p.bytes;
        }
        for (const auto& [pid, bytes] : holder_bytes_) {
          if (bytes == 0) continue;
          g.processes.push_back({pid, bytes, ""});
          g.used += bytes;
        }
        g.used = std::min(g.used, kTotal);
        s.gpus.gpus.push_back(g);
      }
      for (const auto& [pid, p] : procs_) {
        ProcessInfo info;
        info.pid = pid;
        info.ppid = 1;
        info.comm = "python3";
        info.cmdline = p.cmdline;
        info.start_ticks = 7;
        s.host.processes.push_back(info);
      }
      for (const auto& [pid, bytes] : holder_bytes_) {
        ProcessInfo info;
        info.pid = pid;
        info.ppid = 1;
        info.comm = "job";
        info.cmdline = "job";
        info.start_ticks = 9;
        s.host.processes.push_back(info);
      }
      s.host.mem_available = 32 * GiB;
      s.host.mem_total = 64 * GiB;
      feed(s);
      schedule_sample(now_ + (fast_ ? Duration(250ms) : Duration(1s)));
    });
  }

  void schedule_probe(const std::string& name, MonoTime t) {
    at(t, [this, name] {
      ServiceProbe p;
      int pid = name == "comfy" ? comfy_pid_ : ollama_pid_;
      p.reachable = unreachable_until_[name] <= now_;
      if (!p.reachable) p.error = "connect: Connection refused";
      if (p.reachable) {
        p.busy = busy_until_[name] > now_;
        if (procs_.count(pid) && procs_[pid].bytes > 1 * GiB) p.models = {"model"};
      }
      feed(ProbeDone{name, p});
      schedule_probe(name, now_ + 2s);
    });
  }

  // Work comes to the services (it loads them again), and clients ask for leases.
  void schedule_leases(MonoTime t) {
    at(t, [this] {
      for (std::string name : {"comfy", "ollama"}) {
        if (!chance(0.15)) continue;
        int pid = name == "comfy" ? comfy_pid_ : ollama_pid_;
        busy_until_[name] = now_ + between(10s, 3min);
        if (procs_.count(pid)) procs_[pid].bytes = name == "comfy" ? 16 * GiB : 5 * GiB;
      }
      if (chance(0.5)) request_lease();
      schedule_leases(now_ + between(30s, 4min));
    });
  }

  void request_lease() {
    LeaseRequest r;
    r.vram = between(Duration(1), Duration(10)).count() * GiB;
    r.label = fmt::format("job{}", std::uniform_int_distribution<int>(0, 20)(rng_));
    r.holder = "soak";
    r.priority = chance(0.2) ? 1 : 0;
    if (chance(0.2)) r.wait_timeout = 5min;
    bool heartbeat = chance(0.15);  // no pid: it lives by its heartbeats
    int pid = 0;
    if (!heartbeat) {
      pid = next_pid_++;
      r.pid = pid;
      r.pid_start_ticks = 9;
    }
    uint64_t id = arbiter_.next_lease_id();
    feed(LeaseRequested{id, r});
    ++requested_;
    Duration life = between(1min, 40min);
    bool vanishes = chance(0.1);
    if (heartbeat) {
      // Heartbeats every 10 s for a while, then they stop (the client died): it must expire.
      for (Duration d = 10s; d < life; d += 10s)
        at(now_ + d, [this, id] { feed(LeaseHeartbeat{id}); });
      return;
    }
    at(now_ + life, [this, id, vanishes] {
      const Lease* l = arbiter_.lease(id);
      if (!l || !is_active(l->state)) return;
      if (vanishes)
        feed(HolderExited{id});
      else
        feed(LeaseReleased{id, 0});
    });
  }

  void schedule_misbehaviour(MonoTime t) {
    at(t, [this] {
      if (chance(0.02)) gpu_error_until_ = now_ + between(2s, 30s);
      if (chance(0.03)) unreachable_until_["comfy"] = now_ + between(10s, 10min);
      if (chance(0.03)) unreachable_until_["ollama"] = now_ + between(10s, 10min);
      // The managed service crashes now and then.
      if (whisper_pid_ && chance(0.02)) exit_child(whisper_pid_, 1, std::nullopt);
      // And a person asks for a restart now and then.
      if (chance(0.01)) feed(ServiceCommand{"whisper", Command::restart, next_request_++});
      if (chance(0.01))
        feed(UnloadRequested{"comfy", UnloadReason::manual, next_request_++, false});
      schedule_misbehaviour(now_ + 1min);
    });
  }

  // ---- the checks ----

  void violation(std::string what) {
    violations_.push_back(fmt::format("at {}: {}", format_duration(now_ - start_), what));
    if (violations_.size() == 1)  // what led to the first one
      for (const auto& line : recent_) std::fprintf(stderr, "  event %s\n", line.c_str());
  }

  void check() {
    for (const auto& s : arbiter_.services()) {
      auto phase = s.state == ServiceState::unloading ? std::string("unloading") : std::string();
      Duration limit = unload_timeout(s.name) + 2min;
      if (s.managed && (s.managed->state == ManagedPhase::starting ||
                        s.managed->state == ManagedPhase::stopping)) {
        phase = to_string(s.managed->state);
        limit = (s.managed->state == ManagedPhase::starting ? 20s : 5s) + 2min;
      }
      auto& [was, since] = transitional_[s.name];
      if (phase != was) {
        was = phase;
        since = now_;
      } else if (!phase.empty() && now_ - since > limit) {
        violation(fmt::format("{} {} for {} (limit {})", s.name, phase,
                              format_duration(now_ - since), format_duration(limit)));
        since = now_;  // once per stretch
      }
    }
    size_t active = 0;
    for (const auto& l : arbiter_.leases()) {
      if (is_active(l.state)) ++active;
      // A lease far down the queue is not looked at on every pass: its reason is the head it
      // waits behind (what /v1/leases shows, server/json_view.cc).
      bool behind_a_head = false;
      for (const auto& [gpu, head] : arbiter_.queue_heads())
        behind_a_head |= head != l.id && gpu == l.request.gpu.value_or(0);
      if (l.state == LeaseState::queued && !behind_a_head &&
          (l.reason.text.empty() || !l.reason.considered))
        violation(
            fmt::format("lease #{} queued without a reason (text '{}', considered {}, gpu {})",
                        l.id, l.reason.text, l.reason.considered,
                        l.request.gpu ? std::to_string(*l.request.gpu) : "any"));
      if (l.state == LeaseState::queued && stored_.count(l.id) == 0)
        violation(fmt::format("lease #{} queued but its LeaseChanged never came", l.id));
    }
    // Ended leases kept: a bounded number (256) beyond the active ones.
    size_t kept = arbiter_.leases().size();
    if (kept > active + 256 + 8)
      violation(fmt::format("{} leases kept for {} active", kept, active));
    max_leases_kept_ = std::max(max_leases_kept_, kept);
    // History: an hour of fine frames (4 a second at most, while verifying) and a day of
    // one-minute frames; series only for owners seen within that day.
    HistoryView h = arbiter_.history(0, now_, std::chrono::hours(24 * 400), SIZE_MAX);
    max_frames_ = std::max(max_frames_, h.times.size());
    max_series_ = std::max(max_series_, h.series.size());
    if (h.times.size() > 4 * 3600 + 1440 + 16)
      violation(fmt::format("history holds {} frames", h.times.size()));
  }

  Duration unload_timeout(const std::string& service) const {
    const ServiceConfig* cfg = arbiter_.config().find_service(service);
    if (cfg && cfg->unload_timeout) return *cfg->unload_timeout;
    const ServiceKind* k = cfg ? find_service_kind(cfg->kind) : nullptr;
    return k ? k->unload_timeout : Duration(60s);
  }

  void report(int day) {
    rusage ru{};
    getrusage(RUSAGE_SELF, &ru);
    std::string ends;
    for (const auto& [state, n] : ended_) ends += fmt::format(" {}={}", state, n);
    std::printf(
        "day %d: %llu events handled, %llu emitted today, leases requested %llu, ended:%s; "
        "kept now %zu (max %zu); history frames max %zu, series max %zu; unloads freed %d "
        "partial %d ineffective %d failed %d; crashes %d; max RSS %ld KiB\n",
        day, static_cast<unsigned long long>(handled_),
        static_cast<unsigned long long>(events_today_), static_cast<unsigned long long>(requested_),
        ends.c_str(), arbiter_.leases().size(), max_leases_kept_, max_frames_, max_series_,
        events_["unload.freed"], events_["unload.partial"], events_["unload.ineffective"],
        events_["unload.failed"], events_["service.crashed"], ru.ru_maxrss);
    std::fflush(stdout);
    events_today_ = 0;
  }

  Arbiter arbiter_;
  std::mt19937_64 rng_;
  const MonoTime start_{Duration(5'000'000)};
  MonoTime now_ = start_;
  std::multimap<MonoTime, Fn> agenda_;
  std::map<int, FakeProc> procs_;
  std::map<int, Bytes> holder_bytes_;  // granted lease holders' processes
  std::map<uint64_t, Lease> stored_;   // what the lease store would hold
  std::map<std::string, MonoTime> unreachable_until_, busy_until_;
  std::map<std::string, std::pair<std::string, MonoTime>> transitional_;
  std::map<std::string, int> events_, ended_;
  std::vector<std::string> violations_;
  std::vector<std::string> recent_;  // the last events, shown with the first violation
  MonoTime gpu_error_until_{};
  MonoTime whisper_started_{};
  const int comfy_pid_ = 10, ollama_pid_ = 11;
  int whisper_pid_ = 0;
  int next_pid_ = 1000;
  uint64_t next_request_ = 1;
  uint64_t handled_ = 0, events_today_ = 0, requested_ = 0, replies_ = 0;
  size_t max_leases_kept_ = 0, max_frames_ = 0, max_series_ = 0;
  bool fast_ = false;
};

}  // namespace
}  // namespace vramd

int main(int argc, char** argv) {
  int days = 7;
  uint64_t seed = 14;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "vramd_soak: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--days")
      days = std::atoi(value());
    else if (a == "--seed")
      seed = std::strtoull(value(), nullptr, 10);
    else {
      std::fprintf(stderr, "usage: vramd_soak [--days N] [--seed S]\n");
      return 2;
    }
  }
  if (days < 1) {
    std::fprintf(stderr, "vramd_soak: --days: expected a whole number of days, at least 1\n");
    return 2;
  }
  return vramd::Soak(seed).run(days);
}
