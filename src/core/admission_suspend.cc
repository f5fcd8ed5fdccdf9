// Preemptible leases (issue 28): admission suspends a granted preemptible lease's GPU processes
// (NVIDIA's cuda-checkpoint, run by the shell) when work of higher priority, a request's wake or
// a service's start needs its room and evicting idle services frees too little or costs more;
// verifies it like an unload (the bytes leave the GPU); charges its bytes to host RAM meanwhile;
// and resumes it on the same GPU as soon as its room is back, before anything new of no higher
// priority is granted there.
#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/admission.h"
#include "core/service_policy.h"

namespace vramd {

namespace {

// Until a suspend or resume has been timed here: device memory copied at this rate each way.
constexpr double kSuspendDefaultCopyRate = 4.0 * static_cast<double>(GiB);  // bytes per second
// The utility said done: the bytes must leave the GPU's numbers within this, or it was no suspend.
constexpr Duration kSuspendVerifyWindow = std::chrono::seconds(30);
constexpr Duration kResumeRetry = std::chrono::seconds(30);  // after a failed restore
constexpr Duration kSuspendLockTimeout = std::chrono::seconds(10);

// Who the room is for, as a lease's suspended_for says it.
std::string suspend_for_text(const Lease& l) {
  if (l.request.wake) return fmt::format("{}'s request", l.request.service);
  if (l.request.start) return fmt::format("the start of {}", l.request.service);
  return fmt::format("lease #{} ({})", l.id, l.owner_name());
}

std::string pid_list(const std::vector<int>& pids) {
  return pids.empty() ? std::string("none") : fmt::format("{}", fmt::join(pids, ", "));
}

std::string suspend_seconds_text(Duration d) {
  return fmt::format("{:.1f} s", std::chrono::duration<double>(d).count());
}

}  // namespace

bool Admission::moving_memory() const {
  for (uint64_t id : suspended_)
    if (const Lease& v = leases_.at(id);
        v.suspension && v.suspension->step != LeaseSuspension::Step::suspended)
      return true;
  return false;
}

bool Admission::may_preempt(const Lease& l) const {
  return suspend_.offered && !l.request.prewarm;
}

std::optional<Bytes> Admission::suspend_ram_room(const World& world) const {
  return world.services.ram_room();  // ram_available charges suspensions under way already
}

Bytes Admission::suspending_on(unsigned gpu) const {
  Bytes out = 0;
  for (uint64_t id : suspended_) {
    const Lease& v = leases_.at(id);
    if (v.gpu == gpu && v.suspension &&
        (v.suspension->step == LeaseSuspension::Step::suspending ||
         v.suspension->step == LeaseSuspension::Step::verifying))
      out += v.held;
  }
  return out;
}

void Admission::suspend_candidates(const Lease& l, unsigned gpu, const World& world,
                                   std::vector<EvictionCandidate>& out) const {
  if (!may_preempt(l)) return;
  std::optional<Bytes> room = suspend_ram_room(world);
  double rate = copy_bytes_per_s_ > 0 ? copy_bytes_per_s_ : kSuspendDefaultCopyRate;
  for (uint64_t id : granted_) {
    const Lease& v = leases_.at(id);
    if (v.id == l.id || v.state != LeaseState::granted || !v.request.preemptible ||
        v.suspension || !v.suspend_refused.empty() || v.request.cluster ||
        !v.request.service.empty() || v.gpu != gpu || v.held < kWorthUnloading)
      continue;
    // A start or a request's wake outranks batch work; other leases need a higher priority.
    if (!l.request.start && !l.request.wake && l.request.priority <= v.request.priority) continue;
    if (room && v.held > *room) continue;  // host RAM cannot take its bytes
    if (lease_pids(v, world).empty()) continue;
    // Its cost: the copy out and the copy back, in seconds of its work lost.
    auto copy = std::chrono::duration<double>(2.0 * static_cast<double>(v.held) / rate);
    EvictionCandidate c;
    c.service = v.owner_name();
    c.bytes = v.held;
    c.reload_cost = std::chrono::duration_cast<Duration>(copy);
    c.last_activity = v.granted_at.value_or(v.requested_at);
    c.lease = v.id;
    out.push_back(std::move(c));
  }
}

std::vector<int> Admission::lease_pids(const Lease& l, const World& world) const {
  std::vector<int> pids;
  if (!l.gpu) return pids;
  Owner me{OwnerKind::lease, l.owner_name()};
  for (const auto& g : world.ledger.status().gpus) {
    if (g.sample.index != *l.gpu) continue;
    for (const auto& h : g.holdings)
      if (h.owner == me)
        for (int pid : h.pids)
          if (std::find(pids.begin(), pids.end(), pid) == pids.end()) pids.push_back(pid);
  }
  std::sort(pids.begin(), pids.end());
  return pids;
}

void Admission::start_suspend(uint64_t id, const Lease& for_lease, const World& world,
                              const Now& now, std::vector<Action>& actions) {
  Lease& v = leases_.at(id);
  LeaseSuspension s;
  s.step = LeaseSuspension::Step::suspending;
  s.pids = lease_pids(v, world);
  s.bytes = v.held;
  s.for_whom = suspend_for_text(for_lease);
  v.suspension = s;
  suspended_.insert(id);
  actions.emplace_back(lease_event(
      now, "lease.suspending", v.id, v.gpu, v.owner_name(),
      fmt::format("suspending lease #{} ({}): {} on GPU {} to host RAM for {} (pids {})", v.id,
                  v.owner_name(), format_size(s.bytes), v.gpu.value_or(0), s.for_whom,
                  fmt::join(s.pids, ", "))));
  actions.emplace_back(SuspendLease{id, s.pids, kSuspendLockTimeout});
  actions.emplace_back(LeaseChanged{v});
}

void Admission::on_suspend_done(const LeaseSuspendDone& e, const Now& now,
                                std::vector<Action>& actions) {
  auto it = leases_.find(e.id);
  if (it == leases_.end() || !it->second.suspension ||
      it->second.suspension->step != LeaseSuspension::Step::suspending)
    return;  // ended meanwhile
  Lease& v = it->second;
  if (e.ok) {
    v.suspension->step = LeaseSuspension::Step::verifying;
    v.suspension->told_at = now.mono;
    v.suspension->took = e.took;
    // The samples say when its bytes are gone (update_holdings); one taken while the utility
    // ran may have shown it already (its room may be granted by then): suspended now.
    settle_suspends(now, actions);
    return;
  }
  v.suspend_refused = e.error;
  v.suspension.reset();
  suspended_.erase(v.id);
  actions.emplace_back(lease_event(
      now, "lease.suspend_failed", v.id, v.gpu, v.owner_name(),
      fmt::format("lease #{} ({}) could not be suspended, left running: {}", v.id, v.owner_name(),
                  e.error)));
  actions.emplace_back(LeaseChanged{v});
}

void Admission::on_resume_done(const LeaseResumeDone& e, const Now& now,
                               std::vector<Action>& actions) {
  auto it = leases_.find(e.id);
  if (it == leases_.end() || !it->second.suspension ||
      it->second.suspension->step != LeaseSuspension::Step::resuming)
    return;
  Lease& v = it->second;
  LeaseSuspension& s = *v.suspension;
  if (!e.ok) {
    s.step = LeaseSuspension::Step::suspended;
    s.retry_at = now.mono + kResumeRetry;
    actions.emplace_back(lease_event(
        now, "lease.resume_failed", v.id, v.gpu, v.owner_name(),
        fmt::format("lease #{} ({}) could not be resumed on GPU {}, tried again in {}: {}", v.id,
                    v.owner_name(), v.gpu.value_or(0), format_duration(kResumeRetry), e.error)));
    actions.emplace_back(LeaseChanged{v});
    return;
  }
  if (e.took.count() > 0 && s.bytes > 0)
    copy_bytes_per_s_ =
        static_cast<double>(s.bytes) / std::chrono::duration<double>(e.took).count();
  std::string message =
      s.at ? fmt::format("lease #{} ({}) resumed on GPU {} after {} suspended: {} back in {}",
                         v.id, v.owner_name(), v.gpu.value_or(0), format_age(now.mono - *s.at),
                         format_size(s.bytes), suspend_seconds_text(e.took))
           : fmt::format("lease #{} ({}) put back to running on GPU {}", v.id, v.owner_name(),
                         v.gpu.value_or(0));
  v.state = LeaseState::granted;
  v.suspension.reset();
  suspended_.erase(v.id);
  actions.emplace_back(lease_event(now, "lease.resumed", v.id, v.gpu, v.owner_name(), message));
  actions.emplace_back(LeaseChanged{v});
}

// After a restart: what the utility says of a suspended lease's processes. All still
// checkpointed: it waits for its room as before. All running (a resume that ended as vramd
// stopped, or one by hand): it runs again, and holds its grant. Some running or locked: all are
// resumed now, since the job cannot go on half on the GPU. Unreadable: it stays suspended, said.
void Admission::on_suspension_checked(const SuspensionChecked& e, const Now& now,
                                      std::vector<Action>& actions) {
  auto it = leases_.find(e.lease);
  if (it == leases_.end() || !it->second.suspension ||
      it->second.suspension->step != LeaseSuspension::Step::suspended)
    return;  // ended, or its resume was asked meanwhile (that reads the state itself)
  Lease& v = it->second;
  LeaseSuspension& s = *v.suspension;
  if (!e.error.empty())
    actions.emplace_back(lease_event(
        now, "lease.suspension_unknown", v.id, v.gpu, v.owner_name(),
        fmt::format("lease #{} ({}): its CUDA state could not all be read at vramd's start; "
                    "kept suspended: {}",
                    v.id, v.owner_name(), e.error)));
  if (e.running.empty() && e.locked.empty()) return;
  if (e.checkpointed.empty() && e.locked.empty() && e.error.empty()) {
    v.state = LeaseState::granted;
    v.suspension.reset();
    suspended_.erase(v.id);
    actions.emplace_back(lease_event(
        now, "lease.resumed", v.id, v.gpu, v.owner_name(),
        fmt::format("lease #{} ({}) found running on GPU {} at vramd's start: it was resumed "
                    "while vramd was down",
                    v.id, v.owner_name(), v.gpu.value_or(0))));
    actions.emplace_back(LeaseChanged{v});
    return;
  }
  s.step = LeaseSuspension::Step::resuming;
  s.retry_at.reset();
  actions.emplace_back(lease_event(
      now, "lease.resuming", v.id, v.gpu, v.owner_name(),
      fmt::format("resuming lease #{} ({}) on GPU {} at vramd's start: a suspend or resume was "
                  "cut short (running: {}; locked: {}; checkpointed: {})",
                  v.id, v.owner_name(), v.gpu.value_or(0), pid_list(e.running),
                  pid_list(e.locked), pid_list(e.checkpointed))));
  actions.emplace_back(ResumeLease{v.id, s.pids});
}

// A suspend under way whose bytes left the GPU: the lease is suspended now.
void Admission::settle_suspends(const Now& now, std::vector<Action>& actions) {
  for (uint64_t id : suspended_) {
    Lease& v = leases_.at(id);
    if (!v.suspension || v.suspension->step != LeaseSuspension::Step::verifying ||
        v.held >= kWorthUnloading)
      continue;
    LeaseSuspension& s = *v.suspension;
    s.step = LeaseSuspension::Step::suspended;
    s.at = now.mono;
    v.state = LeaseState::suspended;
    Duration took = s.took;
    if (took.count() > 0 && s.bytes > 0)
      copy_bytes_per_s_ = static_cast<double>(s.bytes) / std::chrono::duration<double>(took).count();
    actions.emplace_back(lease_event(
        now, "lease.suspended", v.id, v.gpu, v.owner_name(),
        fmt::format("lease #{} ({}) suspended for {}: {} of GPU {} moved to host RAM in {}", v.id,
                    v.owner_name(), s.for_whom, format_size(s.bytes), v.gpu.value_or(0),
                    suspend_seconds_text(took))));
    actions.emplace_back(LeaseChanged{v});
  }
}

// A suspend the utility called done whose bytes stayed on the GPU: put back, never tried again.
void Admission::verify_suspends(const Now& now, std::vector<Action>& actions) {
  for (uint64_t id : suspended_) {
    Lease& v = leases_.at(id);
    if (!v.suspension || v.suspension->step != LeaseSuspension::Step::verifying ||
        now.mono - v.suspension->told_at < kSuspendVerifyWindow)
      continue;
    v.suspend_refused = fmt::format("suspended, but {} stayed on GPU {}", format_size(v.held),
                                    v.gpu.value_or(0));
    v.suspension->step = LeaseSuspension::Step::resuming;
    actions.emplace_back(lease_event(
        now, "lease.suspend_ineffective", v.id, v.gpu, v.owner_name(),
        fmt::format("lease #{} ({}): {} within {} of the suspend; resuming it", v.id,
                    v.owner_name(), v.suspend_refused, format_duration(kSuspendVerifyWindow))));
    actions.emplace_back(ResumeLease{v.id, v.suspension->pids});
  }
}

std::optional<MonoTime> Admission::suspend_deadline() const {
  std::optional<MonoTime> out;
  for (uint64_t id : suspended_) {
    const Lease& v = leases_.at(id);
    if (!v.suspension) continue;
    std::optional<MonoTime> t;
    if (v.suspension->step == LeaseSuspension::Step::verifying)
      t = v.suspension->told_at + kSuspendVerifyWindow;
    else if (v.suspension->step == LeaseSuspension::Step::suspended)
      t = v.suspension->retry_at;
    if (t && (!out || *t < *out)) out = t;
  }
  return out;
}

std::map<unsigned, std::pair<int, uint64_t>> Admission::resume_suspended(
    std::map<unsigned, Bytes>& free, const World& world, const Now& now,
    std::vector<Action>& actions, Intents& intents) {
  std::vector<Lease*> waiting;
  for (uint64_t id : suspended_) {
    Lease& v = leases_.at(id);
    if (v.suspension && v.suspension->step == LeaseSuspension::Step::suspended && v.gpu)
      waiting.push_back(&v);
  }
  std::sort(waiting.begin(), waiting.end(), [](const Lease* a, const Lease* b) {
    return queue_key(*a) < queue_key(*b);  // priority, then admission order
  });
  // Room that queued work outranking `v` wants on `gpu` (what it was suspended for, say).
  auto wanted_by_higher = [&](const Lease& v, unsigned gpu) {
    Bytes out = 0;
    for (const auto& key : queue_) {
      const Lease& q = leases_.at(std::get<2>(key));
      if (q.request.prewarm || (q.request.gpu && *q.request.gpu != gpu)) continue;
      if (q.request.start || q.request.wake || q.request.priority > v.request.priority)
        out += q.request.vram;
    }
    return out;
  };
  std::map<unsigned, std::pair<int, uint64_t>> lines;
  for (Lease* v : waiting) {
    unsigned gpu = *v->gpu;
    LeaseSuspension& s = *v->suspension;
    auto room = free.find(gpu);
    bool retry_due = !s.retry_at || now.mono >= *s.retry_at;
    Bytes wanted = wanted_by_higher(*v, gpu);
    if (!lines.count(gpu) && retry_due && room != free.end() && room->second >= s.bytes + wanted) {
      room->second -= s.bytes;
      s.step = LeaseSuspension::Step::resuming;
      s.retry_at.reset();
      actions.emplace_back(lease_event(
          now, "lease.resuming", v->id, v->gpu, v->owner_name(),
          fmt::format("resuming lease #{} ({}): {} back onto GPU {}", v->id, v->owner_name(),
                      format_size(s.bytes), gpu)));
      actions.emplace_back(ResumeLease{v->id, s.pids});
      continue;
    }
    // Its room held by idle services: they are unloaded for it, as for a queued lease of its
    // priority (never another suspend). Nothing outranking it may want that room.
    bool evicting = false;
    for (const auto& [svc, for_lease] : evicting_for_) evicting = evicting || for_lease == v->id;
    if (!lines.count(gpu) && wanted == 0 && !evicting && room != free.end()) {
      // As soon as min_idle allows: waiting longer (5 min more was tried) held the jobs queued
      // behind it longer and saved few suspends (bench/RESULTS.md, "suspend").
      EvictionPlan plan = plan_evictions(*v, {gpu}, free, {}, world, now.mono, false);
      if (plan.feasible)
        for (const auto& svc : plan.evict) {
          evicting_for_[svc] = v->id;
          intents.push_back(UnloadIntent{svc, UnloadReason::eviction, v->id});
        }
    }
    if (!lines.count(gpu)) lines[gpu] = {v->request.priority, v->id};
  }
  return lines;
}

}  // namespace vramd
