// The core's deadlines as one timer: the loop sleeps until the next one (a restart's backoff, an
// idle TTL, a lease's timeout, an unload's verification), feeds Tick when it is due, and is
// woken early when an event brings a sooner one. Nothing polls while nothing is due; with
// nothing due it still wakes every `idle` for the shell's own chores (rotating the logs of the
// services vramd runs).
#pragma once

#include <utility>  // (before Boost.Asio's awaitable.hpp, which uses std::exchange)

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include <functional>
#include <optional>

#include "core/units.h"

namespace vramd {

class TickLoop {
 public:
  struct Hooks {
    std::function<std::optional<MonoTime>()> next_deadline;  // the core's, if any
    std::function<void()> tick;                              // a deadline passed
    std::function<void()> idle;                              // at most once per `idle`
  };
  TickLoop(boost::asio::io_context& io, Duration idle, Hooks hooks)
      : idle_(idle), hooks_(std::move(hooks)), timer_(io) {}

  // Runs until stop(). Call it, then co_await what it returns (GCC 12 and temporaries).
  boost::asio::awaitable<void> run();
  // After each event: a deadline sooner than the loop's wake-up wakes it to wait for that one.
  void deadline_changed();
  void stop();

 private:
  Duration idle_;
  Hooks hooks_;
  boost::asio::steady_timer timer_;
  MonoTime at_{};         // when the loop wakes next
  MonoTime last_idle_{};  // when `idle` last ran
  bool stopping_ = false;
};

}  // namespace vramd
