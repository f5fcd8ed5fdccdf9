#include "daemon/sample_loop.h"

#include <fmt/format.h>

#include <algorithm>

namespace vramd {

namespace asio = boost::asio;

SampleLoop::SampleLoop(asio::io_context& io, std::unique_ptr<GpuReader> reader,
                       std::unique_ptr<HostScanner> scanner, const GpuConfig& gpu,
                       Duration interval, HostScanRequest request, Hooks hooks)
    : io_(io),
      reader_(std::move(reader)),
      scanner_(std::move(scanner)),
      lists_{gpu.process_scan_threshold, gpu.process_scan_interval},
      interval_(interval),
      hooks_(std::move(hooks)),
      gate_(std::move(request), interval),
      stall_timer_(io) {}

SampleLoop::~SampleLoop() {
  stop();
  thread_.join();
}

void SampleLoop::start() {
  arm_stall_timer();
  asio::post(thread_, [this] { thread_loop(); });
}

void SampleLoop::stop() {
  stopping_ = true;
  gate_.close();
  stall_timer_.cancel();
}

void SampleLoop::set_fast(bool on) {
  fast_ = on;
  gate_.set_fast(on);  // a verification reads the lists on every sample
  gate_.set_interval(on ? kFastInterval : interval_);
  if (on) gate_.wake();  // sample now rather than at the end of the interval
}

Duration SampleLoop::stall_limit() const { return std::max<Duration>(kStallAfter, 4 * interval_); }

void SampleLoop::thread_loop() {
  // Blocking reads, off the event loop; the core is only touched back on the loop. The process
  // lists' schedule is this thread's alone.
  ProcessListSchedule lists(lists_);
  while (std::optional<SampleGate::Order> order = gate_.next()) {
    SampleTaken sample =
        take_sample(*reader_, *scanner_, order->request, &lists, mono_now(), order->list_all);
    gate_.taken();
    asio::post(io_, [this, sample = std::move(sample)]() mutable { on_sample(std::move(sample)); });
  }
}

void SampleLoop::arm_stall_timer() {
  // A read that hangs (NVML, a stuck /proc) is reported while it hangs, not once it returns.
  stall_timer_.expires_after((fast_ ? kFastInterval : interval_) + stall_limit());
  stall_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (!ec && !stopping_)
      hooks_.stalled(fmt::format("a GPU or host read has not returned in {}",
                                 format_duration(stall_limit())));
  });
}

void SampleLoop::on_sample(SampleTaken sample) {
  if (stopping_) return;
  arm_stall_timer();
  hooks_.taken(std::move(sample));
  ++samples_;
  gate_.handled();
}

}  // namespace vramd
