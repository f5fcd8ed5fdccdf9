#include "store/stores.h"

#include <filesystem>

namespace vramd {

Result<Stores> open_stores(const std::string& state_dir, int64_t events_retention) {
  std::string db = (std::filesystem::path(state_dir) / "vramd.db").string();
  Stores out;
  auto events = EventStore::open(db, events_retention);
  if (!events) return make_error(events.error());
  out.events = std::move(*events);
  auto leases = LeaseStore::open(db);
  if (!leases) return make_error(leases.error());
  out.leases = std::move(*leases);
  auto crashes = CrashStore::open(db);
  if (!crashes) return make_error(crashes.error());
  out.crashes = std::move(*crashes);
  auto peaks = PeakStore::open(db);
  if (!peaks) return make_error(peaks.error());
  out.peaks = std::move(*peaks);
  return out;
}

}  // namespace vramd
