// The process table: every process under a proc root (normally "/proc"; tests hand in a fake
// tree), with its identity (pid + start ticks), command line, user, RSS and cgroup.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/model.h"
#include "core/units.h"

namespace vramd {

struct MemInfo {
  std::optional<Bytes> total;      // MemTotal
  std::optional<Bytes> available;  // MemAvailable
};

class ProcTable {
 public:
  explicit ProcTable(std::string root = "/proc");

  // Every numeric directory under the root, sorted by pid. A process that vanishes while it is
  // read (no stat or status any more) is left out without a word.
  std::vector<ProcessInfo> read_all();
  // One process; nullopt when it does not exist (or vanished while read).
  std::optional<ProcessInfo> read(int pid);
  MemInfo read_meminfo() const;

  const std::string& root() const { return root_; }

 private:
  std::string user_name(unsigned uid);
  std::optional<ProcessInfo> read_one(int pid, std::optional<long long> boot_time_s);
  std::optional<long long> boot_time_s() const;

  std::string root_;
  std::map<unsigned, std::string> users_;  // uid → name, or the number when it has none
};

// Free helpers over a fresh ProcTable (no user-name cache kept between calls).
std::optional<ProcessInfo> read_process(const std::string& root, int pid);
// True when `pid` exists and started at `start_ticks`: a reused pid has other start ticks.
bool process_alive(const std::string& root, int pid, unsigned long long start_ticks);
MemInfo read_meminfo(const std::string& root = "/proc");
MemInfo parse_meminfo(const std::string& text);  // MemTotal and MemAvailable of a meminfo text

// Field 22 (starttime) and field 4 (ppid) of a /proc/PID/stat line; comm may hold spaces and ')'.
struct StatFields {
  std::string comm;  // between the first '(' and the last ')'
  int ppid = 0;
  unsigned long long start_ticks = 0;
  std::optional<unsigned long long> rss_pages;  // field 24, when present
};
std::optional<StatFields> parse_stat(std::string_view stat_line);

}  // namespace vramd
