// The durations history's shell side (docs/history.md): takes the prompts the core reports
// (RecordDurations) and the proxy's request samples (proxy/request_log.h), stamps each request
// with what its service runs (version, arguments, GPU), and writes them to the store in batches
// on the store thread, once a second; drops records past history_retention once an hour. The
// request path only copies a fixed-size sample into the log's ring.
#pragma once

#include <utility>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <memory>
#include <vector>

#include "core/durations.h"
#include "proxy/request_log.h"
#include "store/duration_store.h"

namespace vramd {

class DurationRecorder {
 public:
  // What a service runs now, for its requests' records.
  struct Running {
    std::string version, args_fp;
    std::optional<unsigned> gpu;
  };
  // Every service's, read on the loop once a flush; the records are made on the store thread,
  // so the loop (which is also the proxy's thread) only copies the samples out of the ring.
  using Stamps = std::function<std::map<std::string, Running>()>;

  DurationRecorder(boost::asio::io_context& io, boost::asio::thread_pool& store_thread,
                   std::shared_ptr<DurationStore> store, Duration retention, Stamps stamps);
  ~DurationRecorder();
  DurationRecorder(const DurationRecorder&) = delete;
  DurationRecorder& operator=(const DurationRecorder&) = delete;

  // Where the proxy writes its samples.
  RequestLog* log() { return &log_; }
  // Starts the once-a-second flush.
  void start();
  // Flushes what is pending (posted to the store thread) and stops the timer.
  void stop();

  // Prompts from the core, already stamped: in the next batch.
  void record(std::vector<DurationRecord> records);
  // A variant the core saw: written at once (on the store thread).
  void remember(const ServiceVariant& v);
  // Drains the log and posts one batch to the store thread. Called by the timer.
  void flush();

  // Records the store has not taken (it failed): kept, up to kMaxUnwritten, and retried.
  static constexpr size_t kMaxUnwritten = 100000;

  // A request sample as a record (its service's version, arguments and GPU left to stamp).
  static DurationRecord to_record(const RequestSample& s);

 private:
  boost::asio::io_context& io_;
  boost::asio::thread_pool& store_thread_;
  std::shared_ptr<DurationStore> store_;
  Duration retention_;
  Stamps stamps_;
  RequestLog log_;
  std::vector<DurationRecord> pending_;
  boost::asio::steady_timer timer_;
  bool stopped_ = false;
  // On the store thread only: what it failed to write, and the last prune.
  std::shared_ptr<struct RecorderStoreSide> store_side_;
};

}  // namespace vramd
