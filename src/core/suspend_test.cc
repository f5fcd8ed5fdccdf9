// Whether suspend is offered (issue 28), as the core keeps it: unknown until the probe answers,
// then kept for the status and said once as an event, with the tool's own reason when it is not.
#include "core/arbiter.h"

#include <gtest/gtest.h>

namespace vramd {
namespace suspend_test {

std::vector<EventRecord> events_of(const std::vector<Action>& actions) {
  std::vector<EventRecord> out;
  for (const Action& a : actions)
    if (const auto* e = std::get_if<EmitEvent>(&a)) out.push_back(e->event);
  return out;
}

Now at(int s) {
  Now n;
  n.mono = MonoTime(std::chrono::seconds(1000 + s));
  n.wall = TimePoint(std::chrono::seconds(1'800'000'000 + s));
  return n;
}

TEST(Suspend, UnknownUntilProbedThenKeptAndSaidOnce) {
  Arbiter arbiter{Config{}};
  EXPECT_FALSE(arbiter.suspend_offer().probed);
  EXPECT_FALSE(arbiter.suspend_offer().offered);

  SuspendOffer offer;
  offer.offered = true;
  offer.tool = "/usr/bin/cuda-checkpoint";
  offer.form = "action";
  offer.version = "570.86.10";
  std::vector<EventRecord> said = events_of(arbiter.handle(SuspendProbed{offer}, at(1)));
  ASSERT_EQ(said.size(), 1u);
  EXPECT_EQ(said[0].type, "suspend.offered");
  EXPECT_EQ(said[0].message, "suspend is offered: /usr/bin/cuda-checkpoint 570.86.10 (--action)");
  EXPECT_TRUE(arbiter.suspend_offer().probed);
  EXPECT_TRUE(arbiter.suspend_offer().offered);
  EXPECT_EQ(arbiter.suspend_offer().version, "570.86.10");
  // Nothing about it is said again while nothing changes.
  EXPECT_TRUE(events_of(arbiter.handle(Tick{}, at(2))).empty());
}

TEST(Suspend, NotOfferedKeepsTheReason) {
  Arbiter arbiter{Config{}};
  SuspendOffer offer;
  offer.tool = "cuda-checkpoint";
  offer.why = "suspend is not offered: cuda-checkpoint: not found in PATH";
  std::vector<EventRecord> said = events_of(arbiter.handle(SuspendProbed{offer}, at(1)));
  ASSERT_EQ(said.size(), 1u);
  EXPECT_EQ(said[0].type, "suspend.not_offered");
  EXPECT_EQ(said[0].message, offer.why);
  EXPECT_TRUE(arbiter.suspend_offer().probed);
  EXPECT_FALSE(arbiter.suspend_offer().offered);
  EXPECT_EQ(arbiter.suspend_offer().why, offer.why);
}

}  // namespace suspend_test
}  // namespace vramd
