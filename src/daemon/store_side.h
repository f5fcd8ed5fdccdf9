// The daemon's side of its store: the stores opened at start (SQLite, or PostgreSQL shared by
// several hosts), this host's name in them, and the one thread every store call runs on (libpq's
// connection and SQLite's are used from one thread at a time: a read on the loop while the store
// thread wrote once took the write's answer). Beside them, the writers that live on that thread:
// each lease change (LeaseWriter), the durations history (DurationRecorder) and, on a shared
// store, the link to the other hosts (ClusterLink); and the shell's own reads and writes of the
// history: crashes, jobs, durations, variants, events, learned peaks, wake times and demand.
//
// It decides nothing: what it reads at start is handed to the core by the Daemon, and what it
// writes is what the core's actions say. Lives on the daemon's loop; the reads are awaitables
// whose work runs on the store thread.
#pragma once

#include <utility>  // (before Boost.Asio's awaitable.hpp, which uses std::exchange)

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/thread_pool.hpp>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/result.h"
#include "daemon/cluster_link.h"
#include "daemon/duration_recorder.h"
#include "daemon/lease_writer.h"
#include "store/stores.h"

namespace vramd {

class StoreSide {
 public:
  explicit StoreSide(boost::asio::io_context& io) : io_(io) {}
  ~StoreSide() { join(); }
  StoreSide(const StoreSide&) = delete;
  StoreSide& operator=(const StoreSide&) = delete;

  // Names this host ([daemon] host, else the machine's name, else "localhost"), opens the stores
  // [daemon] names and makes the lease writer. REQUIRES: `d.state_dir` exists.
  Status open(const DaemonConfig& d, LeaseWriter::Hooks lease_hooks);
  // Starts the durations history's flush (after open).
  void start_history(Duration retention, DurationRecorder::Stamps stamps);
  // On a shared store: starts the heartbeats and claim rounds. Nothing with SQLite.
  void start_cluster(Duration host_timeout, ClusterLink::Hooks hooks);
  // Ends the heartbeats and claim rounds (an answer on its way is dropped).
  void stop_cluster();
  // Ends the lease writes' waits and retries.
  void stop_leases();
  // Posts the history's last samples (written before the store thread is joined).
  void stop_history();
  // Waits for what was posted to the store thread (the last writes).
  void join() { thread_.join(); }

  boost::asio::thread_pool& thread() { return thread_; }
  const Stores& stores() const { return stores_; }
  const std::string& host() const { return host_; }
  bool shared() const { return stores_.hosts != nullptr; }
  // After open: the lease writer and the history; the cluster link is null without a shared
  // store (or before start_cluster).
  LeaseWriter& leases() { return *lease_writer_; }
  const LeaseWriter& leases() const { return *lease_writer_; }
  DurationRecorder* history() { return recorder_.get(); }
  ClusterLink* cluster() { return cluster_.get(); }

  // Written on the store thread; a failure is logged (the learning is kept in the core).
  void save_peak(const LoadPeak& peak, TimePoint at);
  void save_wake(const WakeTime& t, TimePoint at);
  void save_demand(const DemandHistory& d);
  // `then` runs on the loop once the record is written (or its write failed).
  void add_crash(CrashRecord rec, std::function<void(const CrashRecord&)> then);

  boost::asio::awaitable<Result<std::vector<StoredEvent>>> events(int64_t after_id,
                                                                  std::optional<TimePoint> since,
                                                                  size_t limit);
  boost::asio::awaitable<Result<std::vector<CrashRecord>>> crashes(std::string service, size_t limit);
  boost::asio::awaitable<Result<std::optional<JobRecord>>> job(uint64_t id);
  boost::asio::awaitable<Result<std::vector<JobRecord>>> jobs(std::string label, size_t limit);
  boost::asio::awaitable<Result<std::vector<DurationRecord>>> durations(DurationQuery q);
  boost::asio::awaitable<Result<std::vector<ServiceVariant>>> variants(std::string service);

 private:
  boost::asio::io_context& io_;
  boost::asio::thread_pool thread_{1};
  Stores stores_;
  std::string host_;
  std::unique_ptr<LeaseWriter> lease_writer_;
  std::unique_ptr<DurationRecorder> recorder_;
  std::unique_ptr<ClusterLink> cluster_;
};

}  // namespace vramd
