#include "sim/world.h"

#include <algorithm>
#include <cmath>

#include "core/units.h"

#include "sim/policy.h"

namespace vramd::sim {

namespace {

constexpr double kGiBHour = double(GiB) * 3600.0 * 1000.0;  // bytes × ms in one GiB-hour

// A fixed, portable hash (splitmix64): the k-th unload call of a service is effective or not
// the same way under every policy, so policies are compared on the same luck.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

uint64_t hash_name(const std::string& s) {
  uint64_t h = 1469598103934665603ULL;  // FNV-1a
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ULL;
  return h;
}

Bytes scaled(Bytes b, Ms done, Ms total) {
  if (total <= 0 || done >= total) return b;
  if (done <= 0) return 0;
  return Bytes(double(b) * double(done) / double(total));
}

}  // namespace

const char* to_string(Phase p) {
  switch (p) {
    case Phase::unloaded:
      return "unloaded";
    case Phase::loading:
      return "loading";
    case Phase::loaded:
      return "loaded";
    case Phase::unloading:
      return "unloading";
    case Phase::restarting:
      return "restarting";
  }
  return "?";
}

World::World(const Trace& trace) : trace_(trace) {
  for (const auto& s : trace.services) services_.push_back(ServiceSim{&s});
  for (const auto& j : trace.jobs) jobs_.push_back(JobSim{&j});
  request_done_.assign(trace.requests.size(), -1);
  found_down_.assign(trace.requests.size(), false);
  reload_wait_.assign(trace.requests.size(), -1);
  reload_paid_.assign(trace.requests.size(), 0);
  job_end_.assign(trace.jobs.size(), 0);
}

Bytes World::observed_bytes(size_t i) const {
  const ServiceSim& s = services_[i];
  Bytes full = s.spec->footprint();
  switch (s.phase) {
    case Phase::loading:
      return scaled(full, now_ - s.phase_start, s.spec->load);
    case Phase::loaded:
      return full;
    case Phase::unloading:
      return s.unload_frees ? full - scaled(full, now_ - s.phase_start, s.spec->unload) : full;
    default:
      return 0;
  }
}

Bytes World::committed_bytes(size_t i) const {
  Phase p = services_[i].phase;
  bool holds = p == Phase::loading || p == Phase::loaded || p == Phase::unloading;
  return holds ? services_[i].spec->footprint() : 0;
}

Bytes World::used(unsigned gpu) const {
  const TraceGpu* g = trace_.gpu(gpu);
  Bytes u = g ? g->baseline : 0;
  for (size_t i = 0; i < services_.size(); ++i)
    if (services_[i].spec->gpu == gpu) u += observed_bytes(i);
  for (size_t j : running_)
    if (jobs_[j].spec->gpu == gpu && (!jobs_[j].suspended || now_ < jobs_[j].copy_end))
      u += jobs_[j].spec->bytes;
  return u;
}

Bytes World::free_committed(unsigned gpu) const {
  const TraceGpu* g = trace_.gpu(gpu);
  if (!g) return 0;
  Bytes taken = g->baseline;
  for (size_t i = 0; i < services_.size(); ++i)
    if (services_[i].spec->gpu == gpu) taken += committed_bytes(i);
  for (size_t j : running_)
    if (jobs_[j].spec->gpu == gpu && !jobs_[j].suspended) taken += jobs_[j].spec->bytes;
  return taken >= g->total ? 0 : g->total - taken;
}

Bytes World::idle_bytes(unsigned gpu) const {
  Bytes b = 0;
  for (size_t i = 0; i < services_.size(); ++i) {
    const ServiceSim& s = services_[i];
    bool holds = s.phase == Phase::loaded || s.phase == Phase::unloading;
    if (s.spec->gpu == gpu && holds && !s.busy()) b += committed_bytes(i);
  }
  return b;
}

void World::load(size_t i) {
  ServiceSim& s = services_[i];
  if (s.phase != Phase::unloaded) return;
  // What the GPU shows free now (an unload under way counts by what it has given back: it
  // ends within seconds while the load grows over its whole load time).
  Bytes total = trace_.gpu(s.spec->gpu)->total, in_use = used(s.spec->gpu);
  if (in_use > total || total - in_use < s.spec->footprint()) ++m_.loads_over_capacity;
  // From host RAM (a level-1 sleep) the wake is short; else a load from disk.
  bool from_ram = s.in_host_ram;
  Ms takes = from_ram ? s.spec->sleep1 : s.spec->load;
  leave_host_ram(s);
  s.phase = Phase::loading;
  s.phase_start = now_;
  s.phase_end = now_ + takes;
  if (++s.loads > 1) {
    ++m_.reloads;
    m_.reload_s += double(takes) / 1000.0;
    (from_ram ? m_.reload_s_sleep1 : m_.reload_s_cold) += double(takes) / 1000.0;
  }
  decisions_.push_back({now_, (from_ram ? "wake " : "load ") + s.spec->name});
}

bool World::ineffective_draw(size_t i, int call) const {
  uint64_t h = mix(hash_name(services_[i].spec->name) ^ mix(uint64_t(call)));
  double u = double(h >> 11) / double(1ULL << 53);
  return u >= services_[i].spec->unload_effective;
}

void World::leave_host_ram(ServiceSim& s) {
  if (!s.in_host_ram) return;
  s.in_host_ram = false;
  host_used_ -= std::min(host_used_, s.spec->host_bytes);
}

void World::mark_ready(size_t i) {
  ServiceSim& s = services_[i];
  auto mark = [&](size_t r) {
    if (found_down_[r] && reload_wait_[r] < 0) reload_wait_[r] = now_ - trace_.requests[r].t;
  };
  for (size_t r : s.queue) mark(r);
  if (s.serving) mark(*s.serving);
}

bool World::unload(size_t i, bool shallow) {
  ServiceSim& s = services_[i];
  if (s.phase != Phase::loaded || s.busy()) return false;
  ++m_.unload_calls;
  s.unload_shallow = shallow && s.spec->sleep1 >= 0;
  s.unload_frees = !ineffective_draw(i, s.unload_calls++);
  if (!s.unload_frees) ++m_.unload_ineffective;
  s.phase = Phase::unloading;
  s.phase_start = now_;
  s.phase_end = now_ + s.spec->unload;
  decisions_.push_back({now_, "unload " + s.spec->name});
  return true;
}

bool World::stop(size_t i) {
  ServiceSim& s = services_[i];
  if (s.phase != Phase::loaded || s.busy()) return false;
  ++m_.unload_calls;
  s.unload_frees = true;
  s.unload_shallow = false;
  s.phase = Phase::unloading;
  s.phase_start = now_;
  s.phase_end = now_ + s.spec->unload;
  decisions_.push_back({now_, "stop " + s.spec->name});
  return true;
}

void World::restart(size_t i) {
  ServiceSim& s = services_[i];
  if (s.serving) {
    s.queue.push_front(*s.serving);
    s.serving.reset();
  }
  ++m_.restarts;
  ++s.generation;
  leave_host_ram(s);
  s.phase = Phase::restarting;
  s.phase_start = now_;
  s.phase_end = now_ + s.spec->restart;
  decisions_.push_back({now_, "restart " + s.spec->name});
}

void World::grant(size_t j) {
  JobSim& job = jobs_[j];
  if (job.state != JobSim::State::waiting) return;
  job.state = JobSim::State::running;
  job.granted_at = now_;
  job_end_[j] = now_ + job.spec->duration;
  waiting_.erase(std::find(waiting_.begin(), waiting_.end(), j));
  running_.push_back(j);
  decisions_.push_back({now_, "grant " + job.spec->name});
}

// Device memory copied to host RAM and back (a PCIe 4 x16 link's practical rate).
constexpr double kSuspendCopyRate = 12.0 * double(GiB);  // bytes per second

std::optional<Ms> World::suspend(size_t j) {
  JobSim& job = jobs_[j];
  if (job.state != JobSim::State::running || job.suspended) return std::nullopt;
  Ms copy = Ms(std::ceil(double(job.spec->bytes) / kSuspendCopyRate * 1000.0));
  job.suspended = true;
  job.work_left = std::max<Ms>(job_end_[j] - now_, 0);
  job.copy_end = now_ + copy;
  ++job.suspends;
  ++m_.suspends;
  host_used_ += job.spec->bytes;
  decisions_.push_back({now_, "suspend " + job.spec->name});
  return copy;
}

std::optional<Ms> World::resume(size_t j) {
  JobSim& job = jobs_[j];
  if (job.state != JobSim::State::running || !job.suspended) return std::nullopt;
  Ms copy = Ms(std::ceil(double(job.spec->bytes) / kSuspendCopyRate * 1000.0));
  job.suspended = false;
  job_end_[j] = std::max(now_, job.copy_end) + copy + job.work_left;
  host_used_ -= std::min(host_used_, job.spec->bytes);
  decisions_.push_back({now_, "resume " + job.spec->name});
  return copy;
}

std::optional<Ms> World::next_completion() const {
  std::optional<Ms> out;
  auto earliest = [&](Ms t) { out = out ? std::min(*out, t) : t; };
  for (const auto& s : services_) {
    if (s.phase == Phase::loading || s.phase == Phase::unloading || s.phase == Phase::restarting)
      earliest(s.phase_end);
    if (s.serving) earliest(s.serve_end);
  }
  for (size_t j : running_) {
    if (!jobs_[j].suspended)
      earliest(job_end_[j]);
    else if (jobs_[j].copy_end > now_)
      earliest(jobs_[j].copy_end);  // its bytes leave the GPU then
  }
  return out;
}

void World::advance(Ms t) {
  if (t <= now_) return;
  double dt = double(t - now_);
  std::map<unsigned, Bytes> idle, free;
  for (const auto& g : trace_.gpus) {
    idle[g.index] = idle_bytes(g.index);
    free[g.index] = free_committed(g.index);
    m_.idle_gib_h += double(idle[g.index]) * dt / kGiBHour;
  }
  for (const ServiceSim& s : services_)
    if (s.phase == Phase::loading || s.phase == Phase::restarting)
      for (size_t r : s.queue)
        if (found_down_[r] && reload_wait_[r] < 0) reload_paid_[r] += t - now_;
  for (size_t j : waiting_) {
    const TraceJob& spec = *jobs_[j].spec;
    Bytes f = free[spec.gpu];
    if (f < spec.bytes && f + idle[spec.gpu] >= spec.bytes) m_.blocked_by_idle_job_s += dt / 1000.0;
  }
  now_ = t;
}

void World::finish_service(size_t i, Policy& policy) {
  ServiceSim& s = services_[i];
  if (s.serving && s.serve_end <= now_) {
    request_done_[*s.serving] = now_;
    s.serving.reset();
    s.last_used = now_;
    policy.on_request_done(*this, i);
  }
  if (s.phase_end > now_) return;
  if (s.phase == Phase::loading) {
    s.phase = Phase::loaded;
    s.last_used = now_;
    mark_ready(i);
    policy.on_load_done(*this, i);
  } else if (s.phase == Phase::unloading) {
    s.phase = s.unload_frees ? Phase::unloaded : Phase::loaded;
    if (s.unload_frees && s.unload_shallow) {
      s.in_host_ram = true;
      host_used_ += s.spec->host_bytes;
      if (trace_.host_ram > 0 && host_used_ > trace_.host_ram) {
        // More kept in host RAM than the host has: the kernel's OOM killer ends the sleeper
        // (its weights are the largest RSS), which comes back empty after a restart.
        leave_host_ram(s);
        ++m_.host_ooms;
        // What its next request pays beyond the load: the restart (counted as a cold reload).
        m_.reload_s += double(s.spec->restart) / 1000.0;
        m_.reload_s_cold += double(s.spec->restart) / 1000.0;
        ++s.generation;
        s.phase = Phase::restarting;
        s.phase_start = now_;
        s.phase_end = now_ + s.spec->restart;
        decisions_.push_back({now_, "host-oom " + s.spec->name});
        policy.on_unload_done(*this, i, true);
        return;
      }
    }
    policy.on_unload_done(*this, i, s.unload_frees);
  } else if (s.phase == Phase::restarting) {
    s.phase = Phase::unloaded;
    policy.on_restart_done(*this, i);
  }
}

void World::complete_due(Policy& policy) {
  for (size_t i = 0; i < services_.size(); ++i) finish_service(i, policy);
  std::vector<size_t> ended;
  for (size_t j : running_)
    if (!jobs_[j].suspended && job_end_[j] <= now_) ended.push_back(j);
  for (size_t j : ended) {
    jobs_[j].state = JobSim::State::done;
    jobs_[j].done_at = now_;
    running_.erase(std::find(running_.begin(), running_.end(), j));
    policy.on_job_done(*this, j);
  }
}

void World::arrive_request(size_t r, Policy& policy) {
  size_t svc = trace_.requests[r].service;
  // Down after its first load (the first is no reload: every policy pays it).
  found_down_[r] = services_[svc].phase != Phase::loaded && services_[svc].loads > 0;
  services_[svc].queue.push_back(r);
  policy.on_request_arrived(*this, svc);
}

void World::arrive_job(size_t j, Policy& policy) {
  jobs_[j].state = JobSim::State::waiting;
  // Kept in queue order (priority, then arrival): granting walks it from the front.
  auto after = std::upper_bound(waiting_.begin(), waiting_.end(), j, [&](size_t a, size_t b) {
    if (jobs_[a].spec->priority != jobs_[b].spec->priority)
      return jobs_[a].spec->priority > jobs_[b].spec->priority;
    return a < b;
  });
  waiting_.insert(after, j);
  policy.on_job_arrived(*this, j);
}

bool World::grant_jobs_in_order() {
  // Per GPU, the first in (priority, arrival) order goes when it fits; the rest wait behind it.
  std::map<unsigned, bool> blocked;
  bool moved = false;
  for (size_t k = 0; k < waiting_.size() && blocked.size() < trace_.gpus.size();) {
    size_t j = waiting_[k];
    unsigned gpu = jobs_[j].spec->gpu;
    if (blocked.count(gpu)) {
      ++k;
    } else if (jobs_[j].spec->bytes <= free_committed(gpu)) {
      grant(j);  // erases it from waiting_
      moved = true;
    } else {
      blocked[gpu] = true;
      ++k;
    }
  }
  return moved;
}

bool World::progress(Policy& policy) {
  bool any = false;
  for (bool moved = true; moved;) {
    moved = false;
    for (size_t i = 0; i < services_.size(); ++i) {
      ServiceSim& s = services_[i];
      if (s.phase == Phase::loaded && !s.serving && !s.queue.empty()) {
        s.serving = s.queue.front();
        s.queue.pop_front();
        mark_ready(i);  // an ineffective unload: it never went down
        s.serve_end = now_ + trace_.requests[*s.serving].duration;
        moved = true;
      } else if (s.phase == Phase::unloaded && !s.queue.empty() && policy.may_load(*this, i)) {
        load(i);
        moved = true;
      }
    }
    if (!policy.admits_jobs() && grant_jobs_in_order()) moved = true;
    any |= moved;
  }
  record_timeline();
  return any;
}

void World::record_timeline() {
  for (const auto& g : trace_.gpus) {
    TimelinePoint p;
    p.t = now_;
    for (size_t i = 0; i < services_.size(); ++i)
      // What it holds: all of a load (already its own), what is left of an unload.
      p.per_service.push_back(services_[i].spec->gpu != g.index        ? 0
                              : services_[i].phase == Phase::unloading ? observed_bytes(i)
                                                                       : committed_bytes(i));
    for (size_t j : running_)
      if (jobs_[j].spec->gpu == g.index) p.jobs += jobs_[j].spec->bytes;
    auto& line = timeline_[g.index];
    if (!line.empty() && line.back().per_service == p.per_service && line.back().jobs == p.jobs)
      continue;
    if (!line.empty() && line.back().t == p.t)
      line.back() = p;
    else
      line.push_back(std::move(p));
  }
}

Metrics World::finish(const std::string& policy_name) {
  Metrics m = m_;
  m.policy = policy_name;
  std::vector<double> waits, latencies, completions;
  for (auto& job : jobs_) {
    if (job.spec->t > trace_.end) continue;
    ++m.jobs;
    bool granted = job.state == JobSim::State::running || job.state == JobSim::State::done;
    if (!granted) ++m.jobs_never_admitted;
    waits.push_back(double((granted ? job.granted_at : trace_.end) - job.spec->t) / 1000.0);
    // From its arrival to its end; one not done by the trace's end counts until then.
    Ms end = job.state == JobSim::State::done ? job.done_at : std::max(trace_.end, job.spec->t);
    completions.push_back(double(end - job.spec->t) / 1000.0);
  }
  m.job_completion_p50_s = percentile(completions, 50);
  m.job_completion_p95_s = percentile(completions, 95);
  for (size_t r = 0; r < request_done_.size(); ++r) {
    const TraceRequest& req = trace_.requests[r];
    if (req.t > trace_.end) continue;
    ++m.requests;
    bool done = request_done_[r] >= 0;
    if (!done) ++m.requests_never_served;
    latencies.push_back(double((done ? request_done_[r] : trace_.end) - req.t) / 1000.0);
  }
  m.job_wait_p50_s = percentile(waits, 50);
  m.job_wait_p95_s = percentile(waits, 95);
  m.job_wait_max_s = percentile(waits, 100);
  m.request_latency_p50_s = percentile(latencies, 50);
  m.request_latency_p95_s = percentile(latencies, 95);
  std::vector<double> reload_waits, reload_paid;
  for (size_t r = 0; r < reload_wait_.size(); ++r)
    if (trace_.requests[r].t <= trace_.end && found_down_[r]) {
      reload_waits.push_back(
          double(reload_wait_[r] >= 0 ? reload_wait_[r] : trace_.end - trace_.requests[r].t) /
          1000.0);
      reload_paid.push_back(double(reload_paid_[r]) / 1000.0);
    }
  m.requests_found_down = int(reload_waits.size());
  m.reload_wait_p95_s = percentile(reload_waits, 95);
  m.request_reload_p95_s = percentile(reload_paid, 95);
  return m;
}

}  // namespace vramd::sim
