// JSON shapes of the API (docs/api.md): the core's snapshots as the world sees them.
#pragma once

#include <nlohmann/json.hpp>

#include "core/arbiter.h"
#include "core/suspend.h"
#include "store/lease_store.h"

namespace vramd {

// The core keeps monotonic times; `now` turns them into the wall times people read.
nlohmann::json to_json(const Holding& h, const Now& now);
nlohmann::json to_json(const GpuStatus& g, const Now& now);
nlohmann::json to_json(const StatusSnapshot& s, const Now& now);
// Whether suspend is offered here (/v1/status "suspend").
nlohmann::json to_json(const SuspendOffer& s);
nlohmann::json to_json(const HistoryView& v, unsigned gpu, const Now& now);
nlohmann::json to_json(const EventRecord& e);
nlohmann::json to_json(const UnloadVerdict& v);
nlohmann::json to_json(const ServiceChange& c);
nlohmann::json to_json(const ServiceStatus& s, const Now& now);
// A lease as the API shows it; `arbiter` fills its queue position and, for a lease behind
// another, which one.
nlohmann::json to_json(const Lease& l, const Arbiter& arbiter, const Now& now);
// A lease as another host's row in the shared store has it (GET /v1/leases?host=all): no queue
// position nor CUDA_VISIBLE_DEVICES (those are that host's to know); its reason as the row has it.
nlohmann::json to_json(const Lease& l, const Now& now);
nlohmann::json to_json(const JobRecord& j);

// {"error": {"code": code, "message": message}}
nlohmann::json error_json(const std::string& code, const std::string& message);

}  // namespace vramd
