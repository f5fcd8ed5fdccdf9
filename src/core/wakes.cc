#include "core/wakes.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/admission.h"
#include "core/ledger.h"
#include "core/service_kinds.h"
#include "core/service_policy.h"
#include "core/supervision.h"

namespace vramd {

namespace {

std::string seconds_text(Duration d) {
  return fmt::format("{:.1f} s", std::chrono::duration<double>(d).count());
}

std::string for_what(const std::string& model) { return model.empty() ? "a request" : model; }

// Prewarm (docs/proxy.md "Prewarm"): looked at every kPrewarmEvery, when nobody wants room; a
// sleeper is woken when its chance of a request within kPrewarmHorizon is at least
// kPrewarmChance, the one that saves the most expected wake seconds first.
constexpr Duration kPrewarmEvery = std::chrono::seconds(10);
constexpr Duration kPrewarmHorizon = std::chrono::hours(1);
constexpr double kPrewarmChance = 0.5;
constexpr int kPrewarmPriority = -1'000'000;  // behind every lease (theirs are -1000..1000)

// The end of the wall clock's current hour, on the monotonic clock.
MonoTime end_of_hour(const Now& now) {
  auto hour = std::chrono::floor<std::chrono::hours>(now.wall.time_since_epoch());
  return now.mono_of(TimePoint(hour + std::chrono::hours(1)));
}

// The service as the plan reads it: service policy's status with supervision's part joined.
ServiceStatus status_of(const World& w, const std::string& service) {
  ServiceStatus st = w.services.at(service);
  if (std::optional<ManagedState> m = w.supervision.find(service)) st.managed = *m;
  return st;
}

Duration wake_timeout(const ServiceConfig& cfg) {
  return cfg.proxy.wake_timeout.value_or(cfg.start_timeout);
}

// A wake from suspend restores the processes the utility checkpointed.
std::vector<int> suspended_pids(const ServiceStatus& st, SleepDepth depth) {
  if (depth != SleepDepth::suspend || !st.asleep) return {};
  return st.asleep->pids;
}

}  // namespace

const char* to_string(WakeOutcome o) {
  switch (o) {
    case WakeOutcome::ready:
      return "ready";
    case WakeOutcome::refused:
      return "refused";
    case WakeOutcome::failed:
      return "failed";
    case WakeOutcome::timed_out:
      return "timed_out";
    case WakeOutcome::cancelled:
      return "cancelled";
  }
  return "?";
}

void Wakes::on_requested(const WakeRequested& e, const World& world, const Now& now,
                         std::vector<Action>& actions, Intents& intents) {
  const ServiceConfig* cfg = config_.find_service(e.service);
  if (!cfg) {
    actions.emplace_back(WakeFinished{e.id, WakeOutcome::refused,
                                      fmt::format("no service named '{}'", e.service)});
    return;
  }
  if (auto it = runs_.find(e.service); it != runs_.end()) {
    // Joins the wake under way (a prewarm too: it was used): it hears what the others heard last.
    it->second.ids.push_back(e.id);
    if (!it->second.progress.empty())
      actions.emplace_back(WakeProgressed{e.id, it->second.progress});
    return;
  }
  Run run;
  run.service = e.service;
  run.model = e.model;
  run.can_wake = e.can_wake;
  run.ids = {e.id};
  run.requested_at = now.mono;
  run.deadline = now.mono + wake_timeout(*cfg);
  if (plan(run, world, now, actions, intents)) runs_.emplace(e.service, std::move(run));
}

bool Wakes::plan(Run& run, const World& world, const Now& now, std::vector<Action>& actions,
                 Intents& intents) {
  const ServiceConfig& cfg = *config_.find_service(run.service);
  ServiceStatus st = status_of(world, run.service);
  WakePlan p = plan_wake(st, cfg, run.can_wake, run.model);
  // A prewarm is a wake of a sleeper whose size is known, or nothing.
  if (run.prewarm && run.ids.empty() && (p.step != WakeStep::wake || !p.room)) {
    if (run.claim) {
      claim_of_.erase(*run.claim);
      intents.push_back(EndLeaseIntent{*run.claim, "the prewarm is not needed"});
    }
    return false;
  }
  run.step = p.step;
  run.room = p.room;
  run.depth = p.depth;
  switch (p.step) {
    case WakeStep::ready:
      finish(run, WakeOutcome::ready, "", world, now, actions, intents);
      return false;
    case WakeStep::wait:
      run.phase = Phase::waiting_unload;
      progress(run, fmt::format("waiting for the unload of {} to finish", run.service), actions);
      return true;
    case WakeStep::start: {
      run.phase = Phase::starting;
      ManagedPhase ph = st.managed ? st.managed->state : ManagedPhase::stopped;
      // Already on its way up (queued for room, starting, restarting): wait for it.
      if (ph == ManagedPhase::stopped || ph == ManagedPhase::failed)
        intents.push_back(CommandIntent{run.service, Command::start});
      progress(run,
               fmt::format("starting {}, ~{}", run.service,
                           seconds_text(expected_wake(st, run.model, SleepDepth::stop))),
               actions);
      return true;
    }
    case WakeStep::wake:
    case WakeStep::admit:
      break;
  }
  if (p.room) {
    LeaseRequest r;
    r.vram = p.room->bytes;
    r.gpu = st.last_gpu;
    r.holder = "vramd";
    r.label = (run.prewarm ? "prewarm " : p.step == WakeStep::wake ? "wake " : "load ") +
              run.service;
    if (run.prewarm && run.ids.empty()) {
      r.prewarm = true;
      r.priority = kPrewarmPriority;
    }
    r.service = run.service;
    r.command = run.model;
    r.wake = true;
    run.phase = Phase::claiming;
    progress(run, fmt::format("needs {} ({})", format_size(p.room->bytes), p.room->source),
             actions);
    intents.push_back(QueueWakeLeaseIntent{run.service, std::move(r)});
    return true;
  }
  // A wake whose size nobody knows: called at once (it takes what it finds).
  run.phase = Phase::calling;
  run.call_at = now.mono;
  SleepDepth depth = run.depth.value_or(SleepDepth::sleep1);
  progress(run,
           fmt::format("waking {} from {}, ~{}", run.service, describe_depth(depth, st.kind),
                       seconds_text(expected_wake(st, run.model, depth))),
           actions);
  actions.emplace_back(CallWake{run.service, 0, depth, suspended_pids(st, depth)});
  return true;
}

void Wakes::on_claim_queued(const std::string& service, uint64_t lease) {
  auto it = runs_.find(service);
  if (it == runs_.end()) return;
  it->second.claim = lease;
  claim_of_[lease] = service;
}

bool Wakes::owns_claim(uint64_t lease) const {
  return claim_of_.count(lease) > 0 || loads_.count(lease) > 0;
}

void Wakes::on_granted(uint64_t lease, const World& world, const Now& now,
                       std::vector<Action>& actions, Intents& intents) {
  auto c = claim_of_.find(lease);
  if (c == claim_of_.end()) return;
  auto it = runs_.find(c->second);
  if (it == runs_.end() || it->second.phase != Phase::claiming) return;
  Run& run = it->second;
  if (run.step == WakeStep::admit) {
    // It loads on the request itself: let the request through; the claim holds the room until
    // the load shows.
    hold_until_loaded(run, world, now);
    finish(run, WakeOutcome::ready, "", world, now, actions, intents);
    runs_.erase(it);
    return;
  }
  run.phase = Phase::calling;
  run.call_at = now.mono;
  SleepDepth depth = run.depth.value_or(SleepDepth::sleep1);
  ServiceStatus st = status_of(world, run.service);
  progress(run,
           fmt::format("waking {} from {}, ~{}", run.service, describe_depth(depth, st.kind),
                       seconds_text(expected_wake(st, run.model, depth))),
           actions);
  actions.emplace_back(CallWake{run.service, lease, depth, suspended_pids(st, depth)});
}

void Wakes::on_call_done(const WakeCallDone& e, const World& world, const Now& now,
                         std::vector<Action>& actions, Intents& intents) {
  auto it = runs_.find(e.service);
  if (it == runs_.end() || it->second.phase != Phase::calling) return;
  Run& run = it->second;
  bool failed = e.call.result != UnloadCall::Result::requested;
  if (failed) {
    finish(run, WakeOutcome::failed, fmt::format("wake {} failed: {}", run.service, e.call.message),
           world, now, actions, intents);
  } else {
    Duration took = now.mono - run.call_at.value_or(now.mono);
    intents.push_back(WokenIntent{run.service, run.model, run.depth.value_or(SleepDepth::sleep1),
                                  took, true, run.prewarm && run.ids.empty() && !run.unasked});
    hold_until_loaded(run, world, now);
    finish(run, WakeOutcome::ready, e.call.message, world, now, actions, intents);
  }
  runs_.erase(it);
}

void Wakes::on_cancelled(const WakeCancelled& e, const World& world, const Now& now,
                         std::vector<Action>& actions, Intents& intents) {
  for (auto it = runs_.begin(); it != runs_.end(); ++it) {
    Run& run = it->second;
    auto pos = std::find(run.ids.begin(), run.ids.end(), e.id);
    if (pos == run.ids.end()) continue;
    run.ids.erase(pos);
    actions.emplace_back(WakeFinished{e.id, WakeOutcome::cancelled, "the client went away",
                                      std::string(), now.mono - run.requested_at, run.depth});
    // The last one gone: the room it waited for goes back. A wake call already made runs on
    // (the server wakes either way; its load is verified as any other).
    if (run.ids.empty() && run.phase != Phase::calling && !run.prewarm) {
      finish(run, WakeOutcome::cancelled, "the client went away", world, now, actions, intents);
      runs_.erase(it);
    }
    return;
  }
}

void Wakes::finish(Run& run, WakeOutcome outcome, const std::string& message, const World& world,
                   const Now& now, std::vector<Action>& actions, Intents& intents,
                   const std::string& holder) {
  Duration took = now.mono - run.requested_at;
  std::vector<std::string> evicted = evicted_for(run, world);
  std::string evicted_text = evicted.empty() ? "" : fmt::format("; evicted {}", fmt::join(evicted, ", "));
  std::string room = run.room ? fmt::format(", room for {} ({})", format_size(run.room->bytes),
                                            run.room->source)
                              : std::string();
  ServiceStatus st = status_of(world, run.service);
  std::string depth = run.depth ? " from " + describe_depth(*run.depth, st.kind) : "";
  std::string type, text;
  if (outcome == WakeOutcome::ready) {
    if (run.step == WakeStep::ready) {
      type.clear();  // nothing to do: no event
    } else if (run.step == WakeStep::start) {
      type = "service.woken";
      text = fmt::format("started {} for {} in {}{}", run.service, for_what(run.model),
                         seconds_text(took), evicted_text);
    } else if (run.step == WakeStep::admit) {
      type = "service.load_admitted";
      text = fmt::format("admitted the load of {} for {} in {}{}{}", run.service,
                         for_what(run.model), seconds_text(took), room, evicted_text);
    } else {
      type = run.prewarm && run.ids.empty() && !run.unasked ? "service.prewarmed"
                                                            : "service.woken";
      text = fmt::format("woke {}{} for {} in {}{}{}{}", run.service, depth, what_for(run),
                         seconds_text(took), room, evicted_text,
                         message.empty() ? "" : ": " + message);
    }
  } else if (run.prewarm && run.ids.empty() && !run.unasked) {
    type = fmt::format("service.prewarm_{}", to_string(outcome));
    text = fmt::format("prewarm of {}{} {} after {}: {}", run.service, depth, to_string(outcome),
                       seconds_text(took), message);
  } else {
    type = fmt::format("service.wake_{}", to_string(outcome));
    text = fmt::format("wake of {}{} for {} {} after {}: {}", run.service, depth, what_for(run),
                       to_string(outcome), seconds_text(took), message);
  }
  if (!type.empty()) actions.emplace_back(make_event(now, type, std::nullopt, run.service, text));
  std::string answer = outcome == WakeOutcome::ready ? text : message;
  for (uint64_t id : run.ids)
    actions.emplace_back(WakeFinished{id, outcome, answer, holder, took, run.depth, evicted});
  run.ids.clear();
  if (run.claim) {
    claim_of_.erase(*run.claim);
    if (outcome != WakeOutcome::ready && !loads_.count(*run.claim))
      intents.push_back(EndLeaseIntent{*run.claim, fmt::format("the wake {}", to_string(outcome))});
  }
}

std::string Wakes::what_for(const Run& run) const {
  if (run.unasked) return "its room, free again";
  if (!run.prewarm) return for_what(run.model);
  std::string ahead = fmt::format("a prewarm ({:.0f}% chance of a request within {})",
                                  run.chance * 100, format_duration(kPrewarmHorizon));
  return run.ids.empty() ? ahead : fmt::format("{}, then {}", ahead, for_what(run.model));
}

bool Wakes::prewarming(const std::string& service) const {
  auto it = runs_.find(service);
  return it != runs_.end() && it->second.prewarm;
}

void Wakes::consider_prewarm(const World& world, const Now& now, std::vector<Action>& actions,
                             Intents& intents) {
  if (next_prewarm_check_ && now.mono < *next_prewarm_check_) return;
  next_prewarm_check_ = now.mono + kPrewarmEvery;
  if (!runs_.empty() || world.admission.wants_room() || world.admission.claiming() ||
      !world.ledger.status().sampled)
    return;
  struct Pick {
    const ServiceConfig* cfg = nullptr;
    std::string model;
    double chance = 0;
    double saves = 0;  // expected wake seconds saved: chance × expected wake
    bool unasked = false;
  };
  std::optional<Pick> best;
  for (const ServiceConfig& cfg : config_.services) {
    ServiceStatus st = status_of(world, cfg.name);
    // Suspended, and nothing can ask for it (it has no request path): taken back whatever its
    // demand, once its room is free and nobody wants it, as a suspended lease is resumed.
    const ServiceKind* kind = find_service_kind(cfg.kind);
    bool unasked = sleeping(st) && st.asleep->depth == SleepDepth::suspend && kind &&
                   !kind->needs_url;
    if (!unasked && !cfg.prewarm.value_or(config_.daemon.prewarm)) continue;
    if (!sleeping(st) || st.asleep->depth == SleepDepth::stop ||
        (!st.can_wake && st.asleep->depth != SleepDepth::suspend) ||
        st.state != ServiceState::up || !st.last_gpu)
      continue;
    // Put to sleep by hand: not prewarmed until it is asked again (which ends the sleep).
    if (st.asleep->reason == UnloadReason::manual) continue;
    if (st.no_prewarm_until && now.mono < *st.no_prewarm_until) continue;
    if (auto n = no_prewarm_until_.find(cfg.name); n != no_prewarm_until_.end()) {
      if (now.mono < n->second) continue;
      no_prewarm_until_.erase(n);
    }
    double chance = 1;
    if (!unasked) {
      const Demand* demand = world.services.demand(cfg.name);
      if (!demand) continue;
      // Put to sleep to make room (an eviction, an exclusive group): its last hour counts, so
      // it comes back when the room does. Put to sleep idle: only its weekly pattern does.
      bool made_room =
          st.asleep->reason == UnloadReason::eviction || st.asleep->reason == UnloadReason::group;
      chance = demand->chance(now, kPrewarmHorizon, made_room);
      if (chance < kPrewarmChance) continue;
    }
    std::string model = st.asleep->models.size() == 1 ? st.asleep->models[0] : std::string();
    std::optional<LoadNeed> need = load_need(st, cfg, model);
    std::optional<Bytes> room = world.admission.room_on(world, *st.last_gpu);
    if (!need || !room || *room < need->bytes) continue;  // it takes only room nobody wants
    double saves =
        chance * std::chrono::duration<double>(expected_wake(st, model, st.asleep->depth)).count();
    if (!best || saves > best->saves) best = Pick{&cfg, model, chance, saves, unasked};
  }
  if (!best) return;
  Run run;
  run.service = best->cfg->name;
  run.model = best->model;
  run.can_wake = true;
  run.prewarm = true;
  run.unasked = best->unasked;
  run.chance = best->chance;
  run.requested_at = now.mono;
  run.deadline = now.mono + wake_timeout(*best->cfg);
  if (plan(run, world, now, actions, intents)) runs_.emplace(run.service, std::move(run));
}

void Wakes::progress(Run& run, std::string text, std::vector<Action>& actions) {
  if (text == run.progress) return;
  run.progress = std::move(text);
  for (uint64_t id : run.ids) actions.emplace_back(WakeProgressed{id, run.progress});
}

std::vector<std::string> Wakes::evicted_for(const Run& run, const World& world) const {
  if (!run.claim) return {};
  const Lease* l = world.admission.find(*run.claim);
  return l ? l->evicted : std::vector<std::string>{};
}

void Wakes::hold_until_loaded(const Run& run, const World& world, const Now& now) {
  if (!run.claim || !run.room) return;
  const ServiceStatus& st = world.services.at(run.service);
  Load load;
  load.service = run.service;
  load.lease = *run.claim;
  load.room = run.room->bytes;
  load.from = st.bytes;
  load.last = st.bytes;
  load.prewarm = run.prewarm && run.ids.empty();
  // Two expected wakes, at least 30 s, at most 5 min: a load smaller than its room, or one that
  // never comes, gives the room back then.
  std::string model = run.model;
  Duration expect = expected_wake(st, model, run.depth.value_or(SleepDepth::sleep2));
  load.until = now.mono + std::clamp<Duration>(2 * expect, std::chrono::seconds(30),
                                               std::chrono::minutes(5));
  loads_[load.lease] = load;
}

void Wakes::advance(const World& world, const Now& now, std::vector<Action>& actions,
                    Intents& intents) {
  const bool room_wanted = world.admission.wants_room();
  for (auto it = runs_.begin(); it != runs_.end();) {
    Run& run = it->second;
    bool done = false;
    if (run.prewarm && run.ids.empty() && room_wanted && run.phase != Phase::calling) {
      // A lease (or a request's wake) wants room: the prewarm gives way, and its service is not
      // prewarmed again this hour (one nothing can ask is taken back once the room is free).
      if (!run.unasked) no_prewarm_until_[run.service] = end_of_hour(now);
      finish(run, WakeOutcome::cancelled, "a lease or a request wants the room", world, now,
             actions, intents);
      done = true;
    } else if (now.mono >= run.deadline && run.phase != Phase::calling) {
      const ServiceConfig& cfg = *config_.find_service(run.service);
      std::string holder;
      if (run.claim)
        if (const Lease* l = world.admission.find(*run.claim); l && !l->reason.blockers.empty())
          holder = l->reason.blockers[0].owner;
      finish(run, WakeOutcome::timed_out,
             fmt::format("{} did not become ready within {}{}", run.service,
                         format_duration(wake_timeout(cfg)),
                         run.progress.empty() ? "" : ": " + run.progress),
             world, now, actions, intents, holder);
      done = true;
    } else if (run.phase == Phase::waiting_unload) {
      if (!world.services.unloading(run.service)) done = !plan(run, world, now, actions, intents);
    } else if (run.phase == Phase::starting) {
      std::optional<ManagedState> m = world.supervision.find(run.service);
      ManagedPhase ph = m ? m->state : ManagedPhase::stopped;
      if (ph == ManagedPhase::running) {
        if (run.depth)
          intents.push_back(WokenIntent{run.service, run.model, SleepDepth::stop,
                                        now.mono - run.requested_at});
        finish(run, WakeOutcome::ready, "", world, now, actions, intents);
        done = true;
      } else if (ph == ManagedPhase::failed ||
                 (run.started_at && (ph == ManagedPhase::stopped || ph == ManagedPhase::backoff))) {
        std::string why = m && !m->reason.empty() ? m->reason : "it stopped";
        finish(run, WakeOutcome::failed, fmt::format("{} is not up: {}", run.service, why), world,
               now, actions, intents);
        done = true;
      } else {
        if (ph == ManagedPhase::starting || ph == ManagedPhase::queued) run.started_at = now.mono;
        if (ph == ManagedPhase::queued && m->start_lease)
          if (const Lease* l = world.admission.find(*m->start_lease);
              l && l->state == LeaseState::queued && l->reason.considered)
            progress(run, "waiting for GPU room: " + l->reason.text, actions);
      }
    } else if (run.phase == Phase::claiming && run.claim) {
      const Lease* l = world.admission.find(*run.claim);
      if (!l || !is_active(l->state)) {
        std::string why = l ? l->end_reason : "its claim ended";
        finish(run, WakeOutcome::refused, why, world, now, actions, intents);
        done = true;
      } else if (l->state == LeaseState::queued && l->reason.considered) {
        progress(run, "waiting for GPU room: " + l->reason.text, actions);
      }
    }
    it = done ? runs_.erase(it) : std::next(it);
  }
  // Loads let through: their claims hold the room until the bytes show.
  std::optional<MonoTime> sampled;
  if (world.ledger.status().sampled) sampled = world.ledger.status().sampled_at;
  for (auto it = loads_.begin(); it != loads_.end();) {
    Load& load = it->second;
    const Lease* l = world.admission.find(load.lease);
    bool end = false, gone = !l || l->state != LeaseState::granted;
    if (!gone && load.prewarm && room_wanted) {
      // Its room goes back now; the woken service, idle, may be evicted for whoever wants it.
      end = true;
    } else if (!gone) {
      Bytes now_bytes = world.services.at(load.service).bytes;
      if (now_bytes + load.room / 10 >= load.room || now.mono >= load.until) {
        end = true;
      } else if (sampled && *sampled != load.sampled_at) {
        // Once per sample: grown by a real amount, then steady, a load smaller than its room
        // has settled.
        load.sampled_at = *sampled;
        Bytes diff = now_bytes > load.last ? now_bytes - load.last : load.last - now_bytes;
        bool grown = now_bytes >= load.from + kWorthUnloading;
        load.steady = grown && diff <= kStableWithin ? load.steady + 1 : 0;
        end = load.steady >= 2 * kStableSamples;
        load.last = now_bytes;
      }
    }
    if (end)
      intents.push_back(EndLeaseIntent{load.lease, load.prewarm && room_wanted
                                                       ? "someone else wants the prewarm's room"
                                                       : "its load showed on the GPU"});
    it = end || gone ? loads_.erase(it) : std::next(it);
  }
  consider_prewarm(world, now, actions, intents);
}

std::optional<MonoTime> Wakes::next_deadline() const {
  std::optional<MonoTime> out;
  auto earliest = [&](MonoTime t) {
    if (!out || t < *out) out = t;
  };
  for (const auto& [name, run] : runs_)
    if (run.phase != Phase::calling) earliest(run.deadline);
  for (const auto& [id, load] : loads_) earliest(load.until);
  return out;
}

}  // namespace vramd
