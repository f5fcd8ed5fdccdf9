// The daemon's link to the other hosts of one PostgreSQL store (issue 17, docs/cluster.md): this
// host's heartbeat and status snapshot in the hosts table, the claim rounds of the one queue
// (core/cluster.h), the lost hosts' leases, and the reads and asks about leases other hosts hold.
// Effects only: what a round's answer means is the core's (ClusterSynced); which host counts as
// lost is the age of its heartbeat against [daemon] host_timeout, read by the store.
//
// Lives on the daemon's loop (one thread: no locks); each store call runs on the store thread.
#pragma once

#include <utility>  // (before Boost.Asio's awaitable.hpp, which uses std::exchange)

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/clock.h"
#include "core/cluster.h"
#include "core/events.h"
#include "core/result.h"
#include "store/postgres_store.h"

namespace vramd {

class ClusterLink {
 public:
  // What one claim round tells the store, read on the loop. Until the round's answer is fed back
  // (a ClusterSynced), Admission grants nothing else (Arbiter::begin_claim).
  struct Round {
    ClaimContext ctx;
    std::vector<uint64_t> queued;   // leases queued here (their state and reasons read)
    std::vector<uint64_t> granted;  // granted here and written (still this host's?)
    std::vector<uint64_t> pending;  // with a write not landed yet: neither checked nor taken up
    std::vector<uint64_t> fenced;   // given up while cut off, to queue again
  };
  struct Hooks {
    std::function<Now()> clock;
    std::function<Round(const Now&)> begin_round;
    // This host's status snapshot (the hosts table's row), taken on the loop before each beat.
    std::function<std::string()> snapshot;
    // What the store answered, to the core: ClusterSynced, StoreContact, LeaseHeartbeat.
    std::function<void(const Event&)> feed;
    // A lease whose state a round changed (its waiters look again).
    std::function<void(uint64_t)> changed;
    // Each round's and beat's outcome: backend "cluster" (claims) or "hosts" (beats).
    std::function<void(const std::string& backend, const Status&)> health;
  };
  // How often this host's heartbeat and status snapshot are written (at most host_timeout / 4).
  static constexpr auto kHostBeatEvery = std::chrono::seconds(2);
  // How often this host claims from the shared queue when nothing here asks sooner.
  static constexpr auto kClaimEvery = std::chrono::milliseconds(500);

  // REQUIRES: `io` and `store_thread` outlive it; `store` is not null.
  ClusterLink(boost::asio::io_context& io, boost::asio::thread_pool& store_thread,
              std::shared_ptr<HostStore> store, Duration host_timeout, Hooks hooks);

  // Starts the beat and claim loops.
  void start();
  // Ends both loops; an answer still on its way is dropped.
  void stop();
  // A claim round soon (a change here: a lease queued, released, or a round that claimed some).
  void claim_soon();

  // Lease `id` wherever it is; nullopt when no host has it.
  boost::asio::awaitable<Result<std::optional<ElsewhereLease>>> find(uint64_t id);
  // Asks the host that holds lease `id` to end it (false when none does); a claim round follows.
  boost::asio::awaitable<Result<bool>> ask_release(uint64_t id, std::string why);
  // A heartbeat of lease `id` for the host that holds it (false when none does).
  boost::asio::awaitable<Result<bool>> beat_lease(uint64_t id);
  // Every host's row.
  boost::asio::awaitable<Result<std::vector<HostRow>>> hosts();
  // Every host's row, and the lease rows of the hosts other than this one (`only`: of that one).
  struct Elsewhere {
    std::vector<HostRow> hosts;
    std::vector<HostLease> leases;
  };
  boost::asio::awaitable<Result<Elsewhere>> leases_elsewhere(std::string only);

  Duration host_timeout() const { return host_timeout_; }

 private:
  boost::asio::awaitable<void> beat_loop();
  boost::asio::awaitable<void> claim_loop();
  void synced(ClusterSynced synced);

  boost::asio::io_context& io_;
  boost::asio::thread_pool& store_thread_;
  std::shared_ptr<HostStore> store_;
  Duration host_timeout_;
  Hooks hooks_;
  boost::asio::steady_timer beat_timer_;
  boost::asio::steady_timer claim_timer_;
  bool claim_wanted_ = false;
  bool stopping_ = false;
};

}  // namespace vramd
