#include "proxy/limiter.h"

#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <string>
#include <vector>

namespace vramd {
namespace {

namespace asio = boost::asio;

TEST(ConcurrencyLimit, WaitersGetSlotsInOrderAndTheQueueIsBounded) {
  asio::io_context io;
  ConcurrencyLimit limit(1, 2);
  std::vector<std::string> log;
  auto request = [&](std::string name) -> asio::awaitable<void> {
    bool ok = co_await limit.acquire();
    log.push_back(name + (ok ? " in" : " refused"));
  };
  // Waiters sit on timers: poll() runs what is ready without waiting for them.
  for (const char* n : {"a", "b", "c", "d"}) asio::co_spawn(io, request(n), asio::detached);
  io.poll();
  io.restart();
  EXPECT_EQ(log, (std::vector<std::string>{"a in", "d refused"}));
  EXPECT_EQ(limit.queued(), 2);
  limit.release();
  io.poll();
  io.restart();
  EXPECT_EQ(log.back(), "b in");
  limit.release();
  io.poll();
  EXPECT_EQ(log.back(), "c in");
  EXPECT_EQ(limit.active(), 1);
  EXPECT_EQ(limit.queued(), 0);
}

TEST(ConcurrencyLimit, ZeroMeansNoLimit) {
  asio::io_context io;
  ConcurrencyLimit limit(0, 0);
  int in = 0;
  for (int i = 0; i < 100; ++i)
    asio::co_spawn(
        io, [&]() -> asio::awaitable<void> { in += co_await limit.acquire(); }, asio::detached);
  io.run();
  EXPECT_EQ(in, 100);
}

}  // namespace
}  // namespace vramd
