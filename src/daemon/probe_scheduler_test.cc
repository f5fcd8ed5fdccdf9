// The probe loops: the interval when the core says nothing, its ScheduleProbe moving the next
// probe sooner or later, a hung probe holding up only its own service, and stop.
#include "daemon/probe_scheduler.h"

#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace vramd {
namespace probe_scheduler_test {

namespace asio = boost::asio;
using namespace std::chrono_literals;

struct Loop {
  int probes = 0, answers = 0;
  bool ended = false;
};

// Starts `name`'s loop; each answer runs `then` (the core's answer, if any).
void start(asio::io_context& io, ProbeScheduler& s, const std::string& name, Loop& loop,
           Duration interval, std::function<void()> then = {}, Duration hang = Duration(0)) {
  auto probe = [&io, &loop, hang]() -> asio::awaitable<ServiceProbe> {
    ++loop.probes;
    if (hang > Duration(0)) {  // a server that does not answer (the adapter's own timeout)
      asio::steady_timer t(io, hang);
      boost::system::error_code ec;
      co_await t.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    }
    co_return ServiceProbe{};
  };
  auto answered = [&loop, then](ServiceProbe) {
    ++loop.answers;
    if (then) then();
  };
  asio::co_spawn(io, [&s, name, probe, answered, interval, &loop]() -> asio::awaitable<void> {
    // Named, then awaited (GCC 12 and temporaries in a co_await: see Daemon::probe_loop).
    auto run = s.run(name, ProbeScheduler::Probe(probe), ProbeScheduler::Answered(answered), interval);
    co_await std::move(run);
    loop.ended = true;
  }, asio::detached);
}

TEST(ProbeScheduler, TheIntervalUnlessTheCoreMovesTheNextProbe) {
  asio::io_context io;
  ProbeScheduler s(io);
  Loop plain, sooner, later;
  start(io, s, "plain", plain, 100ms);
  // The core answers each probe with "again in 10 ms" (a service whose state moves) ...
  start(io, s, "sooner", sooner, 10s, [&] { s.schedule("sooner", 10ms); });
  // ... or "not for 10 s" (an idle service backed off).
  start(io, s, "later", later, 10ms, [&] { s.schedule("later", 10s); });
  io.run_for(500ms);
  EXPECT_GE(plain.probes, 2);
  EXPECT_LE(plain.probes, 6) << "never sooner than its interval";
  EXPECT_GE(sooner.probes, 2 * plain.probes) << "moved sooner than its 10 s interval";
  EXPECT_EQ(later.probes, 1) << "moved later than its 10 ms interval";
  s.schedule("unknown", 0ms);  // no loop: ignored
}

TEST(ProbeScheduler, AHungProbeHoldsUpOnlyItsOwnServiceAndStopEndsEveryLoop) {
  asio::io_context io;
  ProbeScheduler s(io);
  Loop hung, fine;
  start(io, s, "hung", hung, 10ms, {}, 10s);
  start(io, s, "fine", fine, 20ms);
  io.run_for(300ms);
  EXPECT_EQ(hung.probes, 1);
  EXPECT_EQ(hung.answers, 0);
  EXPECT_GE(fine.answers, 3);
  s.stop();
  io.run_for(100ms);
  EXPECT_TRUE(fine.ended) << "a waiting loop ends at once";
  EXPECT_FALSE(hung.ended) << "a probe in flight ends with its own timeout";
  int answers = fine.answers;
  io.run_for(100ms);
  EXPECT_EQ(fine.answers, answers);
}

}  // namespace probe_scheduler_test
}  // namespace vramd
