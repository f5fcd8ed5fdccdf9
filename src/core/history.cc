#include "core/history.h"

#include <algorithm>
#include <map>
#include <set>

namespace vramd {

uint32_t History::intern(const Owner& o) {
  auto it = owner_ids_.find(o);
  if (it != owner_ids_.end()) return it->second;
  uint32_t id = static_cast<uint32_t>(owners_.size());
  owners_.push_back(o);
  owner_ids_.emplace(o, id);
  return id;
}

// Short-lived process owners would grow the owner table without end: drop those that no frame
// refers to any more.
void History::compact_owners() {
  std::set<uint32_t> live;
  for (const auto* frames : {&fine_, &coarse_})
    for (const auto& f : *frames)
      for (const auto& [id, b] : f.bytes) live.insert(id);
  for (const auto& [id, sum] : bucket_sum_) live.insert(id);
  std::vector<uint32_t> remap(owners_.size(), UINT32_MAX);
  std::vector<Owner> owners;
  for (uint32_t id : live) {
    remap[id] = static_cast<uint32_t>(owners.size());
    owners.push_back(owners_[id]);
  }
  for (auto* frames : {&fine_, &coarse_})
    for (auto& f : *frames)
      for (auto& entry : f.bytes) entry.first = remap[entry.first];
  std::unordered_map<uint32_t, long double> bucket;
  for (const auto& [id, sum] : bucket_sum_) bucket[remap[id]] = sum;
  bucket_sum_ = std::move(bucket);
  owners_ = std::move(owners);
  owner_ids_.clear();
  for (uint32_t i = 0; i < owners_.size(); ++i) owner_ids_.emplace(owners_[i], i);
}

void History::add(MonoTime t, Bytes total, const std::vector<Holding>& holdings) {
  if (!fine_.empty() && t <= fine_.back().t) return;
  total_ = total;
  Frame f{t, {}};
  for (const auto& h : holdings) {
    if (h.bytes == 0) continue;
    uint32_t id = intern(h.owner);
    auto it = std::find_if(f.bytes.begin(), f.bytes.end(), [&](auto& e) { return e.first == id; });
    if (it != f.bytes.end()) it->second += h.bytes;
    else f.bytes.emplace_back(id, h.bytes);
  }

  // Close the minute bucket when t leaves it.
  if (bucket_samples_ > 0 && t >= bucket_start_ + limits_.coarse_step) {
    Frame c{bucket_start_, {}};
    for (const auto& [id, sum] : bucket_sum_)
      c.bytes.emplace_back(id, static_cast<Bytes>(sum / bucket_samples_));
    std::sort(c.bytes.begin(), c.bytes.end());
    coarse_.push_back(std::move(c));
    bucket_sum_.clear();
    bucket_samples_ = 0;
  }
  if (bucket_samples_ == 0) {
    auto step = limits_.coarse_step.count();
    bucket_start_ = MonoTime(Duration(t.time_since_epoch().count() / step * step));
  }
  for (const auto& [id, b] : f.bytes) bucket_sum_[id] += b;
  ++bucket_samples_;

  fine_.push_back(std::move(f));
  while (!fine_.empty() && fine_.front().t <= t - limits_.fine_span) fine_.pop_front();
  while (!coarse_.empty() && coarse_.front().t <= t - limits_.coarse_span) coarse_.pop_front();
  if (owners_.size() > 1024 && owners_.size() % 1024 == 1) compact_owners();
}

HistoryView History::view(MonoTime now, Duration window, size_t max_points) const {
  HistoryView v;
  v.total = total_;
  const auto& frames = window <= limits_.fine_span ? fine_ : coarse_;
  std::vector<const Frame*> picked;
  for (const auto& f : frames)
    if (f.t > now - window && f.t <= now) picked.push_back(&f);
  if (max_points > 0 && picked.size() > max_points) {
    size_t k = (picked.size() + max_points - 1) / max_points;
    std::vector<const Frame*> thin;
    // Keep the newest frame so the chart ends at the present.
    for (size_t i = picked.size(); i-- > 0;)
      if ((picked.size() - 1 - i) % k == 0) thin.push_back(picked[i]);
    std::reverse(thin.begin(), thin.end());
    picked = std::move(thin);
  }
  std::map<uint32_t, size_t> column;
  for (const Frame* f : picked)
    for (const auto& [id, b] : f->bytes)
      if (!column.count(id)) {
        column[id] = v.series.size();
        v.series.push_back({owners_[id], std::vector<Bytes>(picked.size(), 0)});
      }
  for (size_t i = 0; i < picked.size(); ++i) {
    v.times.push_back(picked[i]->t);
    for (const auto& [id, b] : picked[i]->bytes) v.series[column[id]].values[i] = b;
  }
  return v;
}

}  // namespace vramd
