#include "core/unload.h"

#include <algorithm>

namespace vramd {

const char* to_string(UnloadOutcome o) {
  switch (o) {
    case UnloadOutcome::freed: return "freed";
    case UnloadOutcome::partial: return "partial";
    case UnloadOutcome::ineffective: return "ineffective";
    case UnloadOutcome::failed: return "failed";
  }
  return "?";
}

const char* to_string(UnloadCall::Result r) {
  switch (r) {
    case UnloadCall::Result::requested: return "requested";
    case UnloadCall::Result::not_supported: return "not_supported";
    case UnloadCall::Result::failed: return "failed";
  }
  return "?";
}

UnloadOutcome classify_unload(Bytes before, Bytes after) {
  if (before < kIneffectiveBelow) return UnloadOutcome::freed;  // nothing to free
  Bytes freed = before > after ? before - after : 0;
  if (after <= std::max(kFreedAtMost, before / 10)) return UnloadOutcome::freed;
  if (freed < std::max(kIneffectiveBelow, before / 20)) return UnloadOutcome::ineffective;
  return UnloadOutcome::partial;
}

void UnloadVerification::add_sample(MonoTime t, Bytes bytes) {
  if (t < start_) return;  // read before the call returned
  if (!samples_.empty() && t <= samples_.back().first) return;  // the same sample again
  samples_.emplace_back(t, bytes);
}

bool UnloadVerification::settled() const {
  if (before_ < kIneffectiveBelow) return true;
  if (samples_.size() < static_cast<size_t>(kStableSamples)) return false;
  // Nothing moved yet: the server may apply the unload later (ComfyUI answers /free first and
  // frees after the running prompt), so only the timeout can call it ineffective.
  Bytes last = samples_.back().second;
  if (before_ <= last + kStableWithin) return false;
  auto [lo, hi] = std::minmax_element(samples_.end() - kStableSamples, samples_.end(),
                                      [](auto& a, auto& b) { return a.second < b.second; });
  return hi->second - lo->second <= kStableWithin;
}

std::optional<MonoTime> UnloadVerification::settled_at() const {
  if (samples_.empty()) return std::nullopt;
  Bytes last = samples_.back().second;
  std::optional<MonoTime> at;
  for (auto it = samples_.rbegin(); it != samples_.rend(); ++it) {
    Bytes diff = it->second > last ? it->second - last : last - it->second;
    if (diff > kStableWithin) break;
    at = it->first;
  }
  return at;
}

}  // namespace vramd
