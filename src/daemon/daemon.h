// The daemon: one event loop owns the Arbiter; sampling runs on a worker thread and posts its
// result back; the HTTP API answers from the Arbiter's snapshots.
#pragma once

#include <utility>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>
#include <deque>
#include <memory>

#include "core/arbiter.h"
#include "gpu/gpu_reader.h"
#include "host/host_scanner.h"
#include "server/api.h"
#include "server/http_server.h"

namespace vramd {

class Daemon {
 public:
  Daemon(boost::asio::io_context& io, Config config, std::unique_ptr<GpuReader> reader,
         std::unique_ptr<HostScanner> scanner);
  ~Daemon();

  // Creates the state directory, listens on daemon.listen and state_dir/vramd.sock, and starts
  // sampling. Errors: the address is taken, the state directory cannot be made, ...
  Status start();
  void stop();

  int tcp_port() const { return http_.tcp_port(); }
  std::string socket_path() const;
  const Arbiter& arbiter() const { return arbiter_; }
  uint64_t samples_taken() const { return samples_; }

 private:
  boost::asio::awaitable<void> sample_loop();
  void apply(std::vector<Action> actions);

  boost::asio::io_context& io_;
  Arbiter arbiter_;
  std::unique_ptr<GpuReader> reader_;
  std::unique_ptr<HostScanner> scanner_;
  HostScanRequest scan_request_;
  std::deque<EventRecord> events_;
  Api api_;
  HttpServer http_;
  boost::asio::thread_pool worker_{1};
  boost::asio::steady_timer timer_;
  bool stopping_ = false;
  uint64_t samples_ = 0;
};

}  // namespace vramd
