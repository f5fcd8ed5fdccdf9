// Fault injection for the shell (issue 14, item 2): pass-through wrappers around the Daemon's
// backends, each with one switch, in the manner of leveldb's EnvWrapper / FaultInjectionTestEnv.
// With every switch off a wrapper changes nothing; a switch makes its backend fail the way the
// real one does (an NVML error, a read that never returns, an unreadable /proc, a failed spawn,
// a disk that is full or gives I/O errors).
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "gpu/gpu_reader.h"
#include "host/host_scanner.h"
#include "supervisor/process_runner.h"

namespace vramd::testing {

// The switches, shared by the test and the wrappers (which the Daemon owns).
struct FaultSwitches {
  std::atomic<bool> gpu_fail{false};    // every NVML read fails (the driver's error)
  std::atomic<bool> gpu_hang{false};    // every NVML read blocks until the switch is off
  std::atomic<bool> proc_fail{false};   // /proc cannot be read
  std::atomic<bool> spawn_fail{false};  // fork/exec of a service fails
  std::atomic<int> hung_reads{0};       // reads blocked right now

  void set(std::atomic<bool>& sw, bool on) {
    {
      std::lock_guard<std::mutex> l(m_);
      sw = on;
    }
    cv_.notify_all();
  }
  void wait_while(const std::atomic<bool>& sw) {
    std::unique_lock<std::mutex> l(m_);
    ++hung_reads;
    cv_.wait(l, [&] { return !sw.load(); });
    --hung_reads;
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
};

class FaultyGpuReader : public GpuReader {
 public:
  FaultyGpuReader(std::unique_ptr<GpuReader> inner, std::shared_ptr<FaultSwitches> sw)
      : inner_(std::move(inner)), sw_(std::move(sw)) {}
  std::string backend() const override { return inner_->backend(); }

 protected:
  GpuReading read_gpus(ProcessListSchedule* lists) override {
    if (sw_->gpu_hang) sw_->wait_while(sw_->gpu_hang);
    if (sw_->gpu_fail) {
      GpuReading r;
      r.backend = inner_->backend();
      r.error = "nvmlDeviceGetCount: Unknown Error (injected)";  // what NVML says when it fails
      return r;
    }
    return lists ? inner_->read(*lists) : inner_->read();
  }

 private:
  std::unique_ptr<GpuReader> inner_;
  std::shared_ptr<FaultSwitches> sw_;
};

class FaultyHostScanner : public HostScanner {
 public:
  FaultyHostScanner(std::unique_ptr<HostScanner> inner, std::shared_ptr<FaultSwitches> sw)
      : inner_(std::move(inner)), sw_(std::move(sw)) {}
  HostSnapshot scan(const HostScanRequest& request) override {
    if (sw_->proc_fail) {
      HostSnapshot s;
      s.error = "cannot read /proc: Permission denied (injected)";
      return s;
    }
    return inner_->scan(request);
  }

 private:
  std::unique_ptr<HostScanner> inner_;
  std::shared_ptr<FaultSwitches> sw_;
};

// spawn() fails as fork does when the process limit is reached; the rest passes through.
class FaultyProcessRunner : public ProcessRunner {
 public:
  FaultyProcessRunner(boost::asio::io_context& io, std::unique_ptr<ProcessRunner> inner,
                      std::shared_ptr<FaultSwitches> sw)
      : io_(io), inner_(std::move(inner)), sw_(std::move(sw)) {}
  void set_sink(Sink sink) override {
    sink_ = sink;
    inner_->set_sink(std::move(sink));
  }
  void spawn(const ServiceConfig& svc, std::vector<int> ours) override;
  void adopt(const std::deque<ServiceConfig>& services) override { inner_->adopt(services); }
  void signal(int pid, int signal) override { inner_->signal(pid, signal); }
  void rotate_logs(const std::deque<ServiceConfig>& services) override {
    inner_->rotate_logs(services);
  }
  std::string log_path(const std::string& service) const override {
    return inner_->log_path(service);
  }
  void close() override { inner_->close(); }

 private:
  boost::asio::io_context& io_;
  std::unique_ptr<ProcessRunner> inner_;
  std::shared_ptr<FaultSwitches> sw_;
  Sink sink_;
};

// A SQLite VFS over the default one, registered as the default for as long as it lives (as
// SQLite's own tests do with testvfs): its switch makes every write fail with SQLITE_FULL (the
// disk is full: what the unix VFS returns on ENOSPC) or SQLITE_IOERR_WRITE / _FSYNC (EIO).
// REQUIRES: one at a time; every connection opened through it is closed before it goes.
class FaultVfs {
 public:
  enum class Mode { none, full, ioerr };
  FaultVfs();
  ~FaultVfs();
  FaultVfs(const FaultVfs&) = delete;
  FaultVfs& operator=(const FaultVfs&) = delete;
  void set(Mode m) { mode_ = m; }
  static std::atomic<Mode> mode_;
  static std::atomic<int> refused_;  // writes refused so far
};

// A unix socket server that accepts every connection and never answers (a hung dockerd), until
// release(): then it closes every connection it holds and each one after at once.
class HangingUnixServer {
 public:
  explicit HangingUnixServer(std::string path);
  ~HangingUnixServer();
  void release();
  int accepted() const { return accepted_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
  std::atomic<bool> released_{false};
  std::atomic<bool> stop_{false};
  std::atomic<int> accepted_{0};
  std::vector<int> held_;
  std::mutex m_;
  std::thread thread_;
};

// Latencies of GET /v1/status asked every `every` from another thread while a fault is on.
struct LatencyFigures {
  size_t requests = 0;
  size_t failed = 0;  // no 200 (or no answer within 5 s)
  double p50_ms = 0, p99_ms = 0, max_ms = 0;
};
class StatusLatencyProbe {
 public:
  StatusLatencyProbe(std::string url, std::chrono::milliseconds every);
  ~StatusLatencyProbe();
  LatencyFigures stop();  // stops asking and summarises

 private:
  std::string url_;
  std::chrono::milliseconds every_;
  std::atomic<bool> stop_{false};
  std::vector<double> ms_;
  size_t failed_ = 0;
  std::thread thread_;
};

}  // namespace vramd::testing
