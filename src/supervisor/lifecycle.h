// Lifecycle backends: start, stop and restart of services vramd does not run itself, through
// their own manager (the Docker Engine API for containers, systemctl for units).
#pragma once

#include <memory>
#include <string>

#include "core/actions.h"
#include "core/events.h"
#include "host/systemd.h"

namespace vramd {

class LifecycleBackend {
 public:
  virtual ~LifecycleBackend() = default;
  // Blocking (the daemon calls it on its worker): does `lc` and says how it went.
  virtual LifecycleDone run(const Lifecycle& lc) = 0;
};

// Containers through the Engine API on `docker_socket`, units through `systemctl` (`tools`):
// a stop or restart is done when systemctl is (it waits for systemd's job: the unit inactive,
// or active again), a stop of a unit that was not active changes nothing.
std::unique_ptr<LifecycleBackend> make_lifecycle_backend(std::string docker_socket,
                                                         SystemdTools tools = {});

}  // namespace vramd
