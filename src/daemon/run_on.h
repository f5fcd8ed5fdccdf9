// Runs blocking work (SQLite, PostgreSQL, files) on a thread pool and gives its result back to
// the coroutine that asked, on its own executor. The caller names the returned awaitable before
// co_await: GCC 12 may destroy temporaries inside a co_await expression twice.
#pragma once

#include <utility>  // (before Boost.Asio's awaitable.hpp, which uses std::exchange)

#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <type_traits>

namespace vramd {

template <typename Fn>
boost::asio::awaitable<std::invoke_result_t<Fn&>> run_on(boost::asio::thread_pool& pool, Fn fn) {
  auto run = [fn = std::move(fn)]() mutable -> boost::asio::awaitable<std::invoke_result_t<Fn&>> {
    co_return fn();
  };
  auto op = boost::asio::co_spawn(pool, std::move(run), boost::asio::use_awaitable);
  co_return co_await std::move(op);
}

}  // namespace vramd
