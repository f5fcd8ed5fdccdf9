// The sampler thread alone, with a GPU reader and a host scanner of the test's own: samples
// reach the loop one at a time, fast sampling samples at once, a read that hangs is told while
// it hangs, work runs on the sampler thread between samples, and a stopped loop hands nothing on.
#include "daemon/sample_loop.h"

#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace vramd {
namespace sample_loop_test {

namespace asio = boost::asio;
using namespace std::chrono_literals;

struct Reads {
  std::mutex mu;
  std::condition_variable cv;
  bool hang = false;
  std::atomic<int> reads{0};
  std::atomic<int> scans{0};
  std::thread::id thread;
};

class TestReader : public GpuReader {
 public:
  explicit TestReader(Reads& r) : r_(r) {}
  std::string backend() const override { return "test"; }

 protected:
  GpuReading read_gpus(ProcessListSchedule*) override {
    std::unique_lock lock(r_.mu);
    r_.thread = std::this_thread::get_id();
    r_.cv.wait(lock, [&] { return !r_.hang; });
    GpuReading g;
    g.backend = "test";
    g.driver_version = std::to_string(++r_.reads);  // which read this was
    return g;
  }

 private:
  Reads& r_;
};

class TestScanner : public HostScanner {
 public:
  explicit TestScanner(Reads& r) : r_(r) {}
  HostSnapshot scan(const HostScanRequest&) override {
    ++r_.scans;
    return {};
  }

 private:
  Reads& r_;
};

struct Seen {
  std::vector<std::string> taken;  // each sample's read number
  std::vector<std::string> stalled;
};

std::unique_ptr<SampleLoop> make(asio::io_context& io, Reads& r, Seen& seen, Duration interval) {
  return std::make_unique<SampleLoop>(
      io, std::make_unique<TestReader>(r), std::make_unique<TestScanner>(r), GpuConfig{}, interval,
      HostScanRequest{},
      SampleLoop::Hooks{[&seen](SampleTaken s) { seen.taken.push_back(s.gpus.driver_version); },
                        [&seen](std::string why) { seen.stalled.push_back(why); }});
}

// Runs the loop until `done` or `limit` passes.
bool run_until(asio::io_context& io, const std::function<bool()>& done, Duration limit = 10s) {
  auto until = std::chrono::steady_clock::now() + limit;
  while (!done() && std::chrono::steady_clock::now() < until) {
    io.restart();  // a loop with nothing to do stops; the sampler thread posts to it later
    io.run_for(10ms);
  }
  return done();
}

TEST(SampleLoopTest, EachSampleReachesTheLoopInTheOrderTakenAndIsCounted) {
  asio::io_context io;
  Reads r;
  Seen seen;
  auto loop = make(io, r, seen, 20ms);
  loop->start();
  ASSERT_TRUE(run_until(io, [&] { return seen.taken.size() >= 3; }));
  EXPECT_EQ(seen.taken[0], "1");
  EXPECT_EQ(seen.taken[1], "2");
  EXPECT_EQ(seen.taken[2], "3");
  EXPECT_EQ(loop->samples(), seen.taken.size());
  EXPECT_NE(r.thread, std::this_thread::get_id());  // read off the loop
  EXPECT_GE(r.scans.load(), 3);                      // the host with each
  EXPECT_TRUE(seen.stalled.empty());
}

TEST(SampleLoopTest, FastSamplingTakesTheNextAtOnceInsteadOfAtTheEndOfTheInterval) {
  asio::io_context io;
  Reads r;
  Seen seen;
  auto loop = make(io, r, seen, 1h);  // the next one would be an hour away
  loop->start();
  ASSERT_TRUE(run_until(io, [&] { return seen.taken.size() == 1; }));  // the first is at once
  loop->set_fast(true);
  ASSERT_TRUE(run_until(io, [&] { return seen.taken.size() >= 3; }));  // then every 250 ms
  loop->set_fast(false);
  size_t n = seen.taken.size();
  run_until(io, [] { return false; }, 600ms);
  EXPECT_LE(seen.taken.size(), n + 1);  // back to hourly (one may have been due already)
}

TEST(SampleLoopTest, AReadThatHangsIsToldWhileItHangsAndSamplingGoesOnOnceItReturns) {
  asio::io_context io;
  Reads r;
  Seen seen;
  auto loop = make(io, r, seen, 20ms);
  EXPECT_EQ(loop->stall_limit(), SampleLoop::kStallAfter);  // 4 intervals are less
  {
    std::lock_guard lock(r.mu);
    r.hang = true;
  }
  loop->start();
  ASSERT_TRUE(run_until(io, [&] { return !seen.stalled.empty(); }, 20s));
  EXPECT_TRUE(seen.taken.empty());
  EXPECT_EQ(seen.stalled[0], "a GPU or host read has not returned in 5s");
  {
    std::lock_guard lock(r.mu);
    r.hang = false;
  }
  r.cv.notify_all();
  ASSERT_TRUE(run_until(io, [&] { return seen.taken.size() >= 2; }));
  EXPECT_EQ(seen.stalled.size(), 1u);
}

TEST(SampleLoopTest, WorkRunsOnTheSamplerThreadAndItsResultComesBackToTheLoop) {
  asio::io_context io;
  Reads r;
  Seen seen;
  auto loop = make(io, r, seen, 1h);
  loop->start();
  std::optional<std::pair<std::thread::id, int>> got;
  asio::co_spawn(io, [&]() -> asio::awaitable<void> {
    auto op = loop->run([&] {
      HostSnapshot s = loop->scanner().scan({});
      return std::pair{std::this_thread::get_id(), static_cast<int>(s.processes.size())};
    });
    got = co_await std::move(op);
  }, asio::detached);
  ASSERT_TRUE(run_until(io, [&] { return got.has_value(); }));
  EXPECT_NE(got->first, std::this_thread::get_id());
  ASSERT_TRUE(run_until(io, [&] { return !seen.taken.empty(); }));
  EXPECT_EQ(got->first, r.thread);  // the thread that reads the GPUs
}

TEST(SampleLoopTest, AStoppedLoopHandsOnNothingAndTellsNoStall) {
  asio::io_context io;
  Reads r;
  Seen seen;
  auto loop = make(io, r, seen, 20ms);
  loop->start();
  ASSERT_TRUE(run_until(io, [&] { return !seen.taken.empty(); }));
  loop->stop();
  size_t n = seen.taken.size();
  int reads = r.reads;
  run_until(io, [] { return false; }, 300ms);
  EXPECT_EQ(seen.taken.size(), n);
  EXPECT_LE(r.reads.load(), reads + 1);  // one in flight at the stop, at most
  EXPECT_TRUE(seen.stalled.empty());
  loop.reset();  // joins the thread
}

}  // namespace sample_loop_test
}  // namespace vramd
