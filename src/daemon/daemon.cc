#include "daemon/daemon.h"

#include <sys/stat.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <filesystem>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "daemon/sampler.h"

namespace vramd {

namespace asio = boost::asio;
constexpr size_t kEventsKept = 1000;

Daemon::Daemon(asio::io_context& io, Config config, std::unique_ptr<GpuReader> reader,
               std::unique_ptr<HostScanner> scanner)
    : io_(io),
      arbiter_(std::move(config)),
      reader_(std::move(reader)),
      scanner_(std::move(scanner)),
      scan_request_(arbiter_.scan_request()),
      api_(arbiter_, events_, system_now),
      http_(io, [this](HttpRequest req) { return api_.handle(std::move(req)); }),
      timer_(io) {}

Daemon::~Daemon() {
  stop();
  worker_.join();
}

std::string Daemon::socket_path() const {
  return (std::filesystem::path(arbiter_.config().daemon.state_dir) / "vramd.sock").string();
}

Status Daemon::start() {
  const auto& cfg = arbiter_.config().daemon;
  std::error_code ec;
  std::filesystem::create_directories(cfg.state_dir, ec);
  if (ec) return make_error(fmt::format("cannot create state_dir {}: {}", cfg.state_dir, ec.message()));
  if (auto s = http_.listen_tcp(cfg.listen); !s) return s;
  if (auto s = http_.listen_unix(socket_path()); !s) return s;
  asio::co_spawn(io_, sample_loop(), asio::detached);
  return Ok{};
}

void Daemon::stop() {
  if (stopping_) return;
  stopping_ = true;
  timer_.cancel();
  http_.close();
}

void Daemon::apply(std::vector<Action> actions) {
  for (auto& a : actions) {
    if (auto* e = std::get_if<EmitEvent>(&a)) {
      spdlog::info("{}: {}", e->event.type, e->event.message);
      events_.push_back(std::move(e->event));
      if (events_.size() > kEventsKept) events_.pop_front();
    }
  }
}

asio::awaitable<void> Daemon::sample_loop() {
  const auto interval = arbiter_.config().daemon.sample_interval;
  auto next = std::chrono::steady_clock::now();
  while (!stopping_) {
    // The blocking reads run on the worker; the Arbiter is only touched back on this loop.
    SampleTaken sample = co_await asio::co_spawn(
        worker_,
        [this]() -> asio::awaitable<SampleTaken> {
          co_return take_sample(*reader_, *scanner_, scan_request_);
        },
        asio::use_awaitable);
    if (stopping_) break;
    apply(arbiter_.handle(Event{std::move(sample)}, system_now()));
    ++samples_;
    // Fixed rate; after a stall (suspend, slow NVML) start again from now rather than burst.
    next += interval;
    auto now = std::chrono::steady_clock::now();
    if (next < now) next = now;
    timer_.expires_at(next);
    boost::system::error_code ec;
    co_await timer_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
}

}  // namespace vramd
