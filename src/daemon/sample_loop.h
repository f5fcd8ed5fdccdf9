// The sampler thread as one part: it owns the GPU reader and the host scanner, takes a sample
// when the gate (daemon/sampler.h) says, hands it to the loop, and watches for a read that does
// not come back. What a sample means is the core's; the loop's hook only feeds it.
#pragma once

#include <utility>  // (before Boost.Asio's awaitable.hpp, which uses std::exchange)

#include <boost/asio/async_result.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <functional>
#include <memory>
#include <string>
#include <type_traits>

#include "daemon/sampler.h"

namespace vramd {

class SampleLoop {
 public:
  // While an unload or a stop is verified, samples come this often.
  static constexpr Duration kFastInterval = std::chrono::milliseconds(250);
  // A sample not back in this long (or 4 intervals, if longer) is reported stalled.
  static constexpr Duration kStallAfter = std::chrono::seconds(5);

  struct Hooks {
    std::function<void(SampleTaken)> taken;      // on the loop; the next waits until it returns
    std::function<void(std::string)> stalled;  // on the loop: a read has not returned
  };
  SampleLoop(boost::asio::io_context& io, std::unique_ptr<GpuReader> reader,
             std::unique_ptr<HostScanner> scanner, const GpuConfig& gpu, Duration interval,
             HostScanRequest request, Hooks hooks);
  ~SampleLoop();  // stops and joins the thread

  void start();  // the first sample at once
  void stop();   // no more samples; one in flight is dropped

  // What the core asks of the sampling (SetFastSampling, a changed scan request).
  void set_fast(bool on);  // on: every kFastInterval, every process list read, the next at once
  void list_processes() { gate_.list_processes(); }  // the next sample reads every list
  void wake() { gate_.wake(); }                      // the next sample now
  void set_request(HostScanRequest request) { gate_.set_request(std::move(request)); }

  // Runs `fn` on the sampler thread between two samples and gives its result back to the loop
  // (as run_on, daemon/run_on.h, does for a pool). `scanner()` is for such a fn only.
  template <typename Fn>
  boost::asio::awaitable<std::invoke_result_t<Fn&>> run(Fn fn) {
    using R = std::invoke_result_t<Fn&>;
    auto init = [this, fn = std::move(fn)](auto handler) mutable {
      // std::function copies what it holds: the (move-only) handler is shared.
      auto h = std::make_shared<decltype(handler)>(std::move(handler));
      gate_.run([this, fn = std::move(fn), h]() mutable {
        auto r = std::make_shared<R>(fn());
        boost::asio::post(io_, [h, r] { (*h)(std::move(*r)); });
      });
    };
    auto op = boost::asio::async_initiate<const boost::asio::use_awaitable_t<>, void(R)>(
        std::move(init), boost::asio::use_awaitable);
    co_return co_await std::move(op);
  }
  HostScanner& scanner() { return *scanner_; }

  uint64_t samples() const { return samples_; }  // handed to the loop so far
  Duration stall_limit() const;

 private:
  void thread_loop();
  void on_sample(SampleTaken sample);
  void arm_stall_timer();

  boost::asio::io_context& io_;
  std::unique_ptr<GpuReader> reader_;
  std::unique_ptr<HostScanner> scanner_;
  ProcessScanPolicy lists_;
  Duration interval_;
  Hooks hooks_;
  SampleGate gate_;
  boost::asio::steady_timer stall_timer_;
  uint64_t samples_ = 0;
  bool fast_ = false;
  bool stopping_ = false;
  boost::asio::thread_pool thread_{1};  // last: joined before the rest goes
};

}  // namespace vramd
