// Wakes: the request path's half of the core (docs/proxy.md "Wake"). A request held for a
// service that cannot take it now (stopped, asleep, empty) is a WakeRequested; the plan is
// core/wake.h's; the room is claimed through admission (a lease of vramd's own, `wake`), not by
// a client's round trip; the adapter's wake is an action (CallWake); the outcome is WakeFinished.
// After the wake, the claim holds the room until the load shows on the GPU (the bytes reach the
// room, or grow and settle, or a deadline passes), so that the next admission pass does not hand
// out what the load is about to take. Every deadline is the injected clock's.
//
// One wake per service at a time: requests for a service already being woken join its wake.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/actions.h"
#include "core/clock.h"
#include "core/config.h"
#include "core/events.h"
#include "core/intents.h"
#include "core/wake.h"

namespace vramd {

class Wakes {
 public:
  // REQUIRES: `config` outlives it (the Arbiter owns both).
  explicit Wakes(const Config& config) : config_(config) {}

  void on_requested(const WakeRequested& e, const World& world, const Now& now,
                    std::vector<Action>& actions, Intents& intents);
  void on_cancelled(const WakeCancelled& e, const World& world, const Now& now,
                    std::vector<Action>& actions, Intents& intents);
  void on_call_done(const WakeCallDone& e, const World& world, const Now& now,
                    std::vector<Action>& actions, Intents& intents);
  // The claim `lease` was queued for `service`'s wake (QueueWakeLeaseIntent's answer).
  void on_claim_queued(const std::string& service, uint64_t lease);
  // The claim was granted: call the wake (or let the load through).
  void on_granted(uint64_t lease, const World& world, const Now& now, std::vector<Action>& actions,
                  Intents& intents);
  // After every event: wakes that wait on an unload, a start or a queued claim move on; loads
  // under verification settle; deadlines pass; a held request hears of a new wait reason.
  void advance(const World& world, const Now& now, std::vector<Action>& actions,
               Intents& intents);

  std::optional<MonoTime> next_deadline() const;
  // A wake under way for this service (for status and tests).
  bool waking(const std::string& service) const { return runs_.count(service) > 0; }
  // Claims (lease ids) still holding room for a load that has not shown yet.
  size_t loads_verifying() const { return loads_.size(); }
  // Whether a granted lease is a wake's claim that the core ends itself.
  bool owns_claim(uint64_t lease) const;
  // A prewarm under way for this service.
  bool prewarming(const std::string& service) const;

 private:
  enum class Phase {
    waiting_unload,  // the service is being unloaded: wait for the verdict, then plan again
    starting,        // a start was asked (through start admission): wait for it to run
    claiming,        // its claim waits for room
    calling,         // CallWake sent, WakeCallDone not yet in
  };
  struct Run {
    std::string service;
    std::string model;
    bool can_wake = false;
    std::vector<uint64_t> ids;  // the requests waiting on it
    Phase phase = Phase::claiming;
    WakeStep step = WakeStep::ready;
    std::optional<LoadNeed> room;
    std::optional<SleepDepth> depth;
    std::optional<uint64_t> claim;
    MonoTime requested_at{};
    MonoTime deadline{};
    std::optional<MonoTime> call_at;
    std::optional<MonoTime> started_at;  // starting: when it was seen starting
    std::string progress;                // the last reason told
    // A prewarm (docs/proxy.md "Prewarm"): woken ahead of demand, with this chance of a request
    // within kPrewarmHorizon. Requests may join it; it is then theirs as well.
    bool prewarm = false;
    double chance = 0;
    // Of a prewarm: a suspended service nothing can ask (no request path: a `process`), taken
    // back as soon as its room is free, as a suspended lease is; not a prewarm for its counts.
    bool unasked = false;
  };
  // A load that was let through, whose claim holds its room until it shows on the GPU.
  struct Load {
    std::string service;
    uint64_t lease = 0;
    Bytes room = 0;
    Bytes from = 0;  // what the service held when the load began
    MonoTime until{};
    Bytes last = 0;
    int steady = 0;        // samples in a row at a grown, unchanged size
    MonoTime sampled_at{};  // the last sample counted
    bool prewarm = false;   // a prewarm's: its room goes back as soon as someone wants room
  };

  // Plans (again) and moves the run on; false when it finished.
  bool plan(Run& run, const World& world, const Now& now, std::vector<Action>& actions,
            Intents& intents);
  void finish(Run& run, WakeOutcome outcome, const std::string& message, const World& world,
              const Now& now, std::vector<Action>& actions, Intents& intents,
              const std::string& holder = "");
  void progress(Run& run, std::string text, std::vector<Action>& actions);
  void hold_until_loaded(const Run& run, const World& world, const Now& now);
  std::vector<std::string> evicted_for(const Run& run, const World& world) const;
  // When the GPUs have room nobody wants: wake the sleeper most worth waking ahead of demand.
  void consider_prewarm(const World& world, const Now& now, std::vector<Action>& actions,
                        Intents& intents);
  std::string what_for(const Run& run) const;

  const Config& config_;
  std::map<std::string, Run> runs_;  // by service
  std::map<uint64_t, std::string> claim_of_;  // claim lease -> service (runs under way)
  std::map<uint64_t, Load> loads_;            // by claim lease
  std::optional<MonoTime> next_prewarm_check_;
  std::map<std::string, MonoTime> no_prewarm_until_;  // a prewarm cancelled for a lease: not again soon
};

}  // namespace vramd
