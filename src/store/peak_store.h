// Services' load peaks and wake times in the store (SQLite state_dir/vramd.db beside the events, or PostgreSQL): the most each held with
// each model, learned by the core (core/wake.h) and brought back at the next start of vramd, so
// a wake or start after a restart is admitted for what the service really takes. Blocking: the
// daemon calls it from its store thread.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/demand.h"
#include "core/result.h"
#include "core/service_status.h"
#include "core/units.h"

namespace vramd {

class PeakStore {
 public:
  // The SQLite one.
  static Result<std::unique_ptr<PeakStore>> open(const std::string& path);
  virtual ~PeakStore() = default;
  // Keeps the larger of what is stored and `peak.bytes` for (service, model).
  virtual Status save(const LoadPeak& peak, TimePoint at) = 0;
  // Every stored peak (this host's), by service then model.
  virtual Result<std::vector<LoadPeak>> all() const = 0;
  // Wake times (core/sleep.h WakeTime), learned the same way: the latest for (service, model,
  // depth) replaces the one stored.
  virtual Status save_wake(const WakeTime& t, TimePoint at) = 0;
  virtual Result<std::vector<WakeTime>> wake_times() const = 0;
  // Demand histograms (core/demand.h), one per service: the latest replaces the one stored.
  virtual Status save_demand(const DemandHistory& d) = 0;
  virtual Result<std::vector<DemandHistory>> demand() const = 0;
};

}  // namespace vramd
