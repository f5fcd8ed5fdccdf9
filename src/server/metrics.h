// GET /metrics: the Prometheus text exposition format (docs/metrics.md). Gauges come from the
// Arbiter's snapshot at scrape time; counters from what the daemon saw since it started.
#pragma once

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/arbiter.h"

namespace vramd {

// Counters fed by the daemon as its actions go by (and by crash diagnoses). Event-loop only.
class MetricsCounters {
 public:
  // Looks at one action: unload verdicts, lease grants (wait time), restarts of units and
  // containers. Everything else is ignored.
  void observe(const Action& action);
  // A crash diagnosed with this signature.
  void crash(const std::string& service, const std::string& signature);

  // The lease wait histogram's upper bounds, in seconds.
  static const std::vector<double>& wait_buckets();

  std::map<std::pair<std::string, std::string>, uint64_t> unloads;  // (service, outcome)
  std::map<std::string, Bytes> freed;                                 // service -> bytes
  std::map<std::pair<std::string, std::string>, uint64_t> crashes;   // (service, signature)
  std::map<std::string, uint64_t> lifecycle_restarts;                 // containers and units
  std::map<std::string, uint64_t> lease_ends;  // end state ("released", "lost", ...) -> leases
  std::vector<uint64_t> wait_counts;  // per bucket (not cumulative), then +Inf
  uint64_t wait_count = 0;
  double wait_sum = 0;
  double suspended_seconds = 0;  // preemptible leases' time suspended, summed at each resume
  uint64_t suspends = 0, suspend_failures = 0;
  // NVML calls by entry point, as the last sample's reader counted them (GpuReading::nvml_calls).
  std::vector<std::pair<std::string, uint64_t>> nvml_calls;

 private:
  std::set<uint64_t> waited_;  // granted leases already observed (until they end)
  std::map<uint64_t, TimePoint> suspended_since_;  // lease -> when its lease.suspended was told
};

// The whole exposition: HELP and TYPE lines, then samples.
// `host`: the daemon's [daemon] host, a label of vramd_build_info when not empty.
std::string render_metrics(const Arbiter& arbiter, const MetricsCounters& counters, const Now& now,
                           const std::string& host = "");

// Label value escaping of the text format: backslash, double quote and newline.
std::string escape_label(std::string_view value);

}  // namespace vramd
