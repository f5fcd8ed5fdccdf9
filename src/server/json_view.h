// JSON shapes of the API (docs/api.md): the core's snapshots as the world sees them.
#pragma once

#include <nlohmann/json.hpp>

#include "core/arbiter.h"
#include "store/lease_store.h"

namespace vramd {

nlohmann::json to_json(const Holding& h);
nlohmann::json to_json(const GpuStatus& g);
nlohmann::json to_json(const StatusSnapshot& s);
nlohmann::json to_json(const HistoryView& v, unsigned gpu);
nlohmann::json to_json(const EventRecord& e);
nlohmann::json to_json(const UnloadVerdict& v);
nlohmann::json to_json(const ServiceStatus& s, TimePoint now);
// A lease as the API shows it; `arbiter` fills its queue position and, for a lease behind
// another, which one.
nlohmann::json to_json(const Lease& l, const Arbiter& arbiter);
nlohmann::json to_json(const JobRecord& j);

// {"error": {"code": code, "message": message}}
nlohmann::json error_json(const std::string& code, const std::string& message);

}  // namespace vramd
