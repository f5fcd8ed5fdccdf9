// Admission with many queued leases: the CPU time of one Arbiter::handle() while 10,000 leases
// wait and 64 services hold the GPUs. Target (the leases issue): < 1 ms per event.
//
// The world: G GPUs of 80 GiB (G = 8 or 1) and 64 services (kinds comfyui/ollama/vllm/llamacpp)
// spread round-robin over them, each a process "svc-NN" matched by its cmdline regex, together
// holding 72 GiB of every GPU. Per GPU, by service number mod 8: four idle for 10 min (eviction
// candidates, min_idle 30 s), two busy, one pinned, one idle 5 min under a min_idle of 1 h. One
// granted lease per GPU (2 GiB, priority 100, holder not allocated yet) leaves 6 GiB free. Then
// N queued leases (N = 10,000 or 100) of 12-40 GiB, so none fits (not even with a
// released 2 GiB) but evicting idle services (36 GiB per GPU) could make room for any of them: 70% priority 0, 20% 1-5, 10%
// 10; 80% for one GPU, 20% for any GPU; 90% with a holder pid, 10% kept by heartbeats. They are
// requested before the first sample (admission waits for a sample), so setup is one admission
// pass. The first passes start evictions (CallUnload) for the heads whose shortfall the idle
// services can cover; the bench never answers them, so those services stay "unloading" (no
// verification runs until the call returns, so nothing times out) and the world is the same at
// every iteration. The virtual clock moves 1 ms per event; every 10,000 events the leases without
// a pid get their heartbeat (untimed), so none expires (lease_heartbeat 30 s).
//
// Variant idle_gpu:1 (8 GPUs only): no `any` leases and no lease for GPU 7, so admission never
// finds a head for every GPU and walks the whole queue (the worst case of Arbiter::admit's early
// exit). Cases per event: SampleTaken (the 1 s sample), Tick (every 250 ms), ProbeDone (an idle
// service, same answer), LeaseRequested that queues (priority 0, last; cancelled untimed),
// LeaseRequested granted at once (priority 100, fits; released untimed), LeaseReleased of a
// granted lease (frees its 2 GiB promise, admits nothing: the heads need more; re-requested
// untimed) and of a queued one (cancel). bench/run.sh prints the ratios; bench/RESULTS.md keeps
// them.
//
// The wake (issue 26 item 7), in the same worlds with one more service, "sleeper" (vllm, empty:
// 200 MiB of CUDA context on GPU 0; vram_estimate 20 GiB): WakeRequested for its model, whose room is claimed through admission and
// queues last (the held request's whole decision in the core; cancelled untimed, WakeCancelled).
// Before the wake moved into the core, the proxy planned in the shell and asked for the room as a
// lease (an HTTP POST /v1/leases: LeaseRequested), so BM_LeaseRequestQueues is the core's part of
// the old path, measured beside it in the same run.
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include "core/arbiter.h"
#include "core/config.h"

namespace vramd {
namespace {

using namespace std::chrono_literals;

constexpr int kServices = 64;
constexpr Bytes kGpuTotal = 80 * GiB;
constexpr Bytes kServicesPerGpu = 72 * GiB;  // what the services hold on each GPU together
constexpr Bytes kGrantedVram = 2 * GiB;
constexpr int kServicePid = 10000;  // svc-NN is pid kServicePid + NN
constexpr int kHolderPid = 50000;   // lease holders (not on the GPU yet)
constexpr Duration kStep = 1ms;     // virtual time per event
constexpr int kHeartbeatEvery = 10000;  // events (10 s virtual) between heartbeats, untimed

class LeaseWorld {
 public:
  LeaseWorld(unsigned gpus, int queued, bool idle_gpu, bool sleeper = false) : gpus_(gpus) {
    Config c;
    c.gpu.baseline = 0;
    const char* kinds[] = {"comfyui", "ollama", "vllm", "llamacpp"};
    for (int s = 0; s < kServices; ++s) {
      ServiceConfig svc;
      svc.name = fmt::format("svc-{:02}", s);
      svc.kind = kinds[s % 4];
      svc.url = fmt::format("http://127.0.0.1:{}", 9000 + s);
      svc.match.cmdline = fmt::format("^svc-{:02}$", s);
      svc.min_idle = 30s;
      if (role(s) == Role::pinned) svc.pinned = true;
      if (role(s) == Role::recent) svc.min_idle = 1h;
      c.services.push_back(std::move(svc));
    }
    if (sleeper) {
      ServiceConfig svc;
      svc.name = "sleeper";
      svc.kind = "vllm";
      svc.url = "http://127.0.0.1:8999";
      svc.match.cmdline = "^sleeper$";
      svc.vram_estimate = 20 * GiB;
      c.services.push_back(std::move(svc));
    }
    arbiter_ = std::make_unique<Arbiter>(c);

    // The sample: every service's process on its GPU.
    const int per_gpu = kServices / static_cast<int>(gpus);
    for (unsigned i = 0; i < gpus; ++i) {
      GpuSample g;
      g.index = i;
      g.name = "NVIDIA H100 80GB HBM3";
      g.total = kGpuTotal;
      g.utilization_pct = 40;
      sample_.gpus.gpus.push_back(g);
    }
    for (int s = 0; s < kServices; ++s) {
      auto& g = sample_.gpus.gpus[gpu_of(s)];
      Bytes bytes = kServicesPerGpu / per_gpu;
      g.processes.push_back({kServicePid + s, bytes, ""});
      g.used += bytes;
      ProcessInfo p;
      p.pid = kServicePid + s;
      p.ppid = 1;
      p.comm = "python3";
      p.cmdline = fmt::format("svc-{:02}", s);
      p.rss = 4 * GiB;
      sample_.host.processes.push_back(std::move(p));
    }
    if (sleeper) {  // its CUDA context on GPU 0: empty (< 256 MiB), last seen there
      auto& g = sample_.gpus.gpus[0];
      g.processes.push_back({kServicePid + 999, 200 * MiB, ""});
      g.used += 200 * MiB;
      ProcessInfo p;
      p.pid = kServicePid + 999;
      p.ppid = 1;
      p.comm = "python3";
      p.cmdline = "sleeper";
      p.rss = 2 * GiB;
      sample_.host.processes.push_back(std::move(p));
    }
    sample_.host.mem_available = 1024 * GiB;
    sample_.gpus.backend = "bench";

    // Probes: everyone answers at t0; the busy ones are busy now, the recent ones were at t0 + 5 min.
    MonoTime t0 = now_;
    for (int s = 0; s < kServices; ++s) feed(ProbeDone{service(s), probe(false)}, t0);
    if (sleeper) feed(ProbeDone{"sleeper", probe(false)}, t0);
    for (int s = 0; s < kServices; ++s)
      if (role(s) == Role::recent) {
        feed(ProbeDone{service(s), probe(true)}, t0 + 5min);
        feed(ProbeDone{service(s), probe(false)}, t0 + 5min);
      }
    now_ = t0 + 10min;
    for (int s = 0; s < kServices; ++s)
      if (role(s) == Role::busy) feed(ProbeDone{service(s), probe(true)}, now_);

    // Leases, before the first sample: they queue without an admission pass each.
    std::mt19937 rng(42);
    for (unsigned i = 0; i < gpus; ++i) granted_.push_back(request(granted_request(i)));
    for (int n = 0; n < queued; ++n) {
      LeaseRequest r;
      int p = static_cast<int>(rng() % 100);
      r.priority = p < 70 ? 0 : p < 90 ? 1 + static_cast<int>(rng() % 5) : 10;
      if (idle_gpu) r.gpu = static_cast<unsigned>(rng() % (gpus - 1));
      else if (rng() % 100 < 20) r.gpu = std::nullopt;
      else r.gpu = static_cast<unsigned>(rng() % gpus);
      r.vram = (12 + 4 * static_cast<Bytes>(rng() % 8)) * GiB;  // 12..40 GiB
      r.label = fmt::format("job{}", n % 50);
      r.holder = "vramd run";
      uint64_t id;
      if (rng() % 10) {
        r.pid = kHolderPid + n;
        r.pid_start_ticks = 1000 + n;
        id = request(std::move(r));
      } else {
        id = request(std::move(r));
        heartbeat_.push_back(id);
      }
    }
    // Two samples and a tick: the granted leases are granted, evictions started, reasons set.
    feed(sample_, now_);
    feed(sample_, now_ += 1s);
    feed(Tick{}, now_ += 250ms);
  }

  std::vector<Action> feed(const Event& e) { return arbiter_->handle(e, now_ += kStep); }
  // Call once per iteration, after the timed part: heartbeats now and then, untimed.
  void maintain(benchmark::State& state) {
    if (++events_ % kHeartbeatEvery) return;
    state.PauseTiming();
    for (uint64_t id : heartbeat_) arbiter_->handle(LeaseHeartbeat{id}, now_);
    state.ResumeTiming();
  }
  uint64_t request(LeaseRequest r) {
    uint64_t id = next_id_++;
    feed(LeaseRequested{id, std::move(r)});
    return id;
  }
  LeaseRequest granted_request(unsigned gpu) const {
    LeaseRequest r;
    r.gpu = gpu;
    r.vram = kGrantedVram;
    r.priority = 100;
    r.label = "granted";
    r.holder = "vramd run";
    r.pid = kHolderPid - 1 - static_cast<int>(gpu);
    return r;
  }
  // A lease that queues last: priority 0, on a GPU that has a queue.
  LeaseRequest queued_request() {
    LeaseRequest r;
    r.gpu = 0;
    r.vram = 48 * GiB;
    r.label = "late";
    r.holder = "vramd run";
    r.pid = kHolderPid - 100;
    return r;
  }

  Arbiter& arbiter() { return *arbiter_; }
  const SampleTaken& sample() const { return sample_; }
  std::vector<uint64_t>& granted() { return granted_; }
  uint64_t next_id() const { return next_id_; }
  void set_next_id(uint64_t id) { next_id_ = id; }
  size_t count(LeaseState s) const {
    size_t n = 0;
    for (const auto& l : arbiter_->leases()) n += l.state == s;
    return n;
  }
  size_t unloading() const {
    size_t n = 0;
    for (const auto& st : arbiter_->services()) n += st.state == ServiceState::unloading;
    return n;
  }
  static std::string service(int s) { return fmt::format("svc-{:02}", s); }
  // An idle service (an eviction candidate) on GPU 0.
  std::string idle_service() const { return service(3 * static_cast<int>(gpus_)); }

 private:
  enum class Role { idle, busy, pinned, recent };
  // By the service's place among those on its GPU (services go round-robin over the GPUs).
  Role role(int s) const {
    switch ((s / static_cast<int>(gpus_)) % 8) {
      case 4:
      case 5: return Role::busy;
      case 6: return Role::pinned;
      case 7: return Role::recent;
      default: return Role::idle;
    }
  }
  unsigned gpu_of(int s) const { return static_cast<unsigned>(s) % gpus_; }
  static ServiceProbe probe(bool busy) {
    ServiceProbe p;
    p.reachable = true;
    p.busy = busy;
    p.models = {"model"};
    return p;
  }
  void feed(const Event& e, MonoTime at) { arbiter_->handle(e, at); }

  unsigned gpus_;
  std::unique_ptr<Arbiter> arbiter_;
  SampleTaken sample_;
  MonoTime now_{Duration(1'800'000'000'000)};
  uint64_t next_id_ = 1;
  std::vector<uint64_t> granted_;
  std::vector<uint64_t> heartbeat_;  // queued leases without a holder pid
  uint64_t events_ = 0;
};

// The world must be as described after the loop too, or the bench measured another state.
void check_and_count(benchmark::State& state, LeaseWorld& w, size_t queued, size_t actions) {
  size_t q = w.count(LeaseState::queued), g = w.count(LeaseState::granted);
  if (q != queued || g != w.granted().size())
    state.SkipWithError(fmt::format("world changed: {} queued (want {}), {} granted (want {})", q,
                                    queued, g, w.granted().size())
                            .c_str());
  state.counters["queued"] = static_cast<double>(q);
  state.counters["unloading"] = static_cast<double>(w.unloading());
  state.counters["actions"] = static_cast<double>(actions);
}

LeaseWorld make_world(const benchmark::State& state) {
  return LeaseWorld(static_cast<unsigned>(state.range(0)), static_cast<int>(state.range(1)),
                    state.range(2) != 0);
}

void BM_LeaseSample(benchmark::State& state) {
  LeaseWorld w = make_world(state);
  size_t n = 0;
  for (auto _ : state) {
    auto actions = w.feed(w.sample());
    n = actions.size();
    benchmark::DoNotOptimize(actions);
    w.maintain(state);
  }
  check_and_count(state, w, state.range(1), n);
}

void BM_LeaseTick(benchmark::State& state) {
  LeaseWorld w = make_world(state);
  size_t n = 0;
  for (auto _ : state) {
    auto actions = w.feed(Tick{});
    n = actions.size();
    benchmark::DoNotOptimize(actions);
    w.maintain(state);
  }
  check_and_count(state, w, state.range(1), n);
}

void BM_LeaseProbe(benchmark::State& state) {
  LeaseWorld w = make_world(state);
  ServiceProbe p;
  p.reachable = true;
  p.busy = false;
  p.models = {"model"};
  ProbeDone probe{w.idle_service(), p};
  size_t n = 0;
  for (auto _ : state) {
    auto actions = w.feed(probe);
    n = actions.size();
    benchmark::DoNotOptimize(actions);
    w.maintain(state);
  }
  check_and_count(state, w, state.range(1), n);
}

// A request that queues (last in line); cancelled outside the timing.
void BM_LeaseRequestQueues(benchmark::State& state) {
  LeaseWorld w = make_world(state);
  size_t n = 0;
  for (auto _ : state) {
    uint64_t id = w.next_id();
    auto actions = w.feed(LeaseRequested{id, w.queued_request()});
    n = actions.size();
    benchmark::DoNotOptimize(actions);
    state.PauseTiming();
    w.set_next_id(id + 1);
    bool ok = w.arbiter().lease(id)->state == LeaseState::queued;
    w.feed(LeaseReleased{id, std::nullopt});
    state.ResumeTiming();
    if (!ok) {
      state.SkipWithError("the request was granted");
      break;
    }
    w.maintain(state);
  }
  check_and_count(state, w, state.range(1), n);
}

// The cancel of a queued lease (the last one); requested outside the timing.
void BM_LeaseCancelQueued(benchmark::State& state) {
  LeaseWorld w = make_world(state);
  size_t n = 0;
  for (auto _ : state) {
    state.PauseTiming();
    uint64_t id = w.request(w.queued_request());
    state.ResumeTiming();
    auto actions = w.feed(LeaseReleased{id, std::nullopt});
    n = actions.size();
    benchmark::DoNotOptimize(actions);
    w.maintain(state);
  }
  check_and_count(state, w, state.range(1), n);
}

// A request granted at once (priority 100, fits beside the queue); released outside the timing.
void BM_LeaseRequestGranted(benchmark::State& state) {
  LeaseWorld w = make_world(state);
  LeaseRequest r = w.granted_request(0);
  r.label = "urgent";
  size_t n = 0;
  for (auto _ : state) {
    uint64_t id = w.next_id();
    auto actions = w.feed(LeaseRequested{id, r});
    n = actions.size();
    benchmark::DoNotOptimize(actions);
    state.PauseTiming();
    w.set_next_id(id + 1);
    bool ok = w.arbiter().lease(id)->state == LeaseState::granted;
    w.feed(LeaseReleased{id, 0});
    state.ResumeTiming();
    if (!ok) {
      state.SkipWithError("the request was not granted");
      break;
    }
    w.maintain(state);
  }
  check_and_count(state, w, state.range(1), n);
}

// The release of a granted lease: its 2 GiB promise comes back, an admission pass runs (the heads
// still do not fit). Re-requested outside the timing, granted at once (priority 100).
void BM_LeaseReleaseGranted(benchmark::State& state) {
  LeaseWorld w = make_world(state);
  size_t n = 0, k = 0;
  for (auto _ : state) {
    unsigned gpu = static_cast<unsigned>(k++ % w.granted().size());
    auto actions = w.feed(LeaseReleased{w.granted()[gpu], 0});
    n = actions.size();
    benchmark::DoNotOptimize(actions);
    state.PauseTiming();
    uint64_t id = w.request(w.granted_request(gpu));
    bool ok = w.arbiter().lease(id)->state == LeaseState::granted;
    w.granted()[gpu] = id;
    state.ResumeTiming();
    if (!ok) {
      state.SkipWithError("the released lease admitted another (re-request not granted)");
      break;
    }
    w.maintain(state);
  }
  check_and_count(state, w, state.range(1), n);
}

// A held request's wake: the sleeper's room claimed through admission, queued last.
void BM_WakeRequested(benchmark::State& state) {
  LeaseWorld w(static_cast<unsigned>(state.range(0)), static_cast<int>(state.range(1)),
               state.range(2) != 0, /*sleeper=*/true);
  uint64_t id = 1;
  size_t n = 0;
  for (auto _ : state) {
    auto actions = w.feed(WakeRequested{id, "sleeper", "model", true});
    n = actions.size();
    benchmark::DoNotOptimize(actions);
    state.PauseTiming();
    bool ok = w.arbiter().wakes().waking("sleeper");
    w.feed(WakeCancelled{id++});
    ok = ok && !w.arbiter().wakes().waking("sleeper");
    state.ResumeTiming();
    if (!ok) {
      state.SkipWithError("the wake did not wait for room, or was not cancelled");
      break;
    }
    w.maintain(state);
  }
  check_and_count(state, w, state.range(1), n);
}

// gpus, queued leases, idle_gpu (1: no lease for GPU 7 and none for `any`: the whole queue walked).
void world_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"gpus", "queued", "idle_gpu"});
  b->Args({8, 10000, 0})->Args({8, 100, 0})->Args({1, 10000, 0})->Args({1, 100, 0});
  b->Args({8, 10000, 1})->Args({8, 100, 1});
  b->Unit(benchmark::kMicrosecond);
}
BENCHMARK(BM_LeaseSample)->Apply(world_args);
BENCHMARK(BM_LeaseTick)->Apply(world_args);
BENCHMARK(BM_LeaseProbe)->Apply(world_args);
BENCHMARK(BM_LeaseRequestQueues)->Apply(world_args);
BENCHMARK(BM_LeaseRequestGranted)->Apply(world_args);
BENCHMARK(BM_LeaseReleaseGranted)->Apply(world_args);
BENCHMARK(BM_LeaseCancelQueued)->Apply(world_args);
BENCHMARK(BM_WakeRequested)->Apply(world_args);

}  // namespace
}  // namespace vramd
