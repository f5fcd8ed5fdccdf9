// The daemon's lease writer: each change of a lease, with the events telling it, written in one
// store transaction on the store thread; a write that fails is retried with the lease's newest
// state until it lands; and the waits for a lease's write or change (`GET /v1/leases/ID?wait=`).
// No client hears of a change before it is on disk (docs/api.md "Guarantees").
//
// Lives on the daemon's loop (one thread: no locks); only the write itself runs on the store
// thread.
#pragma once

#include <utility>  // (before Boost.Asio's awaitable.hpp, which uses std::exchange)

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "core/lease.h"
#include "store/event_store.h"
#include "store/lease_store.h"
#include "core/clock.h"
#include "core/result.h"

namespace vramd {

class LeaseWriter {
 public:
  struct Hooks {
    std::function<Now()> clock;
    // The lease as the core has it now; nullptr once it is neither active nor recently ended.
    std::function<const Lease*(uint64_t)> find;
    // Each write's outcome, on the loop: the store's health (a fault while writes fail).
    std::function<void(const Status&)> written;
    // Each write's outcome, on the store thread, before it is posted back (may be empty).
    std::function<void(bool ok)> on_store_thread;
  };
  // How long a failed write waits before the lease's newest state is written again.
  static constexpr auto kRewriteAfter = std::chrono::seconds(1);
  // How long a wait for a write alone (the change itself is there) waits for the store.
  static constexpr auto kWriteWait = std::chrono::seconds(5);

  // REQUIRES: `io`, `store_thread` and `store` outlive it.
  LeaseWriter(boost::asio::io_context& io, boost::asio::thread_pool& store_thread,
              std::shared_ptr<LeaseStore> store, Hooks hooks);

  // Writes `lease` with `told` (the events telling this change; with any of the lease's events
  // an earlier failed write carried, so they land together, still atomically).
  void save(const Lease& lease, std::vector<StoredEvent> told = {});
  // Whether every change of lease `id` is on disk.
  bool written(uint64_t id) const { return !pending_.count(id); }
  // The leases with a change not yet on disk, by id.
  std::vector<uint64_t> unwritten() const;
  // Wakes the waits on lease `id` to look again (its state changed without a write: a lost lease
  // is told at once).
  void wake(uint64_t id);
  // Returns once lease `id` is written and no longer queued (`until_ended`: ended, or its state
  // changed since the call: suspended or resumed), or after
  // `max`; a wait for the write alone gives up after kWriteWait (the store may be down). A `lost`
  // lease counts as written: it is this host's word alone (its write may wait for a store that
  // cannot be reached, the reason it was lost).
  boost::asio::awaitable<void> wait(uint64_t id, Duration max, bool until_ended);
  // Ends every wait and retries no more (the daemon stops).
  void stop();

 private:
  void saved(const Lease& lease, const Status& written, const std::vector<int64_t>& told);

  boost::asio::io_context& io_;
  boost::asio::thread_pool& store_thread_;
  std::shared_ptr<LeaseStore> store_;
  Hooks hooks_;
  bool stopping_ = false;
  std::map<uint64_t, int> pending_;  // lease id -> writes in flight
  std::map<uint64_t, Lease> latest_;  // the newest state of each lease with writes pending
  // Events telling a lease's changes whose write has not landed yet.
  std::map<uint64_t, std::vector<StoredEvent>> unwritten_;
  std::multimap<uint64_t, boost::asio::steady_timer*> waiters_;  // woken on changes
};

}  // namespace vramd
