#include "core/admission.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/eviction.h"
#include "core/gpu_select.h"
#include "core/service_policy.h"
#include "core/supervision.h"
#include "core/wake.h"

namespace vramd {

namespace {

// Names a service made to give way for a lease (events and the wake's report say who).
void note_evicted(Lease& l, const std::string& service) {
  if (std::find(l.evicted.begin(), l.evicted.end(), service) == l.evicted.end())
    l.evicted.push_back(service);
}

constexpr Bytes kOveruseTolerance = 256 * MiB;  // a holder may exceed its lease by this much
constexpr size_t kEndedKept = 256;              // ended leases kept for queries
constexpr Duration kDeadlineWalk = std::chrono::seconds(1);  // lease deadlines are seconds apart

std::string gpu_text(const std::optional<unsigned>& gpu) {
  return gpu ? fmt::format("GPU {}", *gpu) : "any GPU";
}

}  // namespace

Admission::Admission(const Config& config) : config_(config) {}

std::string Admission::group_of(const LeaseRequest& r) const {
  if (!r.group.empty()) return r.group;
  if (const ServiceConfig* s = config_.find_service(r.service)) return s->group;
  return "";
}

Bytes Admission::budget(const GpuStatus& g) const {
  Bytes promised = 0;
  for (uint64_t id : granted_) {  // few; the queue may hold thousands
    const Lease& l = leases_.at(id);
    if (l.gpu != g.sample.index) continue;
    if (l.suspension) {  // suspended: its room is others' until it is resumed
      if (l.suspension->step == LeaseSuspension::Step::resuming && l.suspension->bytes > l.held)
        promised += l.suspension->bytes - l.held;
      continue;
    }
    if (l.request.vram > l.held) promised += l.request.vram - l.held;
  }
  Bytes taken = g.sample.used + config_.gpu.reserve + promised;
  return g.sample.total > taken ? g.sample.total - taken : 0;
}

std::optional<Bytes> Admission::ram_available(std::optional<Bytes> mem_available) const {
  if (!mem_available) return std::nullopt;
  Bytes promised = 0;
  for (uint64_t id : granted_)
    if (const Lease& l = leases_.at(id); l.request.ram) promised += *l.request.ram;
  // A suspend under way: its bytes are on their way into host RAM.
  for (uint64_t id : suspended_)
    if (const Lease& l = leases_.at(id);
        l.suspension && (l.suspension->step == LeaseSuspension::Step::suspending ||
                         l.suspension->step == LeaseSuspension::Step::verifying))
      promised += l.suspension->bytes;
  return *mem_available > promised ? *mem_available - promised : 0;
}

std::vector<Lease> Admission::leases() const {
  std::vector<Lease> out;
  for (const auto& key : queue_) out.push_back(leases_.at(std::get<2>(key)));
  for (const auto& key : cluster_queue_) out.push_back(leases_.at(std::get<2>(key)));
  for (uint64_t id : granted_) out.push_back(leases_.at(id));
  return out;
}

const Lease* Admission::find(uint64_t id) const {
  if (auto it = leases_.find(id); it != leases_.end()) return &it->second;
  for (auto l = ended_.rbegin(); l != ended_.rend(); ++l)  // the newest word on it
    if (l->id == id) return &*l;
  return nullptr;
}

std::optional<size_t> Admission::queue_position(uint64_t id) const {
  auto it = leases_.find(id);
  if (it == leases_.end() || it->second.state != LeaseState::queued) return std::nullopt;
  const Lease& me = it->second;
  if (me.request.cluster) return std::nullopt;  // its place is the shared queue's
  size_t ahead = 0;
  for (const auto& key : queue_) {
    if (std::get<2>(key) == id) break;
    const Lease& other = leases_.at(std::get<2>(key));
    // Leases for another GPU are not in the way; `any` ones may be.
    if (!me.request.gpu || !other.request.gpu || other.request.gpu == me.request.gpu) ++ahead;
  }
  return ahead;
}

std::vector<std::tuple<uint64_t, int, uint64_t>> Admission::holders() const {
  std::vector<std::tuple<uint64_t, int, uint64_t>> out;
  for (const auto& [id, l] : leases_)
    if (l.request.pid) out.emplace_back(id, *l.request.pid, l.request.pid_start_ticks);
  return out;
}

std::vector<std::pair<std::string, int>> Admission::granted_holder_pids() const {
  std::vector<std::pair<std::string, int>> out;
  for (uint64_t id : granted_)  // a queued holder's memory is its own until granted
    if (const Lease& l = leases_.at(id); l.request.pid)
      out.emplace_back(l.owner_name(), *l.request.pid);
  return out;
}

std::set<std::string> Admission::services_in_use() const {
  std::set<std::string> out;
  for (uint64_t id : granted_)
    if (const Lease& l = leases_.at(id); !l.request.service.empty()) out.insert(l.request.service);
  return out;
}

std::optional<MonoTime> Admission::next_deadline() const {
  std::optional<MonoTime> out;
  auto earliest = [&](MonoTime t) {
    if (!out || t < *out) out = t;
  };
  for (const auto& [id, l] : leases_) {
    if (!l.request.pid && !l.request.start && !l.request.wake)
      earliest(l.last_heartbeat + config_.daemon.lease_heartbeat + Duration(1));
    if (l.state == LeaseState::queued && l.request.wait_timeout)
      earliest(l.requested_at + *l.request.wait_timeout);
  }
  // Deadlines are walked at most once a second.
  if (out && last_deadline_check_ && *out < *last_deadline_check_ + kDeadlineWalk)
    out = *last_deadline_check_ + kDeadlineWalk;
  // The fence is not: it is the margin that keeps a lease from being held twice.
  if (auto fence = fence_due(); fence && (!out || *fence < *out)) out = *fence;
  if (auto s = suspend_deadline(); s && (!out || *s < *out)) out = *s;
  return out;
}

void Admission::on_requested(const LeaseRequested& e, const Now& now,
                             std::vector<Action>& actions) {
  if (leases_.count(e.id) || e.id == 0) return;  // ids never repeat
  next_id_ = align_id(std::max(next_id_, e.id + 1));
  LeaseRequest request = e.request;
  request.start = false;  // only vramd makes start leases and wake claims
  request.wake = false;
  queue(e.id, std::move(request), now, actions);
}

uint64_t Admission::queue_wake(LeaseRequest request, const Now& now, std::vector<Action>& actions) {
  uint64_t id = next_id_;
  next_id_ = align_id(next_id_ + 1);
  request.wake = true;
  request.start = false;
  request.cluster = false;  // for a service of this host
  queue(id, std::move(request), now, actions);
  return id;
}

uint64_t Admission::queue_start(LeaseRequest request, const Now& now,
                                std::vector<Action>& actions) {
  uint64_t id = next_id_;
  next_id_ = align_id(next_id_ + 1);
  request.start = true;
  request.cluster = false;  // for a service of this host
  queue(id, std::move(request), now, actions);
  return id;
}

void Admission::queue(uint64_t id, LeaseRequest request, const Now& now,
                      std::vector<Action>& actions) {
  Lease l;
  l.id = id;
  l.seq = next_seq_++;
  l.request = std::move(request);
  l.requested_at = now.mono;
  l.last_heartbeat = now.mono;
  l.reason.gpu = l.request.gpu;
  l.reason.needs = l.request.vram;
  l.reason.text = fmt::format("needs {} on {}; not yet considered", format_size(l.request.vram),
                              gpu_text(l.request.gpu));
  if (l.request.cluster) {
    cluster_queue_.insert(queue_key(l));
  } else {
    queue_.insert(queue_key(l));
    ++queued_for_[l.request.gpu];
  }
  actions.emplace_back(lease_event(now, "lease.queued", l.id, l.request.gpu, l.owner_name(),
                               fmt::format("lease #{} ({}) asks for {} on {}", l.id, l.owner_name(),
                                           format_size(l.request.vram), gpu_text(l.request.gpu))));
  actions.emplace_back(LeaseChanged{l});
  leases_.emplace(l.id, std::move(l));
}

void Admission::on_released(const LeaseReleased& e, const Now& now, std::vector<Action>& actions) {
  auto it = leases_.find(e.id);
  if (it == leases_.end()) return;
  it->second.exit_status = e.exit_status;
  bool granted = holds_grant(it->second.state);
  end_as(e.id, granted ? LeaseState::released : LeaseState::cancelled,
         granted ? "released by its holder" : "cancelled while queued", now, actions);
}

void Admission::on_heartbeat(const LeaseHeartbeat& e, const Now& now) {
  if (auto it = leases_.find(e.id); it != leases_.end()) it->second.last_heartbeat = now.mono;
}

void Admission::on_holder_exited(const HolderExited& e, const Now& now,
                                 std::vector<Action>& actions) {
  auto it = leases_.find(e.id);
  if (it == leases_.end()) return;
  end_as(e.id, LeaseState::expired,
         fmt::format("holder pid {} exited", it->second.request.pid.value_or(0)), now, actions);
}

void Admission::end(uint64_t id, const std::string& why, const Now& now,
                    std::vector<Action>& actions) {
  auto it = leases_.find(id);
  if (it == leases_.end()) return;
  bool granted = holds_grant(it->second.state);
  end_as(id, granted ? LeaseState::released : LeaseState::cancelled, why, now, actions);
}

void Admission::restore(std::vector<Lease> kept, const std::vector<uint64_t>& alive, const Now& now,
                        uint64_t first_free_id, std::vector<Action>& actions) {
  next_id_ = std::max(next_id_, first_free_id);
  for (Lease& l : kept) {
    next_id_ = std::max(next_id_, l.id + 1);
    last_token_ = std::max(last_token_, l.token);
    if (!is_active(l.state) || leases_.count(l.id)) continue;
    next_seq_ = std::max(next_seq_, l.seq + 1);
    l.last_heartbeat = now.mono;  // clients get one heartbeat period to come back
    l.held = 0;
    uint64_t id = l.id;
    bool holder_alive = !l.request.pid || std::find(alive.begin(), alive.end(), id) != alive.end();
    if (l.state == LeaseState::queued && l.request.cluster) {
      cluster_queue_.insert(queue_key(l));
    } else if (l.state == LeaseState::queued) {
      queue_.insert(queue_key(l));
      ++queued_for_[l.request.gpu];
    } else {
      granted_.insert(id);
      // Suspended before the restart: it waits for its room as before, once the utility says
      // its processes are still checkpointed (the store may be behind them: a resume that ended
      // as vramd stopped). One caught mid-suspend is put back to running (a resume of a process
      // that runs already does nothing).
      if (l.suspension) {
        suspended_.insert(id);
        if (l.state == LeaseState::suspended) {
          l.suspension->step = LeaseSuspension::Step::suspended;
          if (!l.suspension->at) l.suspension->at = now.mono;
          if (holder_alive) actions.emplace_back(CheckSuspension{id, "", l.suspension->pids});
        } else {
          l.suspension->step = LeaseSuspension::Step::resuming;
          actions.emplace_back(ResumeLease{id, l.suspension->pids});
        }
      }
    }
    bool start = l.request.start, wake = l.request.wake;
    bool was_granted = holds_grant(l.state);
    leases_.emplace(id, std::move(l));
    if (wake)  // the request it held room for did not survive the restart of vramd
      end_as(id, was_granted ? LeaseState::released : LeaseState::cancelled, "vramd restarted",
             now, actions);
    else if (start)  // the start it was for did not survive the restart of vramd
      end_as(id, was_granted ? LeaseState::released : LeaseState::cancelled,
             was_granted ? "vramd restarted"
                         : "vramd restarted before the start was admitted; start it again",
             now, actions);
    else if (!holder_alive)
      end_as(id, LeaseState::expired, "holder exited while vramd was down", now, actions);
  }
  next_id_ = align_id(next_id_);
}

void Admission::end_as(uint64_t id, LeaseState state, const std::string& why, const Now& now,
                       std::vector<Action>& actions) {
  auto it = leases_.find(id);
  if (it == leases_.end()) return;
  Lease l = std::move(it->second);
  leases_.erase(it);
  if (queue_.erase(queue_key(l)) && --queued_for_[l.request.gpu] == 0)
    queued_for_.erase(l.request.gpu);
  cluster_queue_.erase(queue_key(l));
  granted_.erase(l.id);
  suspended_.erase(l.id);
  l.state = state;
  l.ended_at = now.mono;
  l.end_reason = why;
  std::string message =
      l.granted_at
          ? fmt::format("lease #{} ({}) {}: {} on GPU {} for {}, peak {}", l.id, l.owner_name(),
                        to_string(state), format_size(l.request.vram), l.gpu.value_or(0),
                        format_age(now.mono - *l.granted_at), format_size(l.peak_vram))
          : fmt::format("lease #{} ({}) {} after waiting {}: {}", l.id, l.owner_name(),
                        to_string(state), format_age(now.mono - l.requested_at), why);
  if (state != LeaseState::released && state != LeaseState::cancelled)
    message += fmt::format(" ({})", why);
  actions.emplace_back(
      lease_event(now, fmt::format("lease.{}", to_string(state)), l.id, l.gpu, l.owner_name(), message));
  actions.emplace_back(LeaseChanged{l});
  ended_.push_back(std::move(l));
  if (ended_.size() > kEndedKept) ended_.pop_front();
}

void Admission::check_deadlines(const Now& now, std::vector<Action>& actions) {
  check_fence(now, actions);
  verify_suspends(now, actions);
  if (last_deadline_check_ && now.mono - *last_deadline_check_ < kDeadlineWalk) return;
  last_deadline_check_ = now.mono;
  std::vector<std::pair<uint64_t, std::pair<LeaseState, std::string>>> ending;
  // A shared lease queued here is this host's to keep only while it is in touch with the store:
  // cut off for half of host_timeout, another host may take its queue over (and hear the
  // heartbeats): its deadlines wait for the claim round that says whose it is.
  const bool in_touch_now = in_touch(now.mono);
  for (const auto& [id, l] : leases_) {
    if (l.request.cluster && l.state == LeaseState::queued && !in_touch_now) continue;
    if (!l.request.pid && !l.request.start && !l.request.wake &&
        now.mono - l.last_heartbeat > config_.daemon.lease_heartbeat)
      ending.push_back(
          {id,
           {LeaseState::expired,
            fmt::format("no heartbeat for {}", format_age(now.mono - l.last_heartbeat))}});
    else if (l.state == LeaseState::queued && l.request.wait_timeout &&
             now.mono - l.requested_at >= *l.request.wait_timeout) {
      // A lease far down the queue is not looked at on every pass: it waited behind the head.
      std::string why = l.reason.text;
      auto head = heads_.find(l.request.gpu.value_or(0));
      if (!l.reason.considered && head != heads_.end() && head->second != id)
        why = fmt::format("needs {} on GPU {}; queued behind lease #{}",
                          format_size(l.request.vram), head->first, head->second);
      ending.push_back(
          {id,
           {LeaseState::timed_out, fmt::format("not granted within {}; {}",
                                               format_duration(*l.request.wait_timeout), why)}});
    }
  }
  for (const auto& [id, what] : ending) end_as(id, what.first, what.second, now, actions);
}

void Admission::update_holdings(const World& world, const Now& now, std::vector<Action>& actions) {
  for (uint64_t id : granted_) {
    Lease& l = leases_.at(id);
    if (!l.gpu) continue;
    Owner me{OwnerKind::lease, l.owner_name()};
    Bytes held = 0;
    for (const auto& g : world.ledger.status().gpus) {
      if (g.sample.index != *l.gpu) continue;
      for (const auto& h : g.holdings)
        if (h.owner == me) held += h.bytes;
    }
    // A lease for a service covers what that service holds: its work runs there.
    if (!l.request.service.empty()) held += world.services.bytes_on(l.request.service, *l.gpu);
    l.held = held;
    l.peak_vram = std::max(l.peak_vram, held);
    if (!l.overuse_reported && held > l.request.vram + kOveruseTolerance) {
      l.overuse_reported = true;
      actions.emplace_back(lease_event(now, "lease.overuse", l.id, l.gpu, l.owner_name(),
                                      fmt::format("job {} uses {}, leased {}", l.owner_name(),
                                                  format_size(held), format_size(l.request.vram))));
    }
  }
  settle_suspends(now, actions);
}

Bytes Admission::needs_on(const Lease& l, unsigned gpu, const World& world) const {
  // A lease for a service counts what that service holds already.
  Bytes own = l.request.service.empty() ? 0 : world.services.bytes_on(l.request.service, gpu);
  return l.request.vram > own ? l.request.vram - own : Bytes{0};
}

Admission::EvictionPlan Admission::plan_evictions(const Lease& l,
                                                  const std::vector<unsigned>& choices,
                                                  const std::map<unsigned, Bytes>& free,
                                                  const std::vector<std::string>& group_members,
                                                  const World& world, MonoTime now,
                                                  bool may_suspend) const {
  // On each GPU it may take, the cheapest set of idle services that frees what is missing
  // (beyond what unloads under way will free); the cheapest feasible plan wins, else the GPU
  // with the most free.
  struct GpuPlan {
    unsigned gpu = 0;
    std::vector<EvictionCandidate> candidates;
    std::optional<std::vector<size_t>> pick;
    int64_t cost = 0;
  };
  std::optional<GpuPlan> best;
  std::set<std::string> in_use = services_in_use();
  for (unsigned idx : choices) {
    GpuPlan p;
    p.gpu = idx;
    Bytes need = needs_on(l, idx, world), have = free.at(idx);
    Bytes shortfall = need > have ? need - have : 0;
    Bytes coming = 0;  // what unloads under way for leases will free there
    for (const auto& [svc, for_lease] : evicting_for_) coming += world.services.bytes_on(svc, idx);
    coming += suspending_on(idx);
    Bytes more = shortfall > coming ? shortfall - coming : 0;
    for (const auto& svc : config_.services) {
      const ServiceStatus& st = world.services.at(svc.name);
      if (evicting_for_.count(svc.name) || !evictable(st, svc, now, world.services.can_free(st)))
        continue;
      if (svc.name == l.request.service || in_use.count(svc.name)) continue;  // in use
      if (std::find(group_members.begin(), group_members.end(), svc.name) != group_members.end())
        continue;
      Bytes b = world.services.bytes_on(svc.name, idx);
      if (b >= kWorthUnloading)
        p.candidates.push_back(
            {svc.name, b,
             eviction_cost(st, svc, world.services.ram_room(), world.services.may_suspend(st)),
             *idle_since(st)});
    }
    // Preemptible leases: suspended when that frees what idle services cannot, or costs less.
    size_t services_only = p.candidates.size();
    if (may_suspend) suspend_candidates(l, idx, world, p.candidates);
    p.pick = choose_eviction(p.candidates, more);
    if (p.pick && p.candidates.size() > services_only) {
      // Host RAM takes each alone; all the picked together, or the services alone.
      Bytes to_ram = 0;
      for (size_t i : *p.pick)
        if (p.candidates[i].lease) to_ram += p.candidates[i].bytes;
      std::optional<Bytes> room = suspend_ram_room(world);
      if (room && to_ram > *room) {
        p.candidates.resize(services_only);
        p.pick = choose_eviction(p.candidates, more);
      }
    }
    if (p.pick)
      for (size_t i : *p.pick) p.cost += p.candidates[i].reload_cost.count();
    bool better = !best || (p.pick && !best->pick) ||
                  (p.pick && best->pick && p.cost < best->cost) ||
                  (!p.pick && !best->pick && free.at(idx) > free.at(best->gpu));
    if (better) best = std::move(p);
  }
  EvictionPlan out;
  out.gpu = best->gpu;
  out.feasible = best->pick.has_value();
  if (best->pick)
    for (size_t i : *best->pick) {
      const EvictionCandidate& c = best->candidates[i];
      if (c.lease)
        out.suspend.push_back(c.lease);
      else
        out.evict.push_back(c.service);
    }
  return out;
}

// Evictions whose unload has its verdict are over, this host's and the shared queue's.
void Admission::end_settled_evictions(const World& world) {
  for (auto it = evicting_for_.begin(); it != evicting_for_.end();) {
    const ServiceStatus* s = world.services.find(it->first);
    if (!s || s->state != ServiceState::unloading)
      it = evicting_for_.erase(it);
    else
      ++it;
  }
  prune_cluster_evictions();
}

void Admission::admit(const World& world, const Now& now, std::vector<Action>& actions,
                      Intents& intents) {
  end_settled_evictions(world);
  const StatusSnapshot& status = world.ledger.status();
  if ((queue_.empty() && suspended_.empty()) || !status.sampled || claiming_)
    return;  // a claim has the room now

  std::map<unsigned, Bytes> free;
  std::map<unsigned, const GpuStatus*> gpus;
  for (const auto& g : status.gpus) {
    if (!admits_leases(g.sample)) continue;  // lost, or a MIG card (its instances admit)
    free[g.sample.index] = budget(g);
    gpus[g.sample.index] = &g;
  }
  // Suspended leases first, in priority order: where one waits for its room, nothing new of no
  // higher priority is granted before it (a start and a request's wake may still suspend it).
  std::map<unsigned, std::pair<int, uint64_t>> resume_lines = resume_suspended(free, world, now, actions, intents);
  if (queue_.empty()) return;
  std::optional<Bytes> ram = ram_available(world.ledger.mem_available());
  std::set<std::string> groups_granted;
  for (uint64_t id : granted_)
    if (auto g = group_of(leases_.at(id).request); !g.empty()) groups_granted.insert(g);
  // GPUs someone waits for: once each has its head, the rest of the queue waits behind them.
  size_t gpus_wanted = 0;
  if (queued_for_.count(std::nullopt)) {
    gpus_wanted = gpus.size();
  } else {
    for (const auto& [gpu, n] : queued_for_)
      if (gpu && gpus.count(*gpu)) ++gpus_wanted;
  }

  std::map<unsigned, uint64_t>& head = heads_;  // GPU -> the lease that holds the line there
  head.clear();
  std::vector<uint64_t> granted;
  std::vector<uint64_t> unfit_prewarms;
  for (const auto& key : queue_) {
    if (head.size() >= gpus_wanted) break;  // every GPU someone waits for has its head
    uint64_t id = std::get<2>(key);
    Lease& l = leases_.at(id);
    std::vector<unsigned> choices;
    if (l.request.gpu) {
      if (gpus.count(*l.request.gpu) && !head.count(*l.request.gpu))
        choices.push_back(*l.request.gpu);
    } else {
      for (const auto& [idx, g] : gpus)
        if (!head.count(idx)) choices.push_back(idx);
    }
    std::optional<std::pair<unsigned, uint64_t>> behind_suspended;
    if (!l.request.start && !l.request.wake)
      std::erase_if(choices, [&](unsigned idx) {
        auto line = resume_lines.find(idx);
        if (line == resume_lines.end() || l.request.priority > line->second.first) return false;
        behind_suspended = {idx, line->second.second};
        return true;
      });
    if (choices.empty() && behind_suspended) {
      l.reason = LeaseReason{};
      l.reason.gpu = behind_suspended->first;
      l.reason.needs = l.request.vram;
      l.reason.considered = true;
      l.reason.text = fmt::format("needs {} on GPU {}; queued behind suspended lease #{}, which is "
                                  "resumed first",
                                  format_size(l.request.vram), behind_suspended->first,
                                  behind_suspended->second);
      continue;
    }
    if (choices.empty()) {  // behind another lease (or its GPU is not readable)
      unsigned g = l.request.gpu.value_or(head.empty() ? 0 : head.begin()->first);
      if (auto h = head.find(g); h != head.end() && l.reason.behind != h->second) {
        l.reason = LeaseReason{};
        l.reason.gpu = g;
        l.reason.needs = l.request.vram;
        l.reason.behind = h->second;
        l.reason.considered = true;
        l.reason.text = fmt::format("needs {} on GPU {}; queued behind lease #{}",
                                    format_size(l.request.vram), g, h->second);
      }
      continue;
    }
    auto need = [&](unsigned idx) { return needs_on(l, idx, world); };

    std::string group = group_of(l.request);
    // Exclusive group: the other members hold nothing while this lease runs.
    std::vector<std::string> group_members;
    if (!group.empty())
      for (const auto& svc : config_.services)
        if (svc.group == group && svc.name != l.request.service &&
            world.services.at(svc.name).bytes >= kWorthUnloading)
          group_members.push_back(svc.name);
    bool group_lease_running = !group.empty() && groups_granted.count(group);
    bool ram_short = l.request.ram && ram && *ram < *l.request.ram;
    // A RAM lease that does not fit: a shallow sleeper gives its host RAM back first.
    if (ram_short)
      intents.push_back(DeepenIntent{*l.request.ram - *ram,
                                     fmt::format("lease #{} ({}) needs {} of host RAM, {} free",
                                                 l.id, l.owner_name(),
                                                 format_size(*l.request.ram), format_size(*ram))});

    // Where it fits now: the tightest fit keeps the larger holes for larger work.
    std::optional<unsigned> fit;
    if (group_members.empty() && !group_lease_running && !ram_short)
      for (unsigned idx : choices)
        if (free[idx] >= need(idx) && (!fit || free[idx] < free[*fit])) fit = idx;
    if (fit) {
      l.state = LeaseState::granted;
      l.gpu = *fit;
      l.token = ++last_token_;
      l.granted_at = now.mono;
      l.reason = LeaseReason{};
      free[*fit] -= need(*fit);
      if (l.request.ram && ram) *ram -= std::min(*ram, *l.request.ram);
      if (!group.empty()) groups_granted.insert(group);
      granted.push_back(id);
      granted_.insert(id);
      actions.emplace_back(lease_event(
          now, "lease.granted", l.id, l.gpu, l.owner_name(),
          fmt::format("lease #{} ({}) granted {} on GPU {} after {}", l.id, l.owner_name(),
                      format_size(l.request.vram), *fit, format_age(now.mono - l.requested_at))));
      actions.emplace_back(LeaseChanged{l});
      if (l.request.start)
        intents.push_back(LaunchIntent{l.request.service, id});
      else if (l.request.wake)
        intents.push_back(WakeGrantedIntent{id});
      else if (!l.request.service.empty())
        intents.push_back(StartForLeaseIntent{l.request.service, id, l.owner_name()});
      continue;
    }

    // A prewarm takes only room nobody wants: it never waits, holds no line, evicts no one.
    if (l.request.prewarm) {
      unfit_prewarms.push_back(id);
      continue;
    }
    // It waits: where it means to go, and what to evict there (core/eviction.h).
    EvictionPlan plan = plan_evictions(l, choices, free, group_members, world, now.mono);
    // An `any` lease holds the line only where it means to go: the other GPUs go on admitting
    // their own leases, and on each pass it takes the first GPU where it fits.
    unsigned target = plan.gpu;
    head[target] = id;

    // Start the evictions: the plan's services, and the group's other members when idle.
    std::set<std::string> evict;
    if (plan.feasible && !group_lease_running && !ram_short)
      evict.insert(plan.evict.begin(), plan.evict.end());
    for (const auto& m : group_members) {
      const ServiceStatus& st = world.services.at(m);
      const ServiceConfig* cfg = config_.find_service(m);
      std::optional<ManagedState> ms = world.supervision.find(m);
      // Starting a member of an exclusive group stops the members vramd runs.
      if (l.request.start && ms && ms->pid && ms->state != ManagedPhase::stopping) {
        actions.emplace_back(make_event(
            now, "service.group_stop", std::nullopt, m,
            fmt::format("stopping {}: {} of group '{}' starts", m, l.request.service, group)));
        intents.push_back(CommandIntent{m, Command::stop});
        note_evicted(l, m);
        continue;
      }
      // A member in the way is unloaded once idle, whatever its min_idle: the group says so.
      if (!evicting_for_.count(m) && st.state == ServiceState::up && idle_since(st) &&
          !cfg->pinned && !(st.backoff_until && now.mono < *st.backoff_until))
        evict.insert(m);
    }
    for (const auto& svc : evict) {
      evicting_for_[svc] = id;
      intents.push_back(UnloadIntent{svc, UnloadReason::eviction, id});
      note_evicted(l, svc);
    }
    if (plan.feasible && !group_lease_running && !ram_short)
      for (uint64_t victim : plan.suspend) start_suspend(victim, l, world, now, actions);

    WaitContext c;
    c.lease = &l;
    c.gpu = target;
    c.free = free[target];
    c.group = group;
    c.group_lease_running = group_lease_running;
    if (ram_short) c.ram_short_of = *ram;
    c.group_members = group_members;
    c.evicting = evict;
    c.eviction_planned = plan.feasible;
    l.reason = wait_reason(c, world, now.mono);
  }
  for (uint64_t id : granted) {
    const Lease& l = leases_.at(id);
    queue_.erase(queue_key(l));
    if (--queued_for_[l.request.gpu] == 0) queued_for_.erase(l.request.gpu);
  }
  for (uint64_t id : unfit_prewarms)
    end_as(id, LeaseState::cancelled, "a prewarm takes only free room, and it did not fit", now,
           actions);
}

bool Admission::wants_room() const {
  if (!evicting_for_.empty() || !cluster_queue_.empty()) return true;
  for (const auto& key : queue_)
    if (!leases_.at(std::get<2>(key)).request.prewarm) return true;
  return false;
}

std::optional<Bytes> Admission::room_on(const World& world, unsigned gpu) const {
  for (const auto& g : world.ledger.status().gpus)
    if (g.sample.index == gpu && admits_leases(g.sample)) return budget(g);
  return std::nullopt;
}

uint64_t Admission::align_id(uint64_t at_least) const {
  if (id_stride_ <= 1) return at_least;
  uint64_t base = at_least - at_least % id_stride_ + id_offset_;
  return base >= at_least ? base : base + id_stride_;
}

void Admission::set_id_space(uint64_t stride, uint64_t offset) {
  id_stride_ = std::max<uint64_t>(stride, 1);
  id_offset_ = offset % id_stride_;
  next_id_ = align_id(next_id_);
}

std::vector<uint64_t> Admission::cluster_queued(size_t limit) const {
  std::vector<uint64_t> out;
  for (const auto& key : cluster_queue_) {
    if (out.size() >= limit) break;
    out.push_back(std::get<2>(key));
  }
  return out;
}

std::vector<uint64_t> Admission::cluster_granted() const {
  std::vector<uint64_t> out;
  for (uint64_t id : granted_)
    if (leases_.at(id).request.cluster) out.push_back(id);
  return out;
}

void Admission::prune_cluster_evictions() {
  for (auto it = cluster_evicting_.begin(); it != cluster_evicting_.end();) {
    bool under_way = false;
    for (const auto& svc : it->second.services)
      if (auto e = evicting_for_.find(svc); e != evicting_for_.end() && e->second == it->first)
        under_way = true;
    if (under_way)
      ++it;
    else
      it = cluster_evicting_.erase(it);
  }
}

ClaimContext Admission::claim_context(const World& world, const std::string& host,
                                     MonoTime now) {
  end_settled_evictions(world);
  ClaimContext ctx;
  ctx.host = host;
  ctx.at = now;
  ctx.patience = config_.daemon.host_timeout;
  ctx.evicting = cluster_evicting_;
  std::set<std::string> in_use = services_in_use();
  const StatusSnapshot& status = world.ledger.status();
  ctx.sampled = status.sampled;
  if (!in_touch(now))
    ctx.cut_off = store_contact_ ? fmt::format("cut off from the store for {}",
                                               format_age(now - *store_contact_))
                                 : "no heartbeat written to the store yet";
  ctx.ram = ram_available(world.ledger.mem_available());
  for (const auto& g : status.gpus) {
    if (!admits_leases(g.sample)) continue;
    if (!queue_.empty() && heads_.count(g.sample.index)) continue;  // a local lease is in line
    ClaimGpu c;
    c.index = g.sample.index;
    c.free = budget(g);
    c.total = g.sample.total;
    size_t shown = 0;
    std::vector<Holding> holdings = g.holdings;
    std::stable_sort(holdings.begin(), holdings.end(),
                     [](const Holding& a, const Holding& b) { return a.bytes > b.bytes; });
    for (const auto& h : holdings) {
      if (h.owner.kind == OwnerKind::baseline || h.bytes < kWorthUnloading || shown == 3) continue;
      std::string state = to_string(h.owner.kind);
      if (h.owner.kind == OwnerKind::service)
        state = blocker_state(world.services.at(h.owner.name),
                              world.config.find_service(h.owner.name), evicting(h.owner.name), now,
                              world.services.can_free(world.services.at(h.owner.name)));
      else if (h.owner.kind == OwnerKind::lease)
        state = "granted lease";
      c.holders += fmt::format("{}{} holds {}, {}", shown++ ? "; " : "", h.owner.name,
                               format_size(h.bytes), state);
    }
    // What may be unloaded here for a shared lease: as for this host's own (plan_evictions).
    for (const auto& svc : config_.services) {
      const ServiceStatus& st = world.services.at(svc.name);
      if (evicting_for_.count(svc.name) || in_use.count(svc.name) ||
          !evictable(st, svc, now, world.services.can_free(st)))
        continue;
      Bytes b = world.services.bytes_on(svc.name, c.index);
      if (b >= kWorthUnloading)
        c.evictable.push_back(
            {svc.name, b,
             eviction_cost(st, svc, world.services.ram_room(), world.services.may_suspend(st)),
             *idle_since(st)});
    }
    ctx.gpus.push_back(std::move(c));
  }
  claiming_ = true;
  return ctx;
}

void Admission::on_cluster_synced(const ClusterSynced& e, const World& world, const Now& now,
                                  std::vector<Action>& actions, Intents& intents) {
  if (e.answers_claim) claiming_ = false;
  if (!e.ok) return;
  // Room for shared leases: each service unloaded through ServicePolicy (its own API, the verdict
  // from the GPU's numbers) if it is still evictable now; the claim's next round grants the lease
  // where the memory went, or gives it back to the other hosts.
  std::set<std::string> in_use = services_in_use();
  for (const ClaimEviction& ev : e.evict) {
    ClaimEviction started{ev.lease, ev.gpu, {}};
    for (const auto& svc : ev.services) {
      const ServiceConfig* cfg = config_.find_service(svc);
      const ServiceStatus* st = world.services.find(svc);
      if (!cfg || !st || evicting_for_.count(svc) || in_use.count(svc) ||
          !evictable(*st, *cfg, now.mono, world.services.can_free(*st)))
        continue;  // busy since, or being unloaded already: never evicted
      evicting_for_[svc] = ev.lease;
      intents.push_back(UnloadIntent{svc, UnloadReason::eviction, ev.lease});
      started.services.push_back(svc);
    }
    if (started.services.empty()) continue;  // the store's mark is lifted by the next round
    const Lease* l = find(ev.lease);
    std::string owner = l ? l->owner_name() : fmt::format("#{}", ev.lease);
    actions.emplace_back(lease_event(
        now, "lease.evicting", ev.lease, ev.gpu, owner,
        fmt::format("unloading {} on GPU {} to make room for lease #{} of the shared queue",
                    fmt::join(started.services, ", "), ev.gpu, ev.lease)));
    cluster_evicting_[ev.lease] = std::move(started);
  }
  for (uint64_t id : e.unmarked) {
    const Lease* l = find(id);
    actions.emplace_back(lease_event(
        now, "lease.eviction_failed", id, std::nullopt, l ? l->owner_name() : fmt::format("#{}", id),
        fmt::format("unloading for lease #{} of the shared queue freed too little (see the "
                    "unload's verdict): back to the queue for every host",
                    id)));
  }
  // A claim asked in touch and answered after the fence fell due: this host cannot vouch for
  // what it claimed (check_fence below would give it up at once).
  const bool vouched = in_touch(now.mono);
  for (const Lease& c : e.claimed) {
    if (!c.gpu) continue;  // a claim names its GPU; a row without one is no grant
    auto it = leases_.find(c.id);
    Lease* l = nullptr;
    if (it != leases_.end()) {  // queued here: granted here
      if (it->second.state != LeaseState::queued) continue;
      if (!vouched && it->second.request.on_host_lost == OnHostLost::requeue) {
        // Its holder, still waiting, is never told of a grant this host gives up in the same
        // breath: it stays queued here, and the next round queues its row again (fenced). If
        // another host took this host's queue meanwhile, that round says so (moved).
        Lease& q = it->second;
        fenced_.insert(q.id);
        q.reason.text = fmt::format("needs {}; claimed on GPU {} after this host was cut off from "
                                    "the store for {}: given back to the shared queue",
                                    format_size(q.request.vram), c.gpu.value_or(0),
                                    store_contact_ ? format_age(now.mono - *store_contact_)
                                                   : std::string("ever"));
        actions.emplace_back(lease_event(
            now, "lease.claim_given_up", q.id, c.gpu, q.owner_name(),
            fmt::format("lease #{} ({}): {}", q.id, q.owner_name(), q.reason.text)));
        continue;
      }
      cluster_queue_.erase(queue_key(it->second));
      l = &it->second;
      l->state = LeaseState::granted;
      l->gpu = c.gpu;
      l->token = c.token;
      l->granted_at = now.mono;
      l->reason = LeaseReason{};
    } else {
      Lease copy = c;
      copy.state = LeaseState::granted;
      copy.granted_at = now.mono;
      copy.last_heartbeat = now.mono;  // its client has one heartbeat period to find it here
      copy.held = 0;
      l = &leases_.emplace(copy.id, std::move(copy)).first->second;
    }
    granted_.insert(l->id);
    actions.emplace_back(lease_event(
        now, "lease.granted", l->id, l->gpu, l->owner_name(),
        fmt::format("lease #{} ({}) granted {} on GPU {} after {} (claimed from the shared queue)",
                    l->id, l->owner_name(), format_size(l->request.vram), l->gpu.value_or(0),
                    format_age(now.mono - l->requested_at))));
  }
  for (const MovedLease& m : e.moved) {
    auto it = leases_.find(m.id);
    if (it == leases_.end() || it->second.state != LeaseState::queued) continue;
    Lease l = std::move(it->second);
    leases_.erase(it);
    cluster_queue_.erase(queue_key(l));
    l.elsewhere = m.host;
    if (m.kept_there) {
      actions.emplace_back(lease_event(
          now, "lease.moved", l.id, std::nullopt, l.owner_name(),
          fmt::format("lease #{} ({}) is kept queued by host {} now (it took this host's queue "
                      "while this one was cut off)",
                      l.id, l.owner_name(), m.host)));
      ended_.push_back(std::move(l));
      if (ended_.size() > kEndedKept) ended_.pop_front();
      continue;
    }
    l.state = m.ended ? LeaseState::released : LeaseState::granted;
    l.gpu = m.gpu;
    l.granted_at = now.mono;
    l.reason = LeaseReason{};
    actions.emplace_back(lease_event(
        now, "lease.claimed", l.id, l.gpu, l.owner_name(),
        fmt::format("lease #{} ({}) was granted on host {}", l.id, l.owner_name(), m.host)));
    ended_.push_back(std::move(l));
    if (ended_.size() > kEndedKept) ended_.pop_front();
  }
  for (uint64_t id : e.lost) {
    auto it = leases_.find(id);
    if (it == leases_.end() || it->second.state != LeaseState::granted) continue;
    Lease l = std::move(it->second);
    leases_.erase(it);
    granted_.erase(id);
    l.state = LeaseState::lost;
    l.ended_at = now.mono;
    l.end_reason = "re-queued by another host while this one was taken for lost";
    actions.emplace_back(lease_event(
        now, "lease.dropped", l.id, l.gpu, l.owner_name(),
        fmt::format("lease #{} ({}) dropped here: {}", l.id, l.owner_name(), l.end_reason)));
    ended_.push_back(std::move(l));
    if (ended_.size() > kEndedKept) ended_.pop_front();
  }
  for (const auto& [id, why] : e.releases) {
    auto it = leases_.find(id);
    if (it == leases_.end()) continue;
    bool granted = it->second.state == LeaseState::granted;
    end_as(id, granted ? LeaseState::released : LeaseState::cancelled, why, now, actions);
  }
  for (const auto& [id, text] : e.reasons) {
    auto it = leases_.find(id);
    if (it == leases_.end() || it->second.state != LeaseState::queued) continue;
    it->second.reason.text = text;
    it->second.reason.considered = true;
  }
  // A lease queued again in the store and kept here from now on (its heartbeats, its timeout).
  auto keep_requeued = [&](const Lease& r, const std::string& why) {
    actions.emplace_back(lease_event(now, "lease.requeued", r.id, std::nullopt, r.owner_name(),
                                    fmt::format("lease #{} ({}) re-queued: {}", r.id,
                                                r.owner_name(), why)));
    if (auto it = leases_.find(r.id); it != leases_.end()) {
      // Still queued here (a claim given up before its holder heard of it): waits as before.
      if (it->second.state == LeaseState::queued) cluster_queue_.insert(queue_key(it->second));
      return;
    }
    Lease l = r;
    l.last_heartbeat = now.mono;
    cluster_queue_.insert(queue_key(l));
    leases_.emplace(l.id, std::move(l));
  };
  for (const LostHost& h : e.lost_hosts) {
    actions.emplace_back(
        make_event(now, "host.lost", std::nullopt, h.host,
                   fmt::format("host {} lost (no heartbeat): {} of its leases re-queued, {} ended",
                               h.host, h.requeued.size(), h.ended.size() + h.released.size())));
    for (const Lease& r : h.requeued) keep_requeued(r, fmt::format("host {} was lost", h.host));
    for (const Lease& r : h.ended)
      actions.emplace_back(
          lease_event(now, "lease.host_lost", r.id, std::nullopt, r.owner_name(),
                     fmt::format("lease #{} ({}) ended: {}", r.id, r.owner_name(), r.end_reason)));
    for (const Lease& r : h.released)
      actions.emplace_back(
          lease_event(now, "lease.released", r.id, std::nullopt, r.owner_name(),
                     fmt::format("lease #{} ({}) released: {}", r.id, r.owner_name(), r.end_reason)));
  }
  // Leases this host fenced, back in the store's queue: kept here, as a lost host's are kept by
  // the host that re-queues them. A fenced lease is never granted here again but through a claim.
  for (const Lease& r : e.requeued_here)
    keep_requeued(r, "this host gave it up while cut off from the store");
  // Fenced leases released meanwhile through another host's API: ended here, with their event
  // (the store's row goes with this write).
  for (const Lease& r : e.fence_released) {
    if (!fenced_.count(r.id) || leases_.count(r.id)) continue;
    Lease l = r;
    if (const Lease* mine = find(r.id)) {  // this host's copy (lost): its GPU, peak, times
      l = *mine;
      l.state = r.state;
      l.end_reason = r.end_reason;
    }
    l.ended_at = now.mono;
    actions.emplace_back(lease_event(
        now, "lease.released", l.id, l.gpu, l.owner_name(),
        l.granted_at
            ? fmt::format("lease #{} ({}) released: {} on GPU {} for {}, peak {} ({}; it was "
                          "given up while this host was cut off from the store)",
                          l.id, l.owner_name(), format_size(l.request.vram), l.gpu.value_or(0),
                          format_age(now.mono - *l.granted_at), format_size(l.peak_vram),
                          l.end_reason)
            : fmt::format("lease #{} ({}) released: {}", l.id, l.owner_name(), l.end_reason)));
    actions.emplace_back(LeaseChanged{l});
    ended_.push_back(std::move(l));
    if (ended_.size() > kEndedKept) ended_.pop_front();
  }
  for (uint64_t id : e.fence_done) fenced_.erase(id);
  // A claim answered after the fence fell due is given up at once.
  check_fence(now, actions);
}

void Admission::on_suspend_probed(const SuspendProbed& e, const Now& now,
                                  std::vector<Action>& actions) {
  suspend_ = e.offer;
  suspend_.probed = true;
  actions.emplace_back(make_event(
      now, suspend_.offered ? "suspend.offered" : "suspend.not_offered", std::nullopt,
      suspend_.tool,
      suspend_.offered
          ? fmt::format("suspend is offered: {}{} ({})", suspend_.tool,
                        suspend_.version.empty() ? "" : " " + suspend_.version,
                        suspend_.form == "toggle" ? "--toggle" : "--action")
          : suspend_.why));
}

void Admission::on_store_contact(const StoreContact& e) {
  if (!store_contact_ || e.sent > *store_contact_) store_contact_ = e.sent;
}

bool Admission::in_touch(MonoTime now) const {
  return store_contact_ && now < *store_contact_ + config_.daemon.host_timeout / 2;
}

std::optional<MonoTime> Admission::fence_due() const {
  for (uint64_t id : granted_) {
    const Lease& l = leases_.at(id);
    if (!l.request.cluster) continue;
    // Never in touch since the start: at once (MonoTime's epoch is before any now).
    return store_contact_ ? *store_contact_ + config_.daemon.host_timeout / 2 : MonoTime{};
  }
  return std::nullopt;
}

void Admission::check_fence(const Now& now, std::vector<Action>& actions) {
  std::optional<MonoTime> due = fence_due();
  if (!due || now.mono < *due) return;
  std::string cut =
      store_contact_
          ? fmt::format("cut off from the store for {} (a host holds a shared lease until half of "
                        "host_timeout {} past its last heartbeat the store took)",
                        format_age(now.mono - *store_contact_),
                        format_duration(config_.daemon.host_timeout))
          : std::string("no heartbeat written to the store since vramd started");
  std::vector<uint64_t> ids;
  for (uint64_t id : granted_)
    if (leases_.at(id).request.cluster) ids.push_back(id);
  for (uint64_t id : ids) {
    bool requeue = leases_.at(id).request.on_host_lost == OnHostLost::requeue;
    if (requeue) fenced_.insert(id);
    end_as(id, LeaseState::lost,
           cut + (requeue ? "; left for the store to re-queue (on_host_lost = requeue)"
                          : "; ended (on_host_lost = end)"),
           now, actions);
  }
}

LeaseReason wait_reason(const WaitContext& c, const World& world, MonoTime now) {
  const Lease& l = *c.lease;
  LeaseReason reason;
  reason.needs = l.request.vram;
  reason.gpu = c.gpu;
  reason.free = c.free;
  const GpuStatus* g = nullptr;
  for (const auto& x : world.ledger.status().gpus)
    if (x.sample.index == c.gpu) g = &x;
  std::vector<LeaseBlocker> blockers;
  for (const auto& h : g ? g->holdings : std::vector<Holding>{}) {
    if (h.owner.kind == OwnerKind::baseline || h.bytes < kWorthUnloading) continue;
    LeaseBlocker b;
    b.owner = h.owner.name;
    b.kind = to_string(h.owner.kind);
    b.bytes = h.bytes;
    if (h.owner.kind == OwnerKind::service) {
      const ServiceStatus& st = world.services.at(h.owner.name);
      b.evicting = world.admission.evicting(h.owner.name) || c.evicting.count(h.owner.name);
      b.state = blocker_state(st, world.config.find_service(h.owner.name), b.evicting, now,
                              world.services.can_free(st));
    } else if (h.owner.kind == OwnerKind::lease) {
      b.state = "granted lease";
      for (uint64_t id : world.admission.suspensions())
        if (const Lease* s = world.admission.find(id); s && s->owner_name() == h.owner.name)
          b.state = "preemptible: being suspended";
    } else if (h.owner.kind == OwnerKind::unknown) {
      b.state = "unknown owner";
      for (const auto& cand : h.candidates)
        b.candidates.push_back(process_owner_name(cand.pid, cand.name));
    } else {
      b.state = "not managed by vramd";
    }
    blockers.push_back(std::move(b));
  }
  std::stable_sort(blockers.begin(), blockers.end(),
                   [](const LeaseBlocker& a, const LeaseBlocker& b) { return a.bytes > b.bytes; });
  std::string text = fmt::format("needs {} on GPU {}; {} free", format_size(l.request.vram), c.gpu,
                                 format_size(c.free));
  if (c.group_lease_running)
    text += fmt::format("; another lease of group '{}' is running", c.group);
  if (c.ram_short_of)
    text += fmt::format("; needs {} host RAM, {} available", format_size(*l.request.ram),
                        format_size(*c.ram_short_of));
  size_t shown = 0;
  for (const auto& b : blockers) {
    if (shown++ == 4) {
      text += fmt::format("; {} more", blockers.size() - 4);
      break;
    }
    text += fmt::format("; {} holds {}, {}", b.owner, format_size(b.bytes), b.state);
    if (!b.candidates.empty()) {
      std::string list;
      for (const auto& x : b.candidates) list += (list.empty() ? "" : ", ") + x;
      text += fmt::format(" (candidates: {})", list);
    }
  }
  for (const auto& m : c.group_members) {
    const ServiceStatus& ms = world.services.at(m);
    std::optional<ManagedState> managed = world.supervision.find(m);
    if (managed && managed->pid)
      text += fmt::format("; {} (group '{}') must stop first: {}", m, c.group,
                          to_string(managed->state));
    else if (!c.evicting.count(m) && !world.admission.evicting(m))
      text += fmt::format("; {} (group '{}') must unload first: {}", m, c.group,
                          ms.busy.value_or(false) ? "busy" : to_string(ms.state));
  }
  if (!c.eviction_planned && !c.group_lease_running && !c.ram_short_of && c.group_members.empty())
    text += "; nothing idle enough to unload: waiting for memory to be released";
  reason.text = std::move(text);
  reason.blockers = std::move(blockers);
  reason.considered = true;
  return reason;
}

}  // namespace vramd
