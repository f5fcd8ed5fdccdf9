// When a service is asked for (core/demand.h): the hour of the week, the store's encoding, and
// the expected spells from the weekly histogram and from the last hour.
#include "core/demand.h"

#include <cmath>

#include <gtest/gtest.h>

namespace vramd {
namespace demand_test {

using namespace std::chrono_literals;

// Monday 5 January 1970, 00:00 UTC: the first Monday after the epoch (a Thursday).
constexpr TimePoint kMonday{std::chrono::days(4)};

Now at(TimePoint wall) { return Now(MonoTime(wall.time_since_epoch()), wall); }

TEST(Demand, HoursOfTheWeekStartOnMondayUtc) {
  EXPECT_EQ(hour_of_week(kMonday), 0u);
  EXPECT_EQ(hour_of_week(kMonday + 9h + 59min), 9u);
  EXPECT_EQ(hour_of_week(TimePoint{}), 72u);  // the epoch: Thursday 00:00
  EXPECT_EQ(hour_of_week(kMonday + 7 * 24h - 1min), 167u);
  EXPECT_EQ(hour_of_week(kMonday + 7 * 24h), 0u);
}

TEST(Demand, CountsRoundTripAndDamagedTextIsNoHistogram) {
  std::array<uint32_t, kHoursPerWeek> c{};
  c[0] = 3;
  c[9] = 4000000000u;
  c[167] = 1;
  auto back = parse_counts(encode_counts(c));
  ASSERT_TRUE(back);
  EXPECT_EQ(*back, c);
  std::string text = encode_counts(c);
  EXPECT_FALSE(parse_counts(text.substr(0, text.rfind(','))));  // 167 numbers
  EXPECT_FALSE(parse_counts(text + ",1"));                      // 169
  EXPECT_FALSE(parse_counts("x" + text));
  EXPECT_FALSE(parse_counts(""));
  EXPECT_FALSE(parse_counts(text + ","));
}

TEST(Demand, NothingSeenExpectsNothing) {
  Demand d;
  EXPECT_EQ(d.expected(at(kMonday), 1h), 0.0);
  EXPECT_EQ(d.chance(at(kMonday), 1h), 0.0);
}

TEST(Demand, TheLastHourIsARate) {
  Demand d;
  TimePoint t = kMonday + 3h;
  d.record(at(t));
  d.record(at(t + 10min));
  d.record(at(t + 20min));
  // Three spells in the last hour: three expected in the next hour, 0.75 in 15 minutes.
  EXPECT_DOUBLE_EQ(d.expected(at(t + 30min), 1h), 3.0);
  EXPECT_DOUBLE_EQ(d.expected(at(t + 30min), 15min), 0.75);
  EXPECT_NEAR(d.chance(at(t + 30min), 1h), 1 - std::exp(-3.0), 1e-12);
  // An hour and a half later the first two have left the window.
  EXPECT_DOUBLE_EQ(d.expected(at(t + 80min), 1h), 1.0);
  // Without the last hour (a service that went to sleep idle), the histogram alone: the hours
  // ahead were never watched before, so it expects nothing.
  EXPECT_EQ(d.expected(at(t + 30min), 1h, /*recent=*/false), 0.0);
}

TEST(Demand, TheWeeklyHistogramPredictsTheSameHourNextWeek) {
  Demand d;
  // Asked every Monday at 9:10, three weeks running.
  for (int week = 0; week < 3; ++week) d.record(at(kMonday + week * 7 * 24h + 9h + 10min));
  TimePoint monday4 = kMonday + 3 * 7 * 24h;
  // On the fourth Monday at 8:30, the next hour overlaps 9:00-9:30: the 9 o'clock hour was
  // watched three times and held a spell each time: one an hour, for half an hour.
  EXPECT_NEAR(d.expected(at(monday4 + 8h + 30min), 1h, false), 0.5, 1e-9);
  // On a Tuesday at 8:30 nothing is expected.
  EXPECT_EQ(d.expected(at(monday4 + 24h + 8h + 30min), 1h, false), 0.0);
  // Restored from the store, it predicts the same.
  Demand back(d.history());
  EXPECT_NEAR(back.expected(at(monday4 + 8h + 30min), 1h, false), 0.5, 1e-9);
}

}  // namespace demand_test
}  // namespace vramd
