// Per-owner memory history of one GPU in bounded memory: one frame per sample for the last hour,
// one averaged frame per minute for the last 24 hours.
#pragma once

#include <deque>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/model.h"

namespace vramd {

// Columnar, as a chart wants it: times[i] and, per owner, values[i] (bytes; 0 when absent).
struct HistorySeries {
  Owner owner;
  std::vector<Bytes> values;
};
struct HistoryView {
  std::vector<MonoTime> times;
  std::vector<HistorySeries> series;
  Bytes total = 0;
};

class History {
 public:
  struct Limits {
    Duration fine_span = std::chrono::hours(1);
    Duration coarse_step = std::chrono::minutes(1);
    Duration coarse_span = std::chrono::hours(24);
  };
  History() : History(Limits{}) {}
  explicit History(Limits limits) : limits_(limits) {}

  // Adds one sample's holdings. `t` must not go backwards (an older sample is ignored).
  void add(MonoTime t, Bytes total, const std::vector<Holding>& holdings);

  // The frames in (now - window, now]: fine frames when the window fits in the fine span, else
  // coarse ones. At most `max_points` (frames are thinned by taking every k-th).
  HistoryView view(MonoTime now, Duration window, size_t max_points = 1000) const;

  size_t fine_frames() const { return fine_.size(); }
  size_t coarse_frames() const { return coarse_.size(); }
  size_t owners_interned() const { return owners_.size(); }

 private:
  struct Frame {
    MonoTime t;
    std::vector<std::pair<uint32_t, Bytes>> bytes;  // (owner id, bytes)
  };
  uint32_t intern(const Owner& o);
  void compact_owners();

  Limits limits_;
  Bytes total_ = 0;
  std::deque<Frame> fine_;
  std::deque<Frame> coarse_;
  // The minute being averaged into the next coarse frame.
  MonoTime bucket_start_{};
  int bucket_samples_ = 0;
  std::unordered_map<uint32_t, long double> bucket_sum_;
  std::vector<Owner> owners_;
  std::map<Owner, uint32_t> owner_ids_;
};

}  // namespace vramd
