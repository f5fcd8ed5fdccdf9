// When each service is asked for (docs/proxy.md "Prewarm"): the starts of its busy spells (a
// request through the proxy after none was in flight, a probe that turns busy), kept as a
// time-of-week histogram of the wall clock (168 hours, Monday 00:00 UTC first) and as the
// recent ones. From them, the chance that it is asked within a horizon: what a prewarm decides
// on. Pure values; the store keeps the histogram across restarts.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <string_view>

#include "core/clock.h"

namespace vramd {

constexpr size_t kHoursPerWeek = 168;

// What the store keeps of one service's demand.
struct DemandHistory {
  std::string service;
  TimePoint since{};  // the first spell seen: how many weeks each hour has been watched
  std::array<uint32_t, kHoursPerWeek> counts{};  // spells started in each hour of the week
};

// The hour of the week of `t` (0: Monday 00:00-01:00 UTC).
size_t hour_of_week(TimePoint t);
// The counts as the store keeps them: 168 numbers, comma-separated. parse: nullopt unless it is
// exactly that.
std::string encode_counts(const std::array<uint32_t, kHoursPerWeek>& counts);
std::optional<std::array<uint32_t, kHoursPerWeek>> parse_counts(std::string_view text);

class Demand {
 public:
  Demand() = default;
  explicit Demand(DemandHistory h) : history_(std::move(h)), seen_(true) {}

  // A busy spell started at `now`.
  void record(const Now& now);
  // The expected number of spells in [now, now + horizon]: the larger of the histogram's rate
  // for those hours (its spells in each hour over the full weeks that hour was watched; an hour
  // never watched in full counts nothing) and the recent rate (spells in the last hour).
  // `recent`: false counts the histogram only (a service that went to sleep idle: its last
  // hour's spells are what its idle TTL already judged over).
  double expected(const Now& now, Duration horizon, bool recent = true) const;
  // The chance of at least one spell in [now, now + horizon] (Poisson: 1 − e^−expected).
  double chance(const Now& now, Duration horizon, bool recent = true) const;

  bool seen() const { return seen_; }
  const DemandHistory& history() const { return history_; }
  void set_service(const std::string& name) { history_.service = name; }

 private:
  DemandHistory history_;
  bool seen_ = false;
  std::deque<MonoTime> recent_;  // spells in the last hour (at most kRecentMax)
};

}  // namespace vramd
