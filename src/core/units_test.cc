#include "core/units.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace vramd {
namespace {

TEST(Units, ParsesBinaryAndDecimalSizes) {
  EXPECT_EQ(*parse_size("16GiB"), 16 * GiB);
  EXPECT_EQ(*parse_size("16GB"), 16'000'000'000ull);
  EXPECT_EQ(*parse_size("512MiB"), 512 * MiB);
  // 400 digits: std::stod threw out_of_range out of the parser; now it is too large.
  EXPECT_THAT(parse_size(std::string(400, '9') + "GiB").error(),
              ::testing::HasSubstr("too large"));
  EXPECT_FALSE(parse_duration(std::string(400, '9') + "s").ok());
  EXPECT_EQ(*parse_size("1.5GiB"), GiB + GiB / 2);
  EXPECT_EQ(*parse_size("1.5 gib"), GiB + GiB / 2);
  EXPECT_EQ(*parse_size("4096B"), 4096u);
  EXPECT_EQ(*parse_size("4096 b"), 4096u);
  EXPECT_EQ(*parse_size("0"), 0u);
  EXPECT_EQ(*parse_size("2k"), 2048u);
}

// `--vram 12` meant 12 GiB and was granted 12 bytes: a bare number is refused with the hint;
// zero needs no unit.
TEST(Units, SizeWithoutAUnitIsRefusedWithAHint) {
  EXPECT_EQ(parse_size("12").error(), "12: give a unit, e.g. 12GiB");
  EXPECT_EQ(parse_size(" 1.5 ").error(), "1.5: give a unit, e.g. 1.5GiB");
  EXPECT_EQ(parse_size("4096").error(), "4096: give a unit, e.g. 4096GiB");
  EXPECT_EQ(*parse_size("0"), 0u);
  EXPECT_EQ(*parse_size("0.0"), 0u);
}

TEST(Units, RejectsBadSizes) {
  for (const char* bad : {"", "GiB", "-1GiB", "16 parsecs", "1.5", "1.2.3GiB", "1e99TB"}) {
    auto r = parse_size(bad);
    EXPECT_FALSE(r.ok()) << bad;
  }
  EXPECT_NE(parse_size("16 parsecs").error().find("16GiB"), std::string::npos);
}

TEST(Units, FormatsSizes) {
  EXPECT_EQ(format_size(0), "0 B");
  EXPECT_EQ(format_size(512 * MiB), "512 MiB");
  EXPECT_EQ(format_size(16 * GiB + 3 * GiB / 10), "16.3 GiB");
  EXPECT_EQ(format_size(16666 * MiB), "16.3 GiB");
}

TEST(Units, ParsesDurations) {
  using namespace std::chrono_literals;
  EXPECT_EQ(*parse_duration("300ms"), 300ms);
  EXPECT_EQ(*parse_duration("5m"), 5min);
  EXPECT_EQ(*parse_duration("1h30m"), 90min);
  EXPECT_EQ(*parse_duration("1m30s"), 90s);
  EXPECT_EQ(*parse_duration("1.5s"), 1500ms);
  EXPECT_EQ(*parse_duration("2d"), 48h);
  EXPECT_EQ(*parse_duration("10"), 10s);
  for (const char* bad : {"", "5x", "m", "1h30", "-5s", "5 5s"}) {
    EXPECT_FALSE(parse_duration(bad).ok()) << bad;
  }
}

TEST(Units, FormatsDurationsRoundTrip) {
  for (const char* text : {"300ms", "5s", "5m", "1h30m", "2d3h", "1m30s500ms"}) {
    auto d = parse_duration(text);
    ASSERT_TRUE(d.ok()) << text;
    EXPECT_EQ(format_duration(*d), text);
  }
  EXPECT_EQ(format_duration(Duration(0)), "0s");
}

TEST(Units, FormatsAges) {
  using namespace std::chrono_literals;
  EXPECT_EQ(format_age(12s), "12 s");
  EXPECT_EQ(format_age(12min + 5s), "12 min");
  EXPECT_EQ(format_age(3h + 5min), "3 h 5 min");
  EXPECT_EQ(format_age(50h), "2 d 2 h");
}

TEST(Units, Rfc3339RoundTrip) {
  TimePoint t(Duration(1796045279123));  // 2026-11-30T...
  std::string s = format_rfc3339(t);
  EXPECT_EQ(s.size(), 24u);
  EXPECT_EQ(s.back(), 'Z');
  EXPECT_EQ(*parse_rfc3339(s), t);
  EXPECT_EQ(format_rfc3339(TimePoint(Duration(0))), "1970-01-01T00:00:00.000Z");
  // Offsets and nanoseconds as Ollama prints them.
  EXPECT_EQ(*parse_rfc3339("2024-06-04T14:38:31.83753-07:00"),
            *parse_rfc3339("2024-06-04T21:38:31.837Z"));
  EXPECT_FALSE(parse_rfc3339("yesterday").ok());
  // Found by fuzz_api_request (?since=): "6-.5:3Z" made std::stoi throw out of the parser.
  EXPECT_FALSE(parse_rfc3339("2027-11-29T13:27:6-.5:3Z").ok());
  EXPECT_FALSE(parse_rfc3339("2027-11-29T13:27:06+.5:30").ok());
  EXPECT_FALSE(parse_rfc3339("2027-1-29T13:27:06Z").ok());     // a field short of its digits
  EXPECT_FALSE(parse_rfc3339("2027-11-29T13:-7:06Z").ok());    // a sign sscanf's %d took
  EXPECT_FALSE(parse_rfc3339("2027-13-29T13:27:06Z").ok());    // month 13
  EXPECT_FALSE(parse_rfc3339("2027-11-29T13:27:06.Z").ok());   // a dot without digits
  EXPECT_EQ(*parse_rfc3339("2024-06-04 21:38:31Z"), *parse_rfc3339("2024-06-04T21:38:31.000Z"));
}

}  // namespace
}  // namespace vramd
