// Crashes of managed services in the store (SQLite state_dir/vramd.db, or PostgreSQL): when, how it ended, the log's tail,
// who held the GPU then, and the diagnosis. Blocking: called from the daemon's store thread.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/result.h"
#include "core/units.h"

namespace vramd {

struct CrashRecord {
  int64_t id = 0;
  std::string service;
  TimePoint at{};
  int pid = 0;
  std::optional<int> exit_code;
  std::optional<int> signal;
  std::string reason;  // vramd's own cause when it ended the process ("start timed out ...")
  std::string signature, title, explanation, suggestion;
  std::vector<std::string> evidence;
  std::vector<std::string> log_tail;
  std::vector<std::pair<std::string, Bytes>> gpu_holders;
  // What it ran (core/durations.h): its version and argument set then; "" when unknown.
  std::string version, args_fp;
};

// The stored form of a crash's details (what both stores keep beside service and time).
std::string crash_data_json(const CrashRecord& c);
// Fills `c` from crash_data_json's text; false when it is not such a text (the row is skipped).
bool crash_data_from_json(const std::string& text, CrashRecord& c);

class CrashStore {
 public:
  // The SQLite one.
  static Result<std::unique_ptr<CrashStore>> open(const std::string& path);
  virtual ~CrashStore() = default;
  virtual Result<int64_t> add(const CrashRecord& c) = 0;
  // Newest first; one service's when `service` is not empty.
  virtual Result<std::vector<CrashRecord>> list(const std::string& service, size_t limit) const = 0;
};

}  // namespace vramd
