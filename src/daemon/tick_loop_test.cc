// The core's deadlines as one timer, alone: a due deadline ticks once, a sooner one wakes the
// loop early, with nothing due only the idle chore runs, and stop ends the loop.
#include "daemon/tick_loop.h"

#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>

#include "daemon/sampler.h"

namespace vramd {
namespace tick_loop_test {

namespace asio = boost::asio;
using namespace std::chrono_literals;

struct Core {
  std::optional<MonoTime> deadline;
  int ticks = 0, idles = 0;
  TickLoop::Hooks hooks() {
    return {[this] { return deadline; },
            [this] {
              ++ticks;
              deadline.reset();  // the core handled it
            },
            [this] { ++idles; }};
  }
};

bool run_until(asio::io_context& io, const std::function<bool()>& done, Duration limit = 10s) {
  auto until = std::chrono::steady_clock::now() + limit;
  while (!done() && std::chrono::steady_clock::now() < until) {
    io.restart();
    io.run_for(5ms);
  }
  return done();
}

void start(asio::io_context& io, TickLoop& loop, bool& ended) {
  asio::co_spawn(io, [&loop, &ended]() -> asio::awaitable<void> {
    auto run = loop.run();
    co_await std::move(run);
    ended = true;
  }, asio::detached);
}

TEST(TickLoopTest, ADueDeadlineTicksOnceAndNotBefore) {
  asio::io_context io;
  Core core;
  core.deadline = mono_now() + 100ms;
  TickLoop loop(io, 1h, core.hooks());
  bool ended = false;
  start(io, loop, ended);
  io.run_for(20ms);
  EXPECT_EQ(core.ticks, 0);
  ASSERT_TRUE(run_until(io, [&] { return core.ticks == 1; }));
  run_until(io, [] { return false; }, 100ms);
  EXPECT_EQ(core.ticks, 1);  // nothing due any more: no second tick
  loop.stop();
  ASSERT_TRUE(run_until(io, [&] { return ended; }));
}

TEST(TickLoopTest, ASoonerDeadlineWakesTheLoopInsteadOfItsIdleHour) {
  asio::io_context io;
  Core core;
  TickLoop loop(io, 1h, core.hooks());
  bool ended = false;
  start(io, loop, ended);
  io.run_for(20ms);  // asleep for its idle hour
  core.deadline = mono_now() + 30ms;
  loop.deadline_changed();
  ASSERT_TRUE(run_until(io, [&] { return core.ticks == 1; }));
  core.deadline = mono_now() + 1h;  // a later one changes nothing
  loop.deadline_changed();
  run_until(io, [] { return false; }, 50ms);
  EXPECT_EQ(core.ticks, 1);
  loop.stop();
  ASSERT_TRUE(run_until(io, [&] { return ended; }));
}

TEST(TickLoopTest, WithNothingDueOnlyTheIdleChoreRunsAtItsPace) {
  asio::io_context io;
  Core core;
  TickLoop loop(io, 30ms, core.hooks());
  bool ended = false;
  start(io, loop, ended);
  ASSERT_TRUE(run_until(io, [&] { return core.idles >= 3; }));
  EXPECT_EQ(core.ticks, 0);
  loop.stop();
  ASSERT_TRUE(run_until(io, [&] { return ended; }));
  int idles = core.idles;
  run_until(io, [] { return false; }, 100ms);
  EXPECT_EQ(core.idles, idles);  // a stopped loop does nothing more
}

}  // namespace tick_loop_test
}  // namespace vramd
