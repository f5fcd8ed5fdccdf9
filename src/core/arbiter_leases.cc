// The Arbiter's lease policies: admission (priority, then FIFO, per GPU), the budget, eviction
// of idle services on demand, exclusive groups, reasons, and lease lifetimes. Part of class
// Arbiter (arbiter.h); no I/O.
#include <algorithm>

#include <fmt/format.h>

#include "core/arbiter.h"
#include "core/gpu_select.h"  // [issue 16: MIG]

namespace vramd {

namespace {

constexpr Bytes kWorthUnloading = 256 * MiB;   // less than this is not worth an eviction
constexpr Bytes kOveruseTolerance = 256 * MiB;  // a holder may exceed its lease by this much
constexpr Bytes kStableStep = 64 * MiB;         // a load has finished when it grows less
constexpr size_t kEndedKept = 256;              // ended leases kept for queries

std::string gpu_text(const std::optional<unsigned>& gpu) {
  return gpu ? fmt::format("GPU {}", *gpu) : "any GPU";
}

}  // namespace

std::string Arbiter::group_of(const LeaseRequest& r) const {
  if (!r.group.empty()) return r.group;
  if (const ServiceConfig* s = config_.find_service(r.service)) return s->group;
  return "";
}

Bytes Arbiter::budget(const GpuStatus& g) const {
  Bytes promised = 0;
  for (uint64_t id : granted_) {  // few; the queue may hold thousands
    const Lease& l = leases_.at(id);
    if (l.gpu == g.sample.index && l.request.vram > l.held) promised += l.request.vram - l.held;
  }
  Bytes taken = g.sample.used + config_.gpu.reserve + promised;
  return g.sample.total > taken ? g.sample.total - taken : 0;
}

std::optional<Bytes> Arbiter::ram_available() const {
  if (!mem_available_) return std::nullopt;
  Bytes promised = 0;
  for (uint64_t id : granted_)
    if (const Lease& l = leases_.at(id); l.request.ram) promised += *l.request.ram;
  return *mem_available_ > promised ? *mem_available_ - promised : 0;
}

std::vector<Lease> Arbiter::leases() const {
  std::vector<Lease> out;
  for (const auto& key : queue_) out.push_back(leases_.at(std::get<2>(key)));
  for (uint64_t id : granted_) out.push_back(leases_.at(id));
  return out;
}

const Lease* Arbiter::lease(uint64_t id) const {
  if (auto it = leases_.find(id); it != leases_.end()) return &it->second;
  for (const auto& l : ended_)
    if (l.id == id) return &l;
  return nullptr;
}

std::optional<size_t> Arbiter::queue_position(uint64_t id) const {
  auto it = leases_.find(id);
  if (it == leases_.end() || it->second.state != LeaseState::queued) return std::nullopt;
  const Lease& me = it->second;
  size_t ahead = 0;
  for (const auto& key : queue_) {
    if (std::get<2>(key) == id) break;
    const Lease& other = leases_.at(std::get<2>(key));
    // Leases for another GPU are not in the way; `any` ones may be.
    if (!me.request.gpu || !other.request.gpu || other.request.gpu == me.request.gpu) ++ahead;
  }
  return ahead;
}

std::vector<std::tuple<uint64_t, int, uint64_t>> Arbiter::lease_holders() const {
  std::vector<std::tuple<uint64_t, int, uint64_t>> out;
  for (const auto& [id, l] : leases_)
    if (l.request.pid) out.emplace_back(id, *l.request.pid, l.request.pid_start_ticks);
  return out;
}

std::vector<Action> Arbiter::on_lease_requested(const LeaseRequested& e, TimePoint now) {
  std::vector<Action> actions;
  if (leases_.count(e.id) || e.id == 0) return actions;  // ids never repeat
  next_lease_id_ = std::max(next_lease_id_, e.id + 1);
  LeaseRequest request = e.request;
  request.start = false;  // only the Arbiter makes start leases
  queue_lease(e.id, std::move(request), now, actions);
  return actions;
}

void Arbiter::queue_lease(uint64_t id, LeaseRequest request, TimePoint now, std::vector<Action>& actions) {
  Lease l;
  l.id = id;
  l.seq = next_seq_++;
  l.request = std::move(request);
  l.requested_at = now;
  l.last_heartbeat = now;
  l.reason.gpu = l.request.gpu;
  l.reason.needs = l.request.vram;
  l.reason.text = fmt::format("needs {} on {}; not yet considered", format_size(l.request.vram),
                              gpu_text(l.request.gpu));
  queue_.insert(queue_key(l));
  ++queued_for_[l.request.gpu];
  actions.push_back(EmitEvent{{now, "lease.queued", l.request.gpu, l.owner_name(),
                               fmt::format("lease #{} ({}) asks for {} on {}", l.id, l.owner_name(),
                                           format_size(l.request.vram), gpu_text(l.request.gpu))}});
  actions.push_back(LeaseChanged{l});
  leases_.emplace(l.id, std::move(l));
}

Bytes Arbiter::service_bytes_on(const std::string& service, unsigned gpu) const {
  auto it = services_.find(service);
  if (it == services_.end()) return 0;
  for (const auto& [g, b] : it->second.per_gpu)
    if (g == gpu) return b;
  return 0;
}

bool Arbiter::used_by_lease(const std::string& service) const {
  for (uint64_t id : granted_)
    if (leases_.at(id).request.service == service) return true;
  return false;
}

void Arbiter::start_for_lease(const Lease& l, TimePoint now, std::vector<Action>& actions) {
  auto it = services_.find(l.request.service);
  if (it == services_.end()) return;
  ServiceStatus& st = it->second;
  if (st.managed && st.managed->start_lease) return;  // its own start is under way
  bool down = st.managed ? (st.managed->state == "stopped" || st.managed->state == "failed" ||
                            st.managed->state == "backoff")
                         : !st.can_restart.empty() && (st.state == "down" || st.state == "unreachable");
  if (!down) return;
  actions.push_back(EmitEvent{{now, "service.start_for_lease", l.gpu, st.name,
                               fmt::format("starting {} for lease #{} ({})", st.name, l.id,
                                           l.owner_name())}});
  // The lease holds the room: no start admission of its own.
  command(st.name, "start", 0, now, actions, /*force=*/true);
}

std::vector<Action> Arbiter::on_lease_released(const LeaseReleased& e, TimePoint now) {
  std::vector<Action> actions;
  auto it = leases_.find(e.id);
  if (it == leases_.end()) return actions;
  it->second.exit_status = e.exit_status;
  bool granted = it->second.state == LeaseState::granted;
  end_lease(e.id, granted ? LeaseState::released : LeaseState::cancelled,
            granted ? "released by its holder" : "cancelled while queued", now, actions);
  return actions;
}

std::vector<Action> Arbiter::on_lease_heartbeat(const LeaseHeartbeat& e, TimePoint now) {
  if (auto it = leases_.find(e.id); it != leases_.end()) it->second.last_heartbeat = now;
  return {};
}

std::vector<Action> Arbiter::on_holder_exited(const HolderExited& e, TimePoint now) {
  std::vector<Action> actions;
  auto it = leases_.find(e.id);
  if (it == leases_.end()) return actions;
  end_lease(e.id, LeaseState::expired,
            fmt::format("holder pid {} exited", it->second.request.pid.value_or(0)), now, actions);
  return actions;
}

std::vector<Action> Arbiter::restore_leases(std::vector<Lease> kept,
                                            const std::vector<uint64_t>& alive, TimePoint now,
                                            uint64_t first_free_id) {
  std::vector<Action> actions;
  next_lease_id_ = std::max(next_lease_id_, first_free_id);
  for (Lease& l : kept) {
    next_lease_id_ = std::max(next_lease_id_, l.id + 1);
    if (!is_active(l.state) || leases_.count(l.id)) continue;
    next_seq_ = std::max(next_seq_, l.seq + 1);
    l.last_heartbeat = now;  // clients get one heartbeat period to come back
    l.held = 0;
    uint64_t id = l.id;
    bool holder_alive =
        !l.request.pid || std::find(alive.begin(), alive.end(), id) != alive.end();
    if (l.state == LeaseState::queued) {
      queue_.insert(queue_key(l));
      ++queued_for_[l.request.gpu];
    } else {
      granted_.insert(id);
    }
    bool start = l.request.start;
    bool was_granted = l.state == LeaseState::granted;
    leases_.emplace(id, std::move(l));
    if (start)  // the start it was for did not survive the restart of vramd
      end_lease(id, was_granted ? LeaseState::released : LeaseState::cancelled,
                was_granted ? "vramd restarted" : "vramd restarted before the start was admitted; start it again",
                now, actions);
    else if (!holder_alive)
      end_lease(id, LeaseState::expired, "holder exited while vramd was down", now, actions);
  }
  return actions;
}

void Arbiter::end_lease(uint64_t id, LeaseState state, const std::string& why, TimePoint now,
                        std::vector<Action>& actions) {
  auto it = leases_.find(id);
  if (it == leases_.end()) return;
  Lease l = std::move(it->second);
  leases_.erase(it);
  if (queue_.erase(queue_key(l)) && --queued_for_[l.request.gpu] == 0) queued_for_.erase(l.request.gpu);
  granted_.erase(l.id);
  l.state = state;
  l.ended_at = now;
  l.end_reason = why;
  std::string message =
      l.granted_at
          ? fmt::format("lease #{} ({}) {}: {} on GPU {} for {}, peak {}", l.id, l.owner_name(),
                        to_string(state), format_size(l.request.vram), l.gpu.value_or(0),
                        format_age(now - *l.granted_at), format_size(l.peak_vram))
          : fmt::format("lease #{} ({}) {} after waiting {}: {}", l.id, l.owner_name(),
                        to_string(state), format_age(now - l.requested_at), why);
  if (state != LeaseState::released && state != LeaseState::cancelled)
    message += fmt::format(" ({})", why);
  actions.push_back(EmitEvent{{now, fmt::format("lease.{}", to_string(state)), l.gpu,
                               l.owner_name(), message}});
  actions.push_back(LeaseChanged{l});
  ended_.push_back(std::move(l));
  if (ended_.size() > kEndedKept) ended_.pop_front();
}

void Arbiter::check_lease_deadlines(TimePoint now, std::vector<Action>& actions) {
  // Deadlines are seconds apart: one walk over the leases a second is enough.
  if (now - last_deadline_check_ < std::chrono::seconds(1)) return;
  last_deadline_check_ = now;
  std::vector<std::pair<uint64_t, std::pair<LeaseState, std::string>>> ending;
  for (const auto& [id, l] : leases_) {
    if (!l.request.pid && !l.request.start && now - l.last_heartbeat > config_.daemon.lease_heartbeat)
      ending.push_back({id, {LeaseState::expired,
                             fmt::format("no heartbeat for {}", format_age(now - l.last_heartbeat))}});
    else if (l.state == LeaseState::queued && l.request.wait_timeout &&
             now - l.requested_at >= *l.request.wait_timeout)
      ending.push_back({id, {LeaseState::timed_out,
                             fmt::format("not granted within {}; {}",
                                         format_duration(*l.request.wait_timeout), l.reason.text)}});
  }
  for (const auto& [id, what] : ending) end_lease(id, what.first, what.second, now, actions);
}

void Arbiter::update_lease_holdings(TimePoint now, std::vector<Action>& actions) {
  for (uint64_t id : granted_) {
    Lease& l = leases_.at(id);
    if (!l.gpu) continue;
    Owner me{OwnerKind::lease, l.owner_name()};
    Bytes held = 0;
    for (const auto& g : status_.gpus) {
      if (g.sample.index != *l.gpu) continue;
      for (const auto& h : g.holdings)
        if (h.owner == me) held += h.bytes;
    }
    // A lease for a service covers what that service holds: its work runs there.
    if (!l.request.service.empty()) held += service_bytes_on(l.request.service, *l.gpu);
    l.held = held;
    l.peak_vram = std::max(l.peak_vram, held);
    if (!l.overuse_reported && held > l.request.vram + kOveruseTolerance) {
      l.overuse_reported = true;
      actions.push_back(EmitEvent{{now, "lease.overuse", l.gpu, l.owner_name(),
                                   fmt::format("job {} uses {}, leased {}", l.owner_name(),
                                               format_size(held), format_size(l.request.vram))}});
    }
  }
}

void Arbiter::learn_reload_costs(TimePoint now) {
  // A load: the service's memory grows from (almost) nothing; it has finished when a sample
  // grows less than kStableStep. What it took is that service's reload cost from then on.
  for (auto& [name, st] : services_) {
    auto prev = last_bytes_.find(name);
    if (prev != last_bytes_.end()) {
      Bytes before = prev->second;
      if (before < kWorthUnloading && st.bytes >= kWorthUnloading && st.state != "unloading") {
        st.load_started = now;
      } else if (st.load_started && st.bytes >= kWorthUnloading &&
                 (st.bytes > before ? st.bytes - before : before - st.bytes) < kStableStep) {
        Duration took = now - *st.load_started;
        st.reload_cost = st.reload_measured ? (st.reload_cost + took) / 2 : took;
        st.reload_measured = true;
        st.load_started.reset();
      } else if (st.bytes < kWorthUnloading) {
        st.load_started.reset();
      }
    }
    last_bytes_[name] = st.bytes;
  }
}

void Arbiter::admit(TimePoint now, std::vector<Action>& actions) {
  // Evictions whose unload has its verdict are over.
  for (auto it = evicting_for_.begin(); it != evicting_for_.end();) {
    auto s = services_.find(it->first);
    if (s == services_.end() || s->second.state != "unloading") it = evicting_for_.erase(it);
    else ++it;
  }
  if (queue_.empty() || !status_.sampled) return;

  std::map<unsigned, Bytes> free;
  std::map<unsigned, const GpuStatus*> gpus;
  for (const auto& g : status_.gpus) {
    if (!admits_leases(g.sample)) continue;  // [issue 16: MIG] was: health != ok
    free[g.sample.index] = budget(g);
    gpus[g.sample.index] = &g;
  }
  std::optional<Bytes> ram = ram_available();
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
  for (const auto& key : queue_) {
    if (head.size() >= gpus_wanted) break;  // every GPU someone waits for has its head
    uint64_t id = std::get<2>(key);
    Lease& l = leases_.at(id);
    std::vector<unsigned> choices;
    if (l.request.gpu) {
      if (gpus.count(*l.request.gpu) && !head.count(*l.request.gpu)) choices.push_back(*l.request.gpu);
    } else {
      for (const auto& [idx, g] : gpus)
        if (!head.count(idx)) choices.push_back(idx);
    }
    if (choices.empty()) {  // behind another lease (or its GPU is not readable)
      unsigned g = l.request.gpu.value_or(head.empty() ? 0 : head.begin()->first);
      if (auto h = head.find(g); h != head.end() && l.reason.behind != h->second) {
        l.reason = LeaseReason{};
        l.reason.gpu = g;
        l.reason.needs = l.request.vram;
        l.reason.behind = h->second;
        l.reason.text = fmt::format("needs {} on GPU {}; queued behind lease #{}",
                                    format_size(l.request.vram), g, h->second);
        if (l.request.start) services_.at(l.request.service).managed->reason = l.reason.text;
      }
      continue;
    }
    // What it still needs on a GPU: a lease for a service counts what that service holds.
    auto need = [&](unsigned idx) {
      Bytes own = l.request.service.empty() ? 0 : service_bytes_on(l.request.service, idx);
      return l.request.vram > own ? l.request.vram - own : Bytes{0};
    };

    LeaseReason reason;
    reason.needs = l.request.vram;
    std::string group = group_of(l.request);
    // Exclusive group: the other members hold nothing while this lease runs.
    std::vector<std::string> group_members;
    if (!group.empty())
      for (const auto& svc : config_.services)
        if (svc.group == group && svc.name != l.request.service &&
            services_.at(svc.name).bytes >= kWorthUnloading)
          group_members.push_back(svc.name);
    bool group_lease_running = !group.empty() && groups_granted.count(group);
    bool ram_short = l.request.ram && ram && *ram < *l.request.ram;

    // Where it fits now: the tightest fit keeps the larger holes for larger work.
    std::optional<unsigned> fit;
    if (group_members.empty() && !group_lease_running && !ram_short)
      for (unsigned idx : choices)
        if (free[idx] >= need(idx) && (!fit || free[idx] < free[*fit])) fit = idx;
    if (fit) {
      l.state = LeaseState::granted;
      l.gpu = *fit;
      l.granted_at = now;
      l.reason = LeaseReason{};
      free[*fit] -= need(*fit);
      if (l.request.ram && ram) *ram -= std::min(*ram, *l.request.ram);
      if (!group.empty()) groups_granted.insert(group);
      granted.push_back(id);
      granted_.insert(id);
      actions.push_back(EmitEvent{{now, "lease.granted", l.gpu, l.owner_name(),
                                   fmt::format("lease #{} ({}) granted {} on GPU {} after {}", l.id,
                                               l.owner_name(), format_size(l.request.vram), *fit,
                                               format_age(now - l.requested_at))}});
      actions.push_back(LeaseChanged{l});
      if (l.request.start) {
        ServiceStatus& s = services_.at(l.request.service);
        if (s.managed && s.managed->start_lease == id && s.managed->state == "queued") launch(s, now, actions);
      } else if (!l.request.service.empty()) {
        start_for_lease(l, now, actions);
      }
      continue;
    }

    // It waits. Plan evictions on each GPU it may take; the cheapest feasible plan wins.
    struct GpuPlan {
      unsigned gpu = 0;
      Bytes shortfall = 0, coming = 0;
      std::vector<EvictionCandidate> candidates;
      std::optional<std::vector<size_t>> pick;
      int64_t cost = 0;
    };
    std::optional<GpuPlan> best;
    for (unsigned idx : choices) {
      GpuPlan p;
      p.gpu = idx;
      p.shortfall = need(idx) > free[idx] ? need(idx) - free[idx] : 0;
      for (const auto& [svc, for_lease] : evicting_for_)
        for (const auto& [g, b] : services_.at(svc).per_gpu)
          if (g == idx) p.coming += b;
      Bytes more = p.shortfall > p.coming ? p.shortfall - p.coming : 0;
      for (const auto& svc : config_.services) {
        const ServiceStatus& st = services_.at(svc.name);
        if (evicting_for_.count(svc.name) || svc.pinned || st.state != "up") continue;
        if (svc.name == l.request.service || used_by_lease(svc.name)) continue;  // in use
        if (std::find(group_members.begin(), group_members.end(), svc.name) != group_members.end())
          continue;
        auto idle = idle_since(st);
        if (!idle || now - *idle < svc.min_idle) continue;
        if (st.backoff_until && now < *st.backoff_until) continue;
        for (const auto& [g, b] : st.per_gpu)
          if (g == idx && b >= kWorthUnloading)
            p.candidates.push_back({svc.name, b, st.reload_cost, *idle});
      }
      p.pick = choose_eviction(p.candidates, more);
      if (p.pick)
        for (size_t i : *p.pick) p.cost += p.candidates[i].reload_cost.count();
      bool better = !best || (p.pick && !best->pick) ||
                    (p.pick && best->pick && p.cost < best->cost) ||
                    (!p.pick && !best->pick && free[idx] > free[best->gpu]);
      if (better) best = std::move(p);
    }
    // An `any` lease holds the line only where it means to go: the other GPUs go on admitting
    // their own leases, and on each pass it takes the first GPU where it fits.
    unsigned target = best->gpu;
    head[target] = id;
    reason.gpu = target;
    reason.free = free[target];

    // Start the evictions: the plan's services, and the group's other members when idle.
    std::set<std::string> evict;
    if (best->pick && !group_lease_running && !ram_short)
      for (size_t i : *best->pick) evict.insert(best->candidates[i].service);
    for (const auto& m : group_members) {
      ServiceStatus& st = services_.at(m);
      const ServiceConfig* cfg = config_.find_service(m);
      // Starting a member of an exclusive group stops the members vramd runs.
      if (l.request.start && st.managed && st.managed->pid && st.managed->state != "stopping") {
        actions.push_back(EmitEvent{{now, "service.group_stop", std::nullopt, m,
                                     fmt::format("stopping {}: {} of group '{}' starts", m,
                                                 l.request.service, group)}});
        command(m, "stop", 0, now, actions);
        continue;
      }
      if (!evicting_for_.count(m) && st.state == "up" && idle_since(st) && !cfg->pinned &&
          !(st.backoff_until && now < *st.backoff_until))
        evict.insert(m);
    }
    for (const auto& svc : evict) {
      evicting_for_[svc] = id;
      start_unload(svc, "eviction", 0, now, actions);
    }

    // The reason: what it needs, what is free, and everyone in the way.
    const GpuStatus& g = *gpus.at(target);
    std::vector<LeaseBlocker> blockers;
    for (const auto& h : g.holdings) {
      if (h.owner.kind == OwnerKind::baseline || h.bytes < kWorthUnloading) continue;
      LeaseBlocker b;
      b.owner = h.owner.name;
      b.kind = to_string(h.owner.kind);
      b.bytes = h.bytes;
      if (h.owner.kind == OwnerKind::service) {
        const ServiceStatus& st = services_.at(h.owner.name);
        const ServiceConfig* cfg = config_.find_service(h.owner.name);
        auto idle = idle_since(st);
        b.evicting = evicting_for_.count(h.owner.name) > 0;
        if (b.evicting) {
          b.state = idle ? fmt::format("idle {}: unloading", format_age(now - *idle)) : "unloading";
        } else if (st.state == "unloading") {
          b.state = "unloading";
        } else if (cfg && cfg->pinned) {
          b.state = "pinned";
        } else if (st.busy.value_or(false)) {
          b.state = "busy";
        } else if (st.backoff_until && now < *st.backoff_until) {
          b.state = fmt::format("unload {}; next try in {}",
                                st.last_unload ? to_string(st.last_unload->outcome) : "failed",
                                format_age(*st.backoff_until - now));
        } else if (st.state != "up") {
          b.state = st.state == "unreachable" ? "unreachable: cannot tell if idle" : "not probed yet";
        } else if (!idle) {
          b.state = "activity unknown";
        } else if (cfg && now - *idle < cfg->min_idle) {
          b.state = fmt::format("idle {} (< min_idle {})", format_age(now - *idle),
                                format_duration(cfg->min_idle));
        } else {
          b.state = fmt::format("idle {}", format_age(now - *idle));
        }
      } else if (h.owner.kind == OwnerKind::lease) {
        b.state = "granted lease";
      } else if (h.owner.kind == OwnerKind::unknown) {
        b.state = "unknown owner";
        for (const auto& c : h.candidates) b.candidates.push_back(process_owner_name(c.pid, c.name));
      } else {
        b.state = "not managed by vramd";
      }
      blockers.push_back(std::move(b));
    }
    std::stable_sort(blockers.begin(), blockers.end(),
              [](const LeaseBlocker& a, const LeaseBlocker& b) { return a.bytes > b.bytes; });
    std::string text = fmt::format("needs {} on GPU {}; {} free", format_size(l.request.vram),
                                   target, format_size(free[target]));
    if (group_lease_running)
      text += fmt::format("; another lease of group '{}' is running", group);
    if (ram_short)
      text += fmt::format("; needs {} host RAM, {} available", format_size(*l.request.ram),
                          format_size(*ram));
    size_t shown = 0;
    for (const auto& b : blockers) {
      if (shown++ == 4) {
        text += fmt::format("; {} more", blockers.size() - 4);
        break;
      }
      text += fmt::format("; {} holds {}, {}", b.owner, format_size(b.bytes), b.state);
      if (!b.candidates.empty()) {
        std::string c;
        for (const auto& x : b.candidates) c += (c.empty() ? "" : ", ") + x;
        text += fmt::format(" (candidates: {})", c);
      }
    }
    for (const auto& m : group_members)
      if (const ServiceStatus& ms = services_.at(m); ms.managed && ms.managed->pid)
        text += fmt::format("; {} (group '{}') must stop first: {}", m, group, ms.managed->state);
      else if (!evict.count(m) && !evicting_for_.count(m))
        text += fmt::format("; {} (group '{}') must unload first: {}", m, group,
                            ms.busy.value_or(false) ? "busy" : ms.state);
    if (!best->pick && !group_lease_running && !ram_short && group_members.empty())
      text += "; nothing idle enough to unload: waiting for memory to be released";
    reason.text = std::move(text);
    reason.blockers = std::move(blockers);
    l.reason = std::move(reason);
    if (l.request.start) services_.at(l.request.service).managed->reason = l.reason.text;
  }
  for (uint64_t id : granted) {
    const Lease& l = leases_.at(id);
    queue_.erase(queue_key(l));
    if (--queued_for_[l.request.gpu] == 0) queued_for_.erase(l.request.gpu);
  }
}

}  // namespace vramd
