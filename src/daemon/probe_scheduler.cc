#include "daemon/probe_scheduler.h"

#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace vramd {

namespace asio = boost::asio;

asio::awaitable<void> ProbeScheduler::run(std::string service, Probe probe, Answered answered,
                                          Duration interval) {
  Due& due = due_.try_emplace(service, io_).first->second;
  while (!stopping_) {
    ServiceProbe p = co_await probe();
    if (stopping_) break;
    // The fallback; the core's ScheduleProbe, answering this probe, moves it.
    due.at = std::chrono::steady_clock::now() + interval;
    answered(std::move(p));
    while (!stopping_ && std::chrono::steady_clock::now() < due.at) {
      due.timer.expires_at(due.at);
      boost::system::error_code ec;
      co_await due.timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    }
  }
}

void ProbeScheduler::schedule(const std::string& service, Duration after) {
  if (auto it = due_.find(service); it != due_.end()) {
    it->second.at = std::chrono::steady_clock::now() + after;
    it->second.timer.cancel();  // a loop waiting waits again, for the new time
  }
}

void ProbeScheduler::stop() {
  stopping_ = true;
  for (auto& [name, d] : due_) d.timer.cancel();
}

}  // namespace vramd
