// Leases and job history in SQLite (state_dir/vramd.db, beside the events). Active leases are
// kept so the queue survives a restart, kill -9 included; an ended lease becomes a job record.
// Blocking: the daemon calls it from its store thread.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/clock.h"
#include "core/lease.h"
#include "core/result.h"

namespace SQLite {
class Database;
}

namespace vramd {

// A finished lease: what a job waited, ran and used.
struct JobRecord {
  uint64_t id = 0;
  std::string label, command, holder;
  LeaseState state = LeaseState::released;
  std::optional<unsigned> gpu;
  Bytes vram = 0;
  TimePoint requested_at{};
  Duration wait{0};                 // request to grant (or to the end when never granted)
  std::optional<Duration> run;      // grant to end
  Bytes peak_vram = 0;
  std::optional<int> exit_status;
  std::string end_reason;
};

class LeaseStore {
 public:
  static Result<std::unique_ptr<LeaseStore>> open(const std::string& path);
  ~LeaseStore();

  // An active lease is written as it is; an ended one leaves the active table for the jobs table,
  // in one transaction.
  // `now`: the clocks at the moment, to store the lease's (monotonic) times as wall times.
  Status save(const Lease& lease, const Now& now);
  // The active leases, their times turned back into monotonic ones by `now`.
  Result<std::vector<Lease>> active(const Now& now) const;
  // The highest lease id ever stored (active or ended); 0 when none.
  Result<uint64_t> max_id() const;
  // Jobs, newest first; only those with `label` when it is not empty.
  Result<std::vector<JobRecord>> jobs(const std::string& label, size_t limit) const;
  // The job record of one ended lease; nullopt when none has that id.
  Result<std::optional<JobRecord>> job(uint64_t id) const;

 private:
  explicit LeaseStore(std::unique_ptr<SQLite::Database> db);
  std::unique_ptr<SQLite::Database> db_;
};

// Persistence form of a lease (also used by tests).
std::string lease_to_json(const Lease& l, const Now& now);
Result<Lease> lease_from_json(const std::string& text, const Now& now);

}  // namespace vramd
