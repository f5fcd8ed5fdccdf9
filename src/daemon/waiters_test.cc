// The daemon's waiters: answers before and during a wait, limits, the stop, unknown ids.
#include "daemon/waiters.h"

#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>

#include <string>

namespace vramd {
namespace waiters_test {

namespace asio = boost::asio;
using namespace std::chrono_literals;

// Runs `w.wait(id, max)` on `io` and keeps what it returned.
template <typename W>
void start_wait(asio::io_context& io, W& w, uint64_t id, std::optional<std::chrono::steady_clock::duration> max,
                std::optional<std::optional<std::string>>& got) {
  asio::co_spawn(io, [&w, id, max, &got]() -> asio::awaitable<void> { got = co_await w.wait(id, max); },
                 asio::detached);
}

TEST(Waiters, EachRequestGetsAnIdOfItsOwnFromOne) {
  asio::io_context io;
  Waiters<std::string> a(io), b(io);
  EXPECT_EQ(a.next_id(), 1u);
  EXPECT_EQ(a.next_id(), 2u);
  EXPECT_EQ(b.next_id(), 1u);  // each set of waiters counts its own
  uint64_t id = a.next_id();
  a.add(id);
  a.answer(id, "three");
  std::optional<std::optional<std::string>> got;
  start_wait(io, a, id, std::nullopt, got);
  io.run();
  EXPECT_EQ(got, std::optional<std::string>("three"));
}

TEST(Waiters, AnAnswerBeforeOrDuringTheWaitIsReturnedOnce) {
  asio::io_context io;
  Waiters<std::string> w(io);
  w.add(1);
  w.answer(1, "early");
  std::optional<std::optional<std::string>> first, second;
  start_wait(io, w, 1, std::nullopt, first);
  w.add(2);
  start_wait(io, w, 2, std::nullopt, second);
  asio::post(io, [&] { w.answer(2, "later"); });
  io.run();
  EXPECT_EQ(first, std::optional<std::string>("early"));
  EXPECT_EQ(second, std::optional<std::string>("later"));
  EXPECT_EQ(w.size(), 0u) << "a wait forgets its id";
  w.answer(2, "again");  // no one waits: ignored
  EXPECT_EQ(w.size(), 0u);
}

TEST(Waiters, TheLimitOfAddOrOfTheWaitEndsItWithoutAnAnswer) {
  asio::io_context io;
  Waiters<std::string> w(io);
  w.add(1, 20ms);
  w.add(2);
  w.add(3);
  std::optional<std::optional<std::string>> a, b, c, unknown;
  auto t0 = std::chrono::steady_clock::now();
  start_wait(io, w, 1, std::nullopt, a);
  start_wait(io, w, 2, 30ms, b);
  start_wait(io, w, 3, 0ms, c);  // zero: does not wait
  start_wait(io, w, 99, 1s, unknown);
  io.run();
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 30ms);
  ASSERT_TRUE(a && b && c && unknown);
  EXPECT_FALSE(*a);
  EXPECT_FALSE(*b);
  EXPECT_FALSE(*c);
  EXPECT_FALSE(*unknown);
}

TEST(Waiters, StopEndsEveryWaitAndTheOnesAfter) {
  asio::io_context io;
  Waiters<int, std::string> w(io);
  w.add(1) = "comfyui";
  w.add(2) = "ollama";
  w.answer(2, 7);
  ASSERT_NE(w.pending(1), nullptr);
  EXPECT_EQ(*w.pending(1), "comfyui");
  EXPECT_EQ(w.pending(2), nullptr) << "answered";
  int pending = 0;
  w.for_each_pending([&](uint64_t id, const std::string& extra) {
    EXPECT_EQ(id, 1u);
    EXPECT_EQ(extra, "comfyui");
    ++pending;
  });
  EXPECT_EQ(pending, 1);
  std::optional<std::optional<int>> got1, got3;
  asio::co_spawn(io, [&]() -> asio::awaitable<void> { got1 = co_await w.wait(1); }, asio::detached);
  asio::post(io, [&] {
    w.stop();
    w.add(3);
    asio::co_spawn(io, [&]() -> asio::awaitable<void> { got3 = co_await w.wait(3); }, asio::detached);
  });
  io.run();  // returns: no wait is left hanging on a timer that never fires
  ASSERT_TRUE(got1 && got3);
  EXPECT_FALSE(*got1);
  EXPECT_FALSE(*got3);
}

}  // namespace waiters_test
}  // namespace vramd
