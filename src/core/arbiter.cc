#include "core/arbiter.h"

#include <fmt/format.h>

#include "core/overloaded.h"
#include "core/wake.h"

namespace vramd {

Arbiter::Arbiter(Config config)
    : config_(std::move(config)),
      ledger_(config_),
      services_(config_),
      admission_(config_),
      supervision_(config_),
      wakes_(config_) {}

namespace {

// Decisions may be taken on the services' probes soon, so they are not backed off: a queued
// lease may evict on their answers; on a shared store another host's lease may be given room
// here at any claim round, unseen until then (core/probe_pacing.h).
bool decisions_pending(const Admission& admission, const Config& config) {
  return admission.wants_admission() || !config.daemon.store.empty();
}

// The service an event tells of a change to (its process, container, unload, requests).
std::optional<std::string> service_moved(const Event& event) {
  return std::visit(
      Overloaded{[](const UnloadCallDone& e) -> std::optional<std::string> { return e.service; },
                 [](const LifecycleDone& e) -> std::optional<std::string> { return e.service; },
                 [](const ContainerChanged& e) -> std::optional<std::string> { return e.service; },
                 [](const ChildStarted& e) -> std::optional<std::string> { return e.service; },
                 [](const ChildExited& e) -> std::optional<std::string> { return e.service; },
                 [](const ServiceCommand& e) -> std::optional<std::string> { return e.service; },
                 [](const RequestsInFlight& e) -> std::optional<std::string> { return e.service; },
                 [](const WakeCallDone& e) -> std::optional<std::string> { return e.service; },
                 [](const auto&) -> std::optional<std::string> { return std::nullopt; }},
      event);
}

}  // namespace

std::vector<Action> Arbiter::handle(const Event& event, const Now& now) {
  std::vector<Action> actions;
  Intents intents;
  if (std::holds_alternative<ShuttingDown>(event)) {  // nothing is admitted, woken or started
    supervision_.on_shutdown(now, actions);
    return actions;
  }
  services_.set_ram_room(sleep_ram_room());
  const World w = world();
  auto command = [&](const std::string& service, Command action, uint64_t request_id, bool force) {
    if (!config_.find_service(service)) {
      actions.emplace_back(
          CommandFinished{request_id, false, fmt::format("no service named '{}'", service)});
      return;
    }
    supervision_.command(service, action, request_id, force, w, now, actions, intents);
  };
  std::visit(
      Overloaded{
          [&](const SampleTaken& e) { on_sample(e, now, actions, intents); },
          [&](const ProbeDone& e) {
            services_.on_probe(e, now, decisions_pending(admission_, config_), actions);
          },
          [&](const UnloadRequested& e) { services_.on_unload_requested(e, now, actions); },
          [&](const UnloadCallDone& e) { services_.on_unload_call_done(e, now, actions, intents); },
          [&](const LifecycleDone& e) {
            actions.emplace_back(make_event(
                now, fmt::format("service.{}{}", to_string(e.action), e.ok ? "" : "_failed"),
                std::nullopt, e.service,
                fmt::format("{} {}: {}", to_string(e.action), e.service, e.message)));
            supervision_.on_lifecycle_done(e, now, actions);
          },
          [&](const ContainerChanged& e) { supervision_.on_container_changed(e, w, now, actions); },
          [&](const Tick&) {
            services_.on_tick(now, actions, intents);
            admission_.check_deadlines(now, actions);
            supervision_.on_tick(w, now, actions, intents);
          },
          [&](const LeaseRequested& e) { admission_.on_requested(e, now, actions); },
          [&](const LeaseReleased& e) { admission_.on_released(e, now, actions); },
          [&](const LeaseHeartbeat& e) { admission_.on_heartbeat(e, now); },
          [&](const HolderExited& e) { admission_.on_holder_exited(e, now, actions); },
          [&](const ServiceCommand& e) { command(e.service, e.action, e.request_id, e.force); },
          [&](const ChildStarted& e) {
            supervision_.on_child_started(e, now, actions, intents);
            // Its arguments are `start`'s: a change of them is told before it can crash.
            services_.on_started(e.service, now, actions);
          },
          [&](const ChildExited& e) { supervision_.on_child_exited(e, w, now, actions, intents); },
          [&](const HealthChecked& e) {
            supervision_.on_health_checked(e, w, now, actions, intents);
          },
          [&](const RequestsInFlight& e) { services_.on_requests(e, now, actions); },
          [&](const ServiceDiscovered& e) { add_discovered(e.config, now, actions); },
          [&](const ClusterSynced& e) {
            admission_.on_cluster_synced(e, w, now, actions, intents);
          },
          [&](const WakeRequested& e) { wakes_.on_requested(e, w, now, actions, intents); },
          [&](const WakeCancelled& e) { wakes_.on_cancelled(e, w, now, actions, intents); },
          [&](const WakeCallDone& e) { wakes_.on_call_done(e, w, now, actions, intents); },
          [&](const StoreContact& e) { admission_.on_store_contact(e); },
          [&](const SuspendProbed& e) {
            services_.set_suspend_offered(e.offer.offered);
            admission_.on_suspend_probed(e, now, actions);
          },
          [&](const LeaseSuspendDone& e) { admission_.on_suspend_done(e, now, actions); },
          [&](const LeaseResumeDone& e) { admission_.on_resume_done(e, now, actions); },
          [&](const SuspensionChecked& e) {
            if (e.lease)
              admission_.on_suspension_checked(e, now, actions);
            else
              services_.on_suspension_checked(e, now, actions);
          },
          [&](const ShuttingDown&) {}},  // answered above
      event);
  // What may have changed a service's answers: its probe is not left backed off.
  const bool pending = decisions_pending(admission_, config_);
  if (auto service = service_moved(event)) services_.reset_pace(*service, pending, now, actions);
  if (const auto* h = std::get_if<HealthChecked>(&event))
    services_.on_health_seen(*h, now, actions);
  route(intents, now, actions);
  // Admission after anything that may change what fits (a heartbeat changes nothing).
  if (!std::holds_alternative<LeaseHeartbeat>(event) && admission_.wants_admission()) {
    services_.set_ram_room(sleep_ram_room());
    admission_.admit(w, now, actions, intents);
    route(intents, now, actions);
  }
  // Held requests' wakes move on with what changed (an unload's verdict, a start, a grant).
  wakes_.advance(w, now, actions, intents);
  if (!intents.empty()) {
    route(intents, now, actions);
    if (admission_.wants_admission()) {
      admission_.admit(w, now, actions, intents);
      route(intents, now, actions);
    }
  }
  // Fast sampling while any unload, suspend or resume is being verified.
  bool want_fast = services_.any_unloading() || admission_.moving_memory();
  if (want_fast != fast_sampling_on_) {
    fast_sampling_on_ = want_fast;
    actions.emplace_back(SetFastSampling{want_fast});
  }
  return actions;
}

void Arbiter::add_discovered(ServiceConfig cfg, const Now& now, std::vector<Action>& actions) {
  if (cfg.name.empty() || config_.find_service(cfg.name)) return;  // the shell names it anew
  // One server, one service: a configured (or already discovered) one at its url covers it.
  for (const auto& svc : config_.services)
    if (!cfg.url.empty() && svc.url == cfg.url) return;
  cfg.discovered = true;
  // Left alone: never evicted for a lease (nor unloaded, stopped or started: ServicePolicy).
  if (!config_.daemon.discover_unload) cfg.pinned = true;
  config_.services.push_back(std::move(cfg));
  const ServiceConfig& svc = config_.services.back();
  ledger_.services_changed();
  services_.add(svc);
  std::string match = !svc.match.container.empty()         ? "container " + svc.match.container
                      : !svc.match.compose_service.empty() ? "compose service " + svc.match.compose_service
                      : !svc.match.unit.empty()            ? "unit " + svc.match.unit
                                                           : "its port";
  actions.emplace_back(make_event(
      now, "service.discovered", std::nullopt, svc.name,
      fmt::format("discovered {} ({}) at {}, matched by {}; found by {}{}", svc.name, svc.kind,
                  svc.url, match, svc.discovered_by,
                  config_.daemon.discover_unload ? "" : "; left alone (discover_unload = false)")));
  actions.emplace_back(WatchService{svc.name});
}

void Arbiter::on_sample(const SampleTaken& s, const Now& now, std::vector<Action>& actions,
                        Intents& intents) {
  OwnerHints hints;
  hints.managed = supervision_.children();
  hints.unit_pids = supervision_.unit_main_pids();
  hints.lease_pids = admission_.granted_holder_pids();
  ledger_.on_sample(s, hints, services_.self_reports(), now, actions);
  const World w = world();
  services_.on_sample(ledger_, admission_.services_in_use(), decisions_pending(admission_, config_),
                      now, actions, intents);
  supervision_.verify_stops(w, now, actions);
  admission_.update_holdings(w, now, actions);
}

void Arbiter::route(Intents& intents, const Now& now, std::vector<Action>& actions) {
  const World w = world();
  // Each part may answer with intents of its own: hand them on until none is left.
  for (size_t i = 0; i < intents.size(); ++i) {
    Intent intent = intents[i];  // a copy: handling it may grow `intents`
    std::visit(
        Overloaded{[&](const UnloadIntent& u) {
                     if (!services_.find(u.service) || services_.unloading(u.service)) return;
                     services_.start_unload(u.service, u.reason, 0, now, actions);
                   },
                   [&](const CommandIntent& c) {
                     supervision_.command(c.service, c.action, 0, c.force, w, now, actions,
                                          intents);
                   },
                   [&](const LaunchIntent& l) {
                     supervision_.launch_granted(l.service, l.lease, w, now, actions, intents);
                   },
                   [&](const StartForLeaseIntent& s) {
                     supervision_.start_for_lease(s, w, now, actions, intents);
                   },
                   [&](const QueueStartLeaseIntent& q) {
                     uint64_t id = admission_.queue_start(q.request, now, actions);
                     supervision_.start_lease_queued(q.service, id, q.request, now, actions);
                   },
                   [&](const EndLeaseIntent& e) { admission_.end(e.lease, e.why, now, actions); },
                   [&](const QueueWakeLeaseIntent& q) {
                     uint64_t id = admission_.queue_wake(q.request, now, actions);
                     wakes_.on_claim_queued(q.service, id);
                   },
                   [&](const WakeGrantedIntent& g) {
                     wakes_.on_granted(g.lease, w, now, actions, intents);
                   },
                   [&](const WokenIntent& wk) { services_.on_woken(wk, now, actions); },
                   [&](const DeepenIntent& d) { services_.deepen(d, now, actions, intents); }},
        intent);
  }
  intents.clear();
}

std::optional<MonoTime> Arbiter::next_deadline() const {
  std::optional<MonoTime> out;
  for (auto t : {services_.next_deadline(), admission_.next_deadline(),
                 supervision_.next_deadline(), wakes_.next_deadline()})
    if (t && (!out || *t < *out)) out = t;
  return out;
}

bool Arbiter::ready_for(const std::string& service, const std::string& model, bool can_wake) const {
  const ServiceConfig* cfg = config_.find_service(service);
  const ServiceStatus* st = this->service(service);
  if (!cfg || !st) return true;
  if (wakes_.waking(service)) return false;  // join the wake under way
  return plan_wake(*st, *cfg, can_wake, model).step == WakeStep::ready;
}

std::optional<Bytes> Arbiter::sleep_ram_room() const {
  std::optional<Bytes> free = admission_.ram_available(ledger_.mem_available());
  std::optional<Bytes> total = ledger_.mem_total();
  if (!free || !total) return std::nullopt;
  Bytes reserve = config_.host.reserve_of(*total);
  return *free > reserve ? *free - reserve : 0;
}

std::vector<ServiceStatus> Arbiter::services() const {
  std::vector<ServiceStatus> out;
  for (const auto& svc : config_.services) out.push_back(*service(svc.name));
  return out;
}

const ServiceStatus* Arbiter::service(const std::string& name) const {
  const ServiceStatus* st = services_.find(name);
  if (!st) return nullptr;
  ServiceStatus& out = views_[name];
  out = *st;
  out.idle_since = idle_since(out);
  if (std::optional<ManagedState> m = supervision_.find(name)) {
    out.managed = *m;
    // While its start waits for room, its reason is the start lease's.
    if (m->state == ManagedPhase::queued && m->start_lease)
      if (const Lease* l = admission_.find(*m->start_lease);
          l && l->state == LeaseState::queued && l->reason.considered)
        out.managed->reason = l->reason.text;
  }
  return &out;
}

std::vector<Action> Arbiter::restore_leases(std::vector<Lease> leases,
                                            const std::vector<uint64_t>& alive, const Now& now,
                                            uint64_t first_free_id) {
  std::vector<Action> actions;
  admission_.restore(std::move(leases), alive, now, first_free_id, actions);
  return actions;
}

}  // namespace vramd
