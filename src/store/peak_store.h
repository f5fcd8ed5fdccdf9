// Services' load peaks in SQLite (state_dir/vramd.db, beside the events): the most each held with
// each model, learned by the core (core/wake.h) and brought back at the next start of vramd, so
// a wake or start after a restart is admitted for what the service really takes. Blocking: the
// daemon calls it from its store thread.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/result.h"
#include "core/service_status.h"
#include "core/units.h"

namespace SQLite {
class Database;
}

namespace vramd {

class PeakStore {
 public:
  static Result<std::unique_ptr<PeakStore>> open(const std::string& path);
  ~PeakStore();
  // Keeps the larger of what is stored and `peak.bytes` for (service, model).
  Status save(const LoadPeak& peak, TimePoint at);
  // Every stored peak, by service then model.
  Result<std::vector<LoadPeak>> all() const;

 private:
  explicit PeakStore(std::unique_ptr<SQLite::Database> db);
  std::unique_ptr<SQLite::Database> db_;
};

}  // namespace vramd
