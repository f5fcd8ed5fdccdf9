// The daemon's stores, all in one SQLite file (state_dir/vramd.db): events, leases and jobs,
// crashes, load peaks. One place opens them.
#pragma once

#include <memory>
#include <string>

#include "core/result.h"
#include "store/crash_store.h"
#include "store/event_store.h"
#include "store/lease_store.h"
#include "store/peak_store.h"

namespace vramd {

struct Stores {
  std::shared_ptr<EventStore> events;
  std::shared_ptr<LeaseStore> leases;
  std::shared_ptr<CrashStore> crashes;
  std::shared_ptr<PeakStore> peaks;
};

// Opens (creating when new) the stores in `state_dir`/vramd.db; `events_retention` events kept.
// REQUIRES: `state_dir` exists.
Result<Stores> open_stores(const std::string& state_dir, int64_t events_retention);

}  // namespace vramd
