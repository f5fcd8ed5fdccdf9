// Durations history in the store (SQLite state_dir/vramd.db beside the events, or PostgreSQL):
// each ComfyUI prompt's and each proxied request's times (core/durations.h), and the versions
// and argument sets each service ran with. Written in batches on the store thread, never on the
// request path; kept `history_retention`. Blocking: the daemon calls it from its store thread.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/durations.h"
#include "core/result.h"

namespace vramd {

class DurationStore {
 public:
  // The SQLite one.
  static Result<std::unique_ptr<DurationStore>> open(const std::string& path);
  virtual ~DurationStore() = default;

  // Adds the records in one transaction. A prompt (kind prompt, key not empty) already stored
  // for the same service and key is left as it is: a prompt read twice counts once.
  virtual Status add(const std::vector<DurationRecord>& records) = 0;
  // Records matching `q`, newest first, at most q.limit.
  virtual Result<std::vector<DurationRecord>> list(const DurationQuery& q) const = 0;
  // Keeps one row per (service, version, args_fp): the first one saved stays (its first_seen
  // and args).
  virtual Status save_variant(const ServiceVariant& v) = 0;
  // The variants of `service` ("" = every service), oldest first_seen first.
  virtual Result<std::vector<ServiceVariant>> variants(const std::string& service) const = 0;
  // Drops the records that ended before `before` (variants are kept: they are few).
  virtual Result<int64_t> prune(TimePoint before) = 0;
};

}  // namespace vramd
