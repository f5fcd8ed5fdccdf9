#include "core/process_scan.h"

#include <gtest/gtest.h>

namespace vramd {
namespace {

using std::chrono::seconds;

TEST(ProcessListSchedule, DueWhenNewMovedForcedInvalidOrOld) {
  ProcessListSchedule lists({32 * MiB, seconds(10)});
  MonoTime t{};
  lists.begin(t, false);
  EXPECT_TRUE(lists.due("GPU-a", 1 * GiB));  // never listed
  lists.listed("GPU-a", 1 * GiB, true, {{.pid = 7, .used = 1 * GiB}});
  lists.begin(t + seconds(1), false);
  EXPECT_FALSE(lists.due("GPU-a", 1 * GiB + 31 * MiB));  // under the threshold
  EXPECT_TRUE(lists.due("GPU-a", 1 * GiB + 32 * MiB));   // up by it
  EXPECT_TRUE(lists.due("GPU-a", 1 * GiB - 32 * MiB));   // down by it
  ASSERT_EQ(lists.last("GPU-a").size(), 1u);
  EXPECT_EQ(lists.last("GPU-a")[0].pid, 7);
  EXPECT_TRUE(lists.last("GPU-b").empty());

  lists.begin(t + seconds(2), true);  // forced: every GPU
  EXPECT_TRUE(lists.due("GPU-a", 1 * GiB));

  lists.invalidate();                  // a kept pid is gone: the next sample lists
  lists.begin(t + seconds(3), false);
  EXPECT_TRUE(lists.due("GPU-a", 1 * GiB));
  lists.begin(t + seconds(4), false);  // once
  EXPECT_FALSE(lists.due("GPU-a", 1 * GiB));

  lists.begin(t + seconds(10), false);  // the interval, from the last read at t
  EXPECT_TRUE(lists.due("GPU-a", 1 * GiB));
}

TEST(ProcessListSchedule, UnreadableListsAreNotKept) {
  ProcessListSchedule lists;
  lists.begin(MonoTime{}, false);
  lists.listed("GPU-a", 1 * GiB, true, {{.pid = 7}});
  lists.listed("GPU-a", 1 * GiB, false, {});
  lists.begin(MonoTime{} + seconds(1), false);
  EXPECT_TRUE(lists.due("GPU-a", 1 * GiB));
  EXPECT_TRUE(lists.last("GPU-a").empty());
}

}  // namespace
}  // namespace vramd
