// How one part of the core asks another to act in its domain: a part never writes another part's
// state; it returns an intent, and the Arbiter routes it to the part that owns that state
// (core/arbiter.cc). Reading another part's state is allowed, through World.
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "core/lease.h"
#include "core/policies.h"
#include "core/service_status.h"
#include "core/sleep.h"

namespace vramd {

class Admission;
class Ledger;
class ServicePolicy;
class Supervision;
class Wakes;
struct Config;

// Everything the core knows, read-only: what a part may look at in the others.
struct World {
  const Config& config;
  const Ledger& ledger;
  const ServicePolicy& services;
  const Supervision& supervision;
  const Admission& admission;
  const Wakes& wakes;
};

// To service policy: unload this service (for an eviction, a group); `for_lease` is the lease
// it makes room for (0: none).
struct UnloadIntent {
  std::string service;
  UnloadReason reason = UnloadReason::eviction;
  uint64_t for_lease = 0;
};
// To supervision: start, stop or restart a service (an escalation, an exclusive group, a lease).
struct CommandIntent {
  std::string service;
  Command action = Command::start;
  bool force = false;  // start without start admission (a lease holds the room already)
};
// To supervision: the start lease of this service was granted: launch it.
struct LaunchIntent {
  std::string service;
  uint64_t lease = 0;
};
// To supervision: a granted lease names this service; start it if it is down.
struct StartForLeaseIntent {
  std::string service;
  uint64_t lease = 0;
  std::string lease_owner;  // "flux#7"
};
// To admission: queue vramd's own lease for starting a service (start admission).
struct QueueStartLeaseIntent {
  std::string service;
  LeaseRequest request;
};
// To admission: end this lease (granted: released; queued: cancelled).
struct EndLeaseIntent {
  uint64_t lease = 0;
  std::string why;
};

// To admission: queue the room a request's wake needs (an internal claim, core/wakes.h).
struct QueueWakeLeaseIntent {
  std::string service;
  LeaseRequest request;
};
// To the wakes: the claim of a wake was granted.
struct WakeGrantedIntent {
  uint64_t lease = 0;
};
// To service policy: the service was woken from `depth` in `took` (for `model`): it is awake.
struct WokenIntent {
  std::string service;
  std::string model;
  SleepDepth depth = SleepDepth::sleep1;
  Duration took{0};
  bool measured = true;  // false: it was made ready without a call (a start's own figure)
  bool prewarm = false;  // woken by a prewarm, not for a request
};
// To service policy: host RAM is short; deepen a sleeper that keeps some (`needs`: how much).
struct DeepenIntent {
  Bytes needs = 0;
  std::string why;
};

using Intent = std::variant<UnloadIntent, CommandIntent, LaunchIntent, StartForLeaseIntent,
                            QueueStartLeaseIntent, EndLeaseIntent, QueueWakeLeaseIntent,
                            WakeGrantedIntent, WokenIntent, DeepenIntent>;
using Intents = std::vector<Intent>;

}  // namespace vramd
