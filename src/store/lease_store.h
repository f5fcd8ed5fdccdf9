// Leases and job history in the store (SQLite state_dir/vramd.db beside the events, or
// PostgreSQL). Active leases are
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
#include "store/event_store.h"

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
  // The SQLite one.
  static Result<std::unique_ptr<LeaseStore>> open(const std::string& path);
  virtual ~LeaseStore() = default;

  // An active lease is written as it is; an ended one leaves the active table for the jobs table,
  // in one transaction, with `events` (those telling this change, their ids given; one written
  // before is replaced). So a kill -9 never leaves a lease's end told and not done: the restarted
  // daemon would end it again, and tell it twice.
  // `now`: the clocks at the moment, to store the lease's (monotonic) times as wall times.
  virtual Status save(const Lease& lease, const Now& now,
                      const std::vector<StoredEvent>& events) = 0;
  Status save(const Lease& lease, const Now& now) { return save(lease, now, {}); }
  // The active leases, their times turned back into monotonic ones by `now`.
  virtual Result<std::vector<Lease>> active(const Now& now) const = 0;
  // The highest lease id ever stored (active or ended); 0 when none.
  virtual Result<uint64_t> max_id() const = 0;
  // Jobs, newest first; only those with `label` when it is not empty.
  virtual Result<std::vector<JobRecord>> jobs(const std::string& label, size_t limit) const = 0;
  // The job record of one ended lease; nullopt when none has that id.
  virtual Result<std::optional<JobRecord>> job(uint64_t id) const = 0;
};

// The job record an ended lease becomes (times to the millisecond, as stored).
JobRecord job_record(const Lease& l, const Now& now);

// Persistence form of a lease (also used by tests).
std::string lease_to_json(const Lease& l, const Now& now);
Result<Lease> lease_from_json(const std::string& text, const Now& now);

}  // namespace vramd
