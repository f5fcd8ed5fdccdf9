#include "core/demand.h"

#include <algorithm>
#include <charconv>
#include <cmath>

namespace vramd {

namespace {

constexpr size_t kRecentMax = 256;
constexpr Duration kRecentWindow = std::chrono::hours(1);
// The Unix epoch was a Thursday: 3 days after a Monday 00:00.
constexpr int64_t kEpochHourOfWeek = 72;

constexpr int64_t kWeek = int64_t(kHoursPerWeek);

int64_t floor_div(int64_t a, int64_t b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0))); }

int64_t hours_since_epoch(TimePoint t) {
  auto h = std::chrono::floor<std::chrono::hours>(t.time_since_epoch()).count();
  return h;
}

}  // namespace

size_t hour_of_week(TimePoint t) {
  int64_t h = (hours_since_epoch(t) + kEpochHourOfWeek) % int64_t(kHoursPerWeek);
  return size_t(h < 0 ? h + int64_t(kHoursPerWeek) : h);
}

std::string encode_counts(const std::array<uint32_t, kHoursPerWeek>& counts) {
  std::string out;
  for (size_t i = 0; i < counts.size(); ++i) {
    if (i) out += ',';
    out += std::to_string(counts[i]);
  }
  return out;
}

std::optional<std::array<uint32_t, kHoursPerWeek>> parse_counts(std::string_view text) {
  std::array<uint32_t, kHoursPerWeek> out{};
  size_t i = 0, pos = 0;
  while (true) {
    if (i == out.size()) return std::nullopt;
    size_t end = text.find(',', pos);
    std::string_view part = text.substr(pos, end == std::string_view::npos ? end : end - pos);
    uint32_t v = 0;
    auto [p, ec] = std::from_chars(part.data(), part.data() + part.size(), v);
    if (ec != std::errc() || p != part.data() + part.size() || part.empty()) return std::nullopt;
    out[i++] = v;
    if (end == std::string_view::npos) break;
    pos = end + 1;
  }
  if (i != out.size()) return std::nullopt;
  return out;
}

void Demand::record(const Now& now) {
  if (!seen_) {
    history_.since = now.wall;
    seen_ = true;
  }
  uint32_t& c = history_.counts[hour_of_week(now.wall)];
  if (c < UINT32_MAX) ++c;
  recent_.push_back(now.mono);
  while (recent_.size() > kRecentMax) recent_.pop_front();
}

double Demand::expected(const Now& now, Duration horizon, bool recent_too) const {
  if (!seen_ || horizon.count() <= 0) return 0;
  using Hours = std::chrono::duration<double, std::ratio<3600>>;
  // The histogram: each hour the horizon overlaps, by the part of it overlapped.
  double from_history = 0;
  // The hours watched: from the first spell's (it was watched from then on) to the last one ended.
  int64_t first = hours_since_epoch(history_.since);
  int64_t now_hour = hours_since_epoch(now.wall);
  TimePoint end = now.wall + horizon;
  for (TimePoint t = now.wall; t < end;) {
    int64_t h = hours_since_epoch(t);
    TimePoint hour_end{std::chrono::hours(h + 1)};
    TimePoint until = std::min(hour_end, end);
    // Occurrences of this hour of the week in [first, now_hour): the weeks it was watched.
    int64_t weeks = floor_div(now_hour - 1 - h, kWeek) - floor_div(first - 1 - h, kWeek);
    if (weeks > 0)
      from_history += double(history_.counts[hour_of_week(t)]) / double(weeks) *
                      Hours(until - t).count();
    t = until;
  }
  if (!recent_too) return from_history;
  // The last hour's spells, as a rate.
  size_t recent = size_t(std::count_if(recent_.begin(), recent_.end(), [&](MonoTime t) {
    return now.mono - t <= kRecentWindow;
  }));
  double from_recent = double(recent) * Hours(horizon).count() / Hours(kRecentWindow).count();
  return std::max(from_history, from_recent);
}

double Demand::chance(const Now& now, Duration horizon, bool recent) const {
  return 1.0 - std::exp(-expected(now, horizon, recent));
}

}  // namespace vramd
