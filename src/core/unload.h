// Verified unload (DESIGN.md): after a server accepts an unload call, follow the service's bytes
// on the GPU until they are stable (3 samples within 64 MiB) after a drop, or until a timeout,
// and give a verdict from the GPU's numbers, never from the server's answer.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/model.h"
#include "core/service_model.h"
#include "core/sleep.h"

namespace vramd {

enum class UnloadOutcome {
  freed,        // the service's bytes came down to a context's worth (or it held nothing)
  partial,      // some came back, a real amount stayed
  ineffective,  // nothing measurable came back before the timeout
  failed,       // the call itself failed, or the server has no unload call
};
const char* to_string(UnloadOutcome o);

// What `vramd free` and POST /v1/services/NAME/unload return.
struct UnloadVerdict {
  uint64_t id = 0;
  std::string service;
  UnloadReason reason = UnloadReason::manual;
  UnloadOutcome outcome = UnloadOutcome::failed;
  Bytes before_bytes = 0;  // Σ over GPUs
  Bytes after_bytes = 0;
  std::vector<std::pair<unsigned, std::pair<Bytes, Bytes>>> per_gpu;  // gpu → (before, after)
  std::optional<Bytes> rss_before, rss_after;  // host RAM of the service's processes
  // From the request to the memory settling (the first sample at its final level; the verdict
  // follows two samples later), or to the timeout when nothing settled.
  Duration duration{0};
  Duration call_duration{0};                   // how long the server took to answer the call
  Escalation escalation = Escalation::none;
  SleepDepth depth = SleepDepth::sleep2;       // how deep it was asked to sleep (core/sleep.h)
  Bytes host_ram_kept = 0;                     // what the sleep keeps in host RAM
  std::string message;
  TimePoint at{};  // wall time of the verdict: for people
};

// Thresholds of the verdict, named so docs and tests say the same thing.
constexpr Bytes kStableWithin = 64 * MiB;  // 3 samples within this: settled
constexpr int kStableSamples = 3;
constexpr Bytes kFreedAtMost = 1 * GiB;    // after ≤ max(this, 10% of before): freed
constexpr Bytes kIneffectiveBelow = 64 * MiB;  // freed < max(this, 5% of before): ineffective

// Classifies a settled (or timed-out) unload.
UnloadOutcome classify_unload(Bytes before, Bytes after);

// Follows one unload from the moment the call returned.
class UnloadVerification {
 public:
  UnloadVerification(Bytes before, MonoTime call_returned, Duration timeout)
      : before_(before), start_(call_returned), timeout_(timeout) {}

  // One sample of the service's bytes (Σ over its GPUs) at `t`.
  void add_sample(MonoTime t, Bytes bytes);
  // Settled: the bytes dropped and the last kStableSamples are within kStableWithin; or the
  // service held nothing to begin with.
  bool settled() const;
  bool timed_out(MonoTime now) const { return now - start_ >= timeout_; }
  bool done(MonoTime now) const { return settled() || timed_out(now); }
  // The last sample; `before` when none came.
  Bytes current() const { return samples_.empty() ? before_ : samples_.back().second; }
  // When the bytes first reached (within kStableWithin) their final level; nullopt if never.
  std::optional<MonoTime> settled_at() const;
  Bytes before() const { return before_; }
  MonoTime start() const { return start_; }

 private:
  Bytes before_;
  MonoTime start_;
  Duration timeout_;
  std::vector<std::pair<MonoTime, Bytes>> samples_;
};

}  // namespace vramd
