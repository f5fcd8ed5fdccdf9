#include "sim/vramd_policy.h"

#include <utility>

#include <algorithm>

#include <fmt/format.h>


namespace vramd::sim {

namespace {

constexpr Ms kFastSample = 250;  // daemon/: kFastSampleInterval
constexpr int kServicePid = 10000;
constexpr int kJobPid = 500000;

int service_pid(const World& w, size_t svc) {
  return kServicePid + int(svc) * 1000 + w.service(svc).generation % 1000;
}

}  // namespace

Config sim_config(const Trace& trace, const Config& base, bool base_from_file,
                  VramdVariant variant) {
  Config c = base;
  c.services.clear();
  if (variant == VramdVariant::prewarm) c.daemon.prewarm = true;
  if (!c.gpu.baseline && !trace.gpus.empty()) {
    // One baseline for every GPU (vramd.toml has one): the smallest, so no GPU's driver memory
    // is taken for less than it is.
    Bytes b = trace.gpus[0].baseline;
    for (const auto& g : trace.gpus) b = std::min(b, g.baseline);
    c.gpu.baseline = b;
  }
  for (size_t i = 0; i < trace.services.size(); ++i) {
    const TraceService& s = trace.services[i];
    const ServiceConfig* given = base.find_service(s.name);
    ServiceConfig sc = given ? *given : ServiceConfig{};
    sc.name = s.name;
    sc.url = fmt::format("http://127.0.0.1:{}", 20000 + i);
    if (s.sleep1 >= 0) {
      // A server with a level-1 sleep: vLLM's kind has both sleeps (and its first guesses).
      sc.kind = "vllm";
      if (variant == VramdVariant::fixed_depth && !sc.sleep_level) sc.sleep_level = 1;
    } else {
      sc.kind = "generic_http";
      sc.unload_url = "/free";
    }
    if (variant == VramdVariant::prewarm) sc.prewarm = true;
    sc.match = MatchRule{};
    sc.match.container = s.name;  // escalation restarts the container
    sc.start.clear();
    if (!given || !base_from_file) sc.on_ineffective_unload = IneffectiveUnload::restart;
    if (!sc.vram_estimate) sc.vram_estimate = s.footprint();
    c.services.push_back(std::move(sc));
  }
  return c;
}

void VramdPolicy::start(World& w) {
  arbiter_ = std::make_unique<Arbiter>(sim_config(w.trace(), base_, from_file_, variant_));
  // The sim's GPUs have a driver whose cuda-checkpoint works (issue 28), but in the ablation.
  SuspendOffer offer;
  offer.tool = "cuda-checkpoint";
  if (variant_ == VramdVariant::no_suspend) {
    offer.why = "suspend is not offered: the no-suspend ablation";
  } else {
    offer.offered = true;
    offer.form = "action";
  }
  feed(w, SuspendProbed{offer});
  for (size_t i = 0; i < w.services().size(); ++i) probe(w, i, true);
  next_sample_ = w.now();
}

std::optional<Ms> VramdPolicy::next_wakeup() const {
  Ms next = next_sample_;
  if (auto d = arbiter_->next_deadline())
    next = std::min(next, std::max(Ms(d->time_since_epoch().count()), last_tick_ + 1));
  return next;
}

void VramdPolicy::on_wakeup(World& w) {
  if (w.now() >= next_sample_) {
    feed(w, sample(w));
    Ms interval = fast_ ? kFastSample : Ms(arbiter_->config().daemon.sample_interval.count());
    next_sample_ = w.now() + std::max<Ms>(interval, 1);
  }
  auto d = arbiter_->next_deadline();
  if (d && Ms(d->time_since_epoch().count()) <= w.now() && last_tick_ < w.now()) {
    last_tick_ = w.now();
    feed(w, Tick{});
  }
}

SampleTaken VramdPolicy::sample(const World& w) const {
  SampleTaken s;
  s.gpus.backend = "sim";
  for (const auto& g : w.trace().gpus) {
    GpuSample gs;
    gs.index = g.index;
    gs.label = std::to_string(g.index);
    gs.uuid = fmt::format("GPU-sim-{}", g.index);
    gs.name = "simulated GPU";
    gs.total = g.total;
    gs.used = std::min(w.used(g.index), g.total);
    for (size_t i = 0; i < w.services().size(); ++i) {
      Bytes b = w.observed_bytes(i);
      if (w.service(i).spec->gpu != g.index || b == 0) continue;
      gs.processes.push_back({service_pid(w, i), b, "python3"});
    }
    for (size_t j = 0; j < w.jobs().size(); ++j) {
      const JobSim& job = w.jobs()[j];
      bool on_gpu = !job.suspended || w.now() < job.copy_end;  // a suspend's copy runs
      if (job.state == JobSim::State::running && job.spec->gpu == g.index && on_gpu)
        gs.processes.push_back({kJobPid + int(j), job.spec->bytes, "job"});
    }
    s.gpus.gpus.push_back(std::move(gs));
  }
  // Every server's process runs (but while it restarts), whether it holds GPU memory or not; its
  // RSS grows by the weights a level-1 sleep keeps, as a real server's does (the core measures
  // a sleep's host RAM from it).
  for (size_t i = 0; i < w.services().size(); ++i) {
    const ServiceSim& svc = w.service(i);
    if (svc.phase == Phase::restarting) continue;
    ProcessInfo info;
    info.pid = service_pid(w, i);
    info.ppid = 1;
    info.comm = "python3";
    info.start_ticks = 1;
    info.cmdline = "python3 main.py";
    info.rss = 1 * GiB + (svc.in_host_ram ? svc.spec->host_bytes : 0);
    info.cgroup.kind = CgroupIdentity::Kind::container;
    info.cgroup.runtime = "docker";
    info.cgroup.container_name = svc.spec->name;
    s.host.processes.push_back(std::move(info));
  }
  for (const auto& g : s.gpus.gpus)
    for (const auto& p : g.processes) {
      if (p.pid < kJobPid) continue;  // a server's: above
      ProcessInfo info;
      info.pid = p.pid;
      info.ppid = 1;
      info.comm = p.name;
      info.start_ticks = 1;
      info.cmdline = w.jobs()[size_t(p.pid - kJobPid)].spec->name;
      s.host.processes.push_back(std::move(info));
    }
  if (w.trace().host_ram > 0) {
    s.host.mem_total = w.trace().host_ram;
    s.host.mem_available = w.trace().host_ram - std::min(w.trace().host_ram, w.host_ram_used());
  }
  std::sort(s.host.processes.begin(), s.host.processes.end(),
            [](const ProcessInfo& a, const ProcessInfo& b) { return a.pid < b.pid; });
  return s;
}

void VramdPolicy::probe(World& w, size_t svc, bool reachable) {
  ServiceProbe p;
  p.reachable = reachable;
  p.can_wake = true;  // as WakeRequested says: the sim's servers have a wake call
  if (!reachable) p.error = "connect: Connection refused (restarting)";
  Phase ph = w.service(svc).phase;
  if (reachable && (ph == Phase::loaded || ph == Phase::unloading))
    p.models.push_back(w.service(svc).spec->name);
  feed(w, ProbeDone{w.service(svc).spec->name, p});
}

void VramdPolicy::report_requests(World& w, size_t svc) {
  const ServiceSim& s = w.service(svc);
  int n = int(s.queue.size()) + (s.serving ? 1 : 0);
  feed(w, RequestsInFlight{s.spec->name, n});
}

bool VramdPolicy::may_load(World& w, size_t svc) {
  if (wake_ready_[svc]) return true;
  if (wake_of_service_.count(svc)) return false;  // its wake is under way
  const TraceService& s = *w.service(svc).spec;
  // The proxy's question, answered by the core as in daemon/daemon_proxy.cc (the sim's servers
  // have a wake call, like vLLM's /wake_up or llama.cpp's router). A request names its
  // service's model (the sim's probes report it so), as a front door request does.
  if (arbiter_->ready_for(s.name, s.name, /*can_wake=*/true)) {
    // Forwarded: the server loads on the request itself, unadmitted. Where the GPU shows too
    // little free, the load fails (an OOM) and is retried when memory comes back.
    Bytes total = w.trace().gpu(s.gpu)->total, used = w.used(s.gpu);
    bool fits = used <= total && total - used >= s.footprint();
    if (!fits && !oom_counted_[svc]) w.count_unadmitted_oom();
    oom_counted_[svc] = !fits;
    return fits;
  }
  // Held: the core wakes it (core/wakes.h), as the daemon's proxy asks it to.
  uint64_t id = next_wake_++;
  wake_of_service_[svc] = id;
  service_of_wake_[id] = svc;
  feed(w, WakeRequested{id, s.name, s.name, /*can_wake=*/true});
  return wake_ready_[svc];
}

void VramdPolicy::on_load_done(World& w, size_t svc) {
  // A wake call returns once the server is back (vLLM's /wake_up): its time is the load's.
  if (auto c = calling_.find(svc); c != calling_.end()) {
    const ServiceSim& s = w.service(svc);
    feed(w, WakeCallDone{s.spec->name,
                         c->second,
                         {UnloadCall::Result::requested, "POST /wake_up → 200"},
                         Duration(w.now() - s.phase_start)});
    calling_.erase(c);
  }
  probe(w, svc, true);  // its model is listed now
  wake_ready_[svc] = false;  // the core's claim holds the room until a sample shows the load
}

void VramdPolicy::on_unload_done(World& w, size_t svc, bool) { probe(w, svc, true); }

void VramdPolicy::on_restart_done(World& w, size_t svc) {
  if (restart_asked_[svc])
    feed(w, LifecycleDone{w.service(svc).spec->name, Command::restart, true, "restarted"});
  restart_asked_[svc] = false;
  probe(w, svc, true);
}

void VramdPolicy::on_job_arrived(World& w, size_t j) {
  const TraceJob& job = *w.jobs()[j].spec;
  LeaseRequest r;
  r.gpu = job.gpu;
  r.vram = job.bytes;
  r.holder = job.name;
  r.pid = kJobPid + int(j);
  r.pid_start_ticks = 1;
  r.priority = job.priority;
  r.label = job.name;
  r.preemptible = job.preemptible;
  uint64_t id = arbiter_->next_lease_id();
  job_of_lease_[id] = j;
  lease_of_job_[j] = id;
  feed(w, LeaseRequested{id, r});
}

void VramdPolicy::on_job_done(World& w, size_t j) {
  auto it = lease_of_job_.find(j);
  if (it != lease_of_job_.end()) feed(w, LeaseReleased{it->second, 0});
}

void VramdPolicy::feed(World& w, Event e) {
  pending_.push_back(std::move(e));
  if (feeding_) return;
  feeding_ = true;
  while (!pending_.empty()) {
    Event next = std::move(pending_.front());
    pending_.pop_front();
    apply(w, arbiter_->handle(next, at(w)));
  }
  feeding_ = false;
}

void VramdPolicy::on_lease(World& w, const Lease& l) {
  if (l.state != LeaseState::granted) return;
  if (auto j = job_of_lease_.find(l.id); j != job_of_lease_.end())
    if (w.jobs()[j->second].state == JobSim::State::waiting) w.grant(j->second);
}

void VramdPolicy::on_wake_finished(const WakeFinished& f) {
  auto it = service_of_wake_.find(f.id);
  if (it == service_of_wake_.end()) return;
  size_t svc = it->second;
  service_of_wake_.erase(it);
  wake_of_service_.erase(svc);
  // Not ready (refused, timed out): the request asks again at its next turn.
  wake_ready_[svc] = f.outcome == WakeOutcome::ready;
}

void VramdPolicy::apply(World& w, const std::vector<Action>& actions) {
  for (const Action& a : actions) {
    if (auto* c = std::get_if<CallUnload>(&a)) {
      int svc = w.trace().service_index(c->service);
      // A suspend keeps its bytes in host RAM, as a sleep1 does.
      if (svc >= 0)
        w.unload(size_t(svc), c->depth == SleepDepth::sleep1 || c->depth == SleepDepth::suspend);
      // The server accepts the call at once; what it frees shows in later samples.
      pending_.emplace_back(UnloadCallDone{c->service,
                                           c->unload_id,
                                           {UnloadCall::Result::requested, "POST /free → 200"},
                                           Duration(0)});
    } else if (auto* l = std::get_if<Lifecycle>(&a)) {
      int svc = w.trace().service_index(l->service);
      if (svc < 0) continue;
      w.restart(size_t(svc));  // a stop frees the same way; the service comes back unloaded
      restart_asked_[size_t(svc)] = true;
      probe(w, size_t(svc), false);
    } else if (auto* lc = std::get_if<LeaseChanged>(&a)) {
      on_lease(w, lc->lease);
    } else if (auto* cw = std::get_if<CallWake>(&a)) {
      // The world's load is the wake (for a held request or a prewarm): it starts now, and the
      // call returns when it is done (on_load_done). A service not asleep in the world (its
      // unload was ineffective, or it is loading already) answers at once.
      int svc = w.trace().service_index(cw->service);
      if (svc >= 0 && w.service(size_t(svc)).phase == Phase::unloaded) {
        w.load(size_t(svc));
        calling_[size_t(svc)] = cw->wake_id;
      } else {
        pending_.emplace_back(WakeCallDone{cw->service,
                                           cw->wake_id,
                                           {UnloadCall::Result::requested, "POST /wake_up → 200"},
                                           Duration(0)});
      }
    } else if (auto* sl = std::get_if<SuspendLease>(&a)) {
      // cuda-checkpoint returns once the copy is done; the samples show the bytes gone then.
      std::optional<Ms> took;
      for (int pid : sl->pids)
        if (pid >= kJobPid && size_t(pid - kJobPid) < w.jobs().size())
          took = w.suspend(size_t(pid - kJobPid));
      pending_.emplace_back(LeaseSuspendDone{sl->id, took.has_value(),
                                             took ? "" : "not a running job",
                                             Duration(took.value_or(0))});
    } else if (auto* rl = std::get_if<ResumeLease>(&a)) {
      std::optional<Ms> took;
      for (int pid : rl->pids)
        if (pid >= kJobPid && size_t(pid - kJobPid) < w.jobs().size())
          took = w.resume(size_t(pid - kJobPid));
      // A job that was never suspended (an undone suspend) resumes as a no-op, as the tool does.
      pending_.emplace_back(LeaseResumeDone{rl->id, true, "", Duration(took.value_or(0))});
    } else if (auto* wf = std::get_if<WakeFinished>(&a)) {
      on_wake_finished(*wf);
    } else if (auto* f = std::get_if<SetFastSampling>(&a)) {
      fast_ = f->on;
      if (fast_) next_sample_ = std::min(next_sample_, w.now() + kFastSample);
    }
  }
}

}  // namespace vramd::sim
