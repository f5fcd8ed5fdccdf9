// Crashes of managed services in SQLite (state_dir/vramd.db): when, how it ended, the log's tail,
// who held the GPU then, and the diagnosis. Blocking: called from the daemon's store thread.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/result.h"
#include "core/units.h"

namespace SQLite {
class Database;
}

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
};

class CrashStore {
 public:
  static Result<std::unique_ptr<CrashStore>> open(const std::string& path);
  ~CrashStore();
  Result<int64_t> add(const CrashRecord& c);
  // Newest first; one service's when `service` is not empty.
  Result<std::vector<CrashRecord>> list(const std::string& service, size_t limit) const;

 private:
  explicit CrashStore(std::unique_ptr<SQLite::Database> db);
  std::unique_ptr<SQLite::Database> db_;
};

}  // namespace vramd
