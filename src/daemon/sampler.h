// Taking one sample: the GPUs and the host, read together. Blocking: runs off the event loop.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>

#include "core/arbiter.h"
#include "gpu/gpu_reader.h"
#include "host/host_scanner.h"

namespace vramd {

// `lists`: read each GPU's process lists only when due (core/process_scan.h), begun at `now`
// (with `list_all`, every GPU's); null: every time. When a kept list names a pid the host scan
// no longer finds, every GPU is listed on the next sample.
SampleTaken take_sample(GpuReader& reader, HostScanner& scanner, const HostScanRequest& request,
                        ProcessListSchedule* lists = nullptr, MonoTime now = {},
                        bool list_all = false);

// The schedule of the sampler thread, which runs one loop for the daemon's life: wait for the
// next sample's time, take it, hand it to the event loop, compute the next time. The event loop
// never wakes it in the steady state, and is woken once per sample, by the result: on a quiet
// host each wake-up is a good part of what the daemon costs (bench/RESULTS.md, serve_cost).
// One sample is in flight at a time: the next waits until the loop has handled the last.
// Every member is called from either thread; all of them lock.
class SampleGate {
 public:
  using Clock = std::chrono::steady_clock;
  explicit SampleGate(HostScanRequest request, Duration interval)
      : request_(std::move(request)), interval_(interval) {}

  // What the sampler thread is to take: the host scan's request, and whether every GPU's process
  // lists are to be read (something vramd did may have changed them; fast sampling).
  struct Order {
    HostScanRequest request;
    bool list_all = false;
  };
  // The sampler thread: blocks until the next sample is due (or wake(), or close()); nullopt
  // when closed, else what to take. The first is due at once.
  std::optional<Order> next() {
    std::unique_lock lock(mu_);
    for (;;) {
      while (!jobs_.empty()) {  // other work for this thread (discovery's scans), in order
        std::function<void()> job = std::move(jobs_.front());
        jobs_.pop_front();
        lock.unlock();
        job();
        lock.lock();
      }
      if (closed_) return std::nullopt;
      if (!woken_ && Clock::now() < at_) {
        cv_.wait_until(lock, at_);
        continue;
      }
      if (!in_flight_) break;
      waiting_handled_ = true;  // the loop is slower than one interval: wait for it
      cv_.wait(lock);
      waiting_handled_ = false;
    }
    woken_ = false;
    in_flight_ = true;
    Order order{request_, list_all_ || fast_};
    list_all_ = false;
    return order;
  }
  // The sampler thread, once the sample is taken: the next is due one interval after this one
  // was (fixed rate), or one interval from now after a stall (no burst to catch up).
  void taken() {
    std::lock_guard lock(mu_);
    auto now = Clock::now();
    at_ = std::max(at_, now - interval_) + interval_;
    if (at_ > now + interval_) at_ = now + interval_;
  }
  // The event loop, once it has handled a sample.
  void handled() {
    std::lock_guard lock(mu_);
    in_flight_ = false;
    if (waiting_handled_) cv_.notify_one();  // rare: no wake-up otherwise
  }
  // The event loop: take the next sample now (an unload to verify, fast sampling switched on).
  void wake() {
    std::lock_guard lock(mu_);
    woken_ = true;
    cv_.notify_one();
  }
  void set_interval(Duration interval) {
    std::lock_guard lock(mu_);
    interval_ = interval;
  }
  // The event loop: the next sample reads every GPU's process lists (a start, an exit, a grant,
  // an unload, a wake may have changed them). Wakes nobody: the sample comes at its time.
  void list_processes() {
    std::lock_guard lock(mu_);
    list_all_ = true;
  }
  // The event loop: while on (an unload or a stop being verified), every sample reads them.
  void set_fast(bool on) {
    std::lock_guard lock(mu_);
    fast_ = on;
  }
  void set_request(HostScanRequest request) {
    std::lock_guard lock(mu_);
    request_ = std::move(request);
  }
  // Runs `job` on the sampler thread, between two samples (the scanner is that thread's alone).
  void run(std::function<void()> job) {
    std::lock_guard lock(mu_);
    jobs_.push_back(std::move(job));
    cv_.notify_one();
  }
  void close() {
    std::lock_guard lock(mu_);
    closed_ = true;
    cv_.notify_one();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  HostScanRequest request_;
  Duration interval_;
  std::deque<std::function<void()>> jobs_;
  Clock::time_point at_ = Clock::now();
  bool in_flight_ = false;
  bool waiting_handled_ = false;  // the sampler waits for handled()
  bool woken_ = false;
  bool closed_ = false;
  bool list_all_ = true;  // the first sample lists every GPU
  bool fast_ = false;
};

// The clocks at millisecond resolution: the shell's only clock reads. The core decides on the
// monotonic one; the wall clock is for what people read.
TimePoint system_now();
MonoTime mono_now();
Now read_clocks();

}  // namespace vramd
