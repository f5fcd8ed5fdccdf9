#include "daemon/cluster_link.h"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "daemon/run_on.h"

namespace vramd {

namespace asio = boost::asio;

ClusterLink::ClusterLink(asio::io_context& io, asio::thread_pool& store_thread,
                         std::shared_ptr<HostStore> store, Duration host_timeout, Hooks hooks)
    : io_(io),
      store_thread_(store_thread),
      store_(std::move(store)),
      host_timeout_(host_timeout),
      hooks_(std::move(hooks)),
      beat_timer_(io),
      claim_timer_(io) {}

void ClusterLink::start() {
  asio::co_spawn(io_, beat_loop(), asio::detached);
  asio::co_spawn(io_, claim_loop(), asio::detached);
}

void ClusterLink::stop() {
  stopping_ = true;
  beat_timer_.cancel();
  claim_timer_.cancel();
}

void ClusterLink::claim_soon() {
  if (claim_wanted_ || stopping_) return;
  claim_wanted_ = true;
  claim_timer_.cancel();
}

asio::awaitable<void> ClusterLink::claim_loop() {
  while (!stopping_) {
    claim_wanted_ = false;
    // The room is read on the loop; until the answer comes back Admission grants nothing else.
    Now now = hooks_.clock();
    Round round = hooks_.begin_round(now);
    auto op = run_on(store_thread_, [store = store_, round = std::move(round), now,
                                     timeout = host_timeout_] {
      return store->sync(round.ctx, round.queued, round.granted, round.pending, now, timeout,
                         round.fenced);
    });
    Result<ClusterSynced> r = co_await std::move(op);
    if (stopping_) break;
    if (r) {
      hooks_.health("cluster", Ok{});
      // A round that claimed some may have left more it can take: the next one at once.
      if (!r->claimed.empty()) claim_wanted_ = true;
      synced(std::move(*r));
    } else {
      hooks_.health("cluster", make_error(r.error()));
      ClusterSynced failed;
      failed.ok = false;
      hooks_.feed(failed);  // lifts the claim's pause
    }
    if (claim_wanted_) continue;
    claim_timer_.expires_after(kClaimEvery);
    boost::system::error_code ec;
    co_await claim_timer_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
}

void ClusterLink::synced(ClusterSynced synced) {
  std::vector<uint64_t> changed;
  for (const auto& l : synced.claimed) changed.push_back(l.id);
  for (const auto& m : synced.moved) changed.push_back(m.id);
  for (uint64_t id : synced.lost) changed.push_back(id);
  std::vector<uint64_t> heard = std::move(synced.heard);
  hooks_.feed(synced);
  // A heartbeat heard by another host's API counts as one heard here, now.
  for (uint64_t id : heard) hooks_.feed(LeaseHeartbeat{id});
  for (uint64_t id : changed) hooks_.changed(id);
}

asio::awaitable<void> ClusterLink::beat_loop() {
  while (!stopping_) {
    // The snapshot is taken on the loop (it reads the Arbiter), written on the store thread.
    std::string snapshot = hooks_.snapshot();
    // Then, under an advisory lock (one live host at a time), what becomes of lost hosts' leases.
    const Now now = hooks_.clock();
    const MonoTime sent = now.mono;
    auto op = run_on(store_thread_, [store = store_, snapshot = std::move(snapshot),
                                     timeout = host_timeout_, now] {
      Status beat = store->beat(snapshot);
      Result<std::vector<LostHost>> lost =
          beat ? store->handle_lost_hosts(timeout, now)
               : Result<std::vector<LostHost>>(make_error(beat.error()));
      return std::make_pair(beat, std::move(lost));
    });
    auto [beat, lost] = co_await std::move(op);
    if (stopping_) break;
    // The write began no earlier than `sent`: the right to this host's shared leases runs from
    // there (self-fencing).
    if (beat) hooks_.feed(StoreContact{sent});
    hooks_.health("hosts", !beat ? beat : lost ? Status(Ok{}) : Status(make_error(lost.error())));
    if (lost && !lost->empty()) {
      ClusterSynced synced;
      synced.answers_claim = false;
      synced.lost_hosts = std::move(*lost);
      hooks_.feed(synced);
      claim_soon();
    }
    // At least four beats within host_timeout, two within the half of it that a host holds its
    // shared leases after its last beat: a live host never reads as lost, nor fences itself.
    beat_timer_.expires_after(std::min<Duration>(kHostBeatEvery, host_timeout_ / 4));
    boost::system::error_code ec;
    co_await beat_timer_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
}

asio::awaitable<Result<std::optional<ElsewhereLease>>> ClusterLink::find(uint64_t id) {
  Now now = hooks_.clock();
  auto op = run_on(store_thread_, [store = store_, id, now, timeout = host_timeout_] {
    return store->find(id, now, timeout);
  });
  co_return co_await std::move(op);
}

asio::awaitable<Result<bool>> ClusterLink::ask_release(uint64_t id, std::string why) {
  auto op = run_on(store_thread_, [store = store_, id, why = std::move(why)] {
    return store->ask_release(id, why);
  });
  Result<bool> r = co_await std::move(op);
  claim_soon();
  co_return r;
}

asio::awaitable<Result<bool>> ClusterLink::beat_lease(uint64_t id) {
  auto op = run_on(store_thread_, [store = store_, id] { return store->beat_lease(id); });
  Result<std::optional<std::string>> r = co_await std::move(op);
  if (!r) co_return make_error(r.error());
  co_return r->has_value();
}

asio::awaitable<Result<std::vector<HostRow>>> ClusterLink::hosts() {
  auto op = run_on(store_thread_, [store = store_] { return store->all(); });
  co_return co_await std::move(op);
}

asio::awaitable<Result<ClusterLink::Elsewhere>> ClusterLink::leases_elsewhere(std::string only) {
  Now now = hooks_.clock();
  // Both reads on the store thread: the hosts (names, snapshots) and the other hosts' rows.
  auto op = run_on(store_thread_, [store = store_, only = std::move(only), now,
                                   timeout = host_timeout_]() -> Result<Elsewhere> {
    Result<std::vector<HostRow>> rows = store->all();
    if (!rows) return make_error(rows.error());
    Result<std::vector<HostLease>> leases = store->leases_elsewhere(only, now, timeout);
    if (!leases) return make_error(leases.error());
    return Elsewhere{std::move(*rows), std::move(*leases)};
  });
  co_return co_await std::move(op);
}

}  // namespace vramd
