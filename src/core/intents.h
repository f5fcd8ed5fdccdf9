// How one part of the core asks another to act in its domain: a part never writes another part's
// state; it returns an intent, and the Arbiter routes it to the part that owns that state
// (core/arbiter.cc). Reading another part's state is allowed, through World.
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "core/lease.h"
#include "core/service_status.h"

namespace vramd {

class Admission;
class Ledger;
class ServicePolicy;
class Supervision;
struct Config;

// Everything the core knows, read-only: what a part may look at in the others.
struct World {
  const Config& config;
  const Ledger& ledger;
  const ServicePolicy& services;
  const Supervision& supervision;
  const Admission& admission;
};

// To service policy: unload this service (reason "eviction", "group"); `for_lease` is the lease
// it makes room for (0: none).
struct UnloadIntent {
  std::string service;
  std::string reason;
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

using Intent = std::variant<UnloadIntent, CommandIntent, LaunchIntent, StartForLeaseIntent,
                            QueueStartLeaseIntent, EndLeaseIntent>;
using Intents = std::vector<Intent>;

}  // namespace vramd
