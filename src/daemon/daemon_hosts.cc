// Several hosts on one PostgreSQL store (issue 17): this host's heartbeat and status snapshot in
// the hosts table, and the view of every host (GET /v1/hosts). Effects only: which host counts as
// lost is the age of its heartbeat against [daemon] host_timeout, read here from the rows.
#include <utility>  // GCC 12: before Boost's awaitable.hpp

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "daemon/daemon.h"
#include "server/json_view.h"
#include "store/postgres_store.h"

namespace vramd {

namespace asio = boost::asio;
using asio::use_awaitable;

namespace {
// How often this host's heartbeat and status snapshot are written.
constexpr auto kHostBeatEvery = std::chrono::seconds(2);
// How often this host claims from the shared queue when nothing here asks sooner.
constexpr auto kClaimEvery = std::chrono::milliseconds(500);
// How many of the leases queued here have their state and reasons read each round.
constexpr size_t kSyncedQueued = 256;
}  // namespace

nlohmann::json Daemon::status_snapshot() const {
  Now now = clock_();
  nlohmann::json out = to_json(arbiter_.status(), now);
  out["host"] = host_;
  nlohmann::json faults = nlohmann::json::array();
  for (const auto& f : this->faults())
    faults.push_back({{"backend", f.backend}, {"error", f.error}, {"since", format_rfc3339(f.since)}});
  out["faults"] = std::move(faults);
  return out;
}

nlohmann::json Daemon::host_snapshot() const {
  // What one view of every host shows: the status, and the services and leases beside it.
  Now now = clock_();
  nlohmann::json out = status_snapshot();
  nlohmann::json services = nlohmann::json::array();
  for (const auto& st : arbiter_.services()) services.push_back(to_json(st, now));
  out["services"] = std::move(services);
  nlohmann::json leases = nlohmann::json::array();
  for (const auto& l : arbiter_.leases()) {
    nlohmann::json j = to_json(l, arbiter_, now);
    j["host"] = host_;
    leases.push_back(std::move(j));
  }
  out["leases"] = std::move(leases);
  return out;
}

void Daemon::start_host_beats() {
  if (!host_store_) return;
  host_timer_ = std::make_unique<asio::steady_timer>(io_);
  asio::co_spawn(io_, host_loop(), asio::detached);
  claim_timer_ = std::make_unique<asio::steady_timer>(io_);
  asio::co_spawn(io_, claim_loop(), asio::detached);
}

void Daemon::claim_soon() {
  if (!claim_timer_ || claim_wanted_) return;
  claim_wanted_ = true;
  claim_timer_->cancel();
}

asio::awaitable<void> Daemon::claim_loop() {
  const Duration timeout = arbiter_.config().daemon.host_timeout;
  while (!stopping_) {
    claim_wanted_ = false;
    // The room is read on the loop; until the answer comes back Admission grants nothing else.
    Now now = clock_();
    ClaimContext ctx = arbiter_.begin_claim(host_, now);
    std::vector<uint64_t> queued = arbiter_.cluster_queued(kSyncedQueued);
    std::vector<uint64_t> granted, pending, fenced = arbiter_.cluster_fenced();
    for (uint64_t id : arbiter_.cluster_granted())
      if (lease_writer_->written(id)) granted.push_back(id);  // the store may not know yet
    pending = lease_writer_->unwritten();
    auto op = run_on(store_thread_, [store = host_store_, ctx = std::move(ctx),
                                     queued = std::move(queued), granted = std::move(granted),
                                     pending = std::move(pending), fenced = std::move(fenced), now,
                                     timeout] {
      return store->sync(ctx, queued, granted, pending, now, timeout, fenced);
    });
    Result<ClusterSynced> r = co_await std::move(op);
    if (stopping_) break;
    if (r) {
      sink_.works("cluster");
      // A round that claimed some may have left more it can take: the next one at once.
      if (!r->claimed.empty()) claim_wanted_ = true;
      cluster_synced(std::move(*r));
    } else {
      sink_.failed("cluster", r.error());
      ClusterSynced failed;
      failed.ok = false;
      feed(failed);  // lifts the claim's pause
    }
    if (claim_wanted_) continue;
    claim_timer_->expires_after(kClaimEvery);
    boost::system::error_code ec;
    co_await claim_timer_->async_wait(asio::redirect_error(use_awaitable, ec));
  }
}

void Daemon::cluster_synced(ClusterSynced synced) {
  std::vector<uint64_t> changed;
  for (const auto& l : synced.claimed) changed.push_back(l.id);
  for (const auto& m : synced.moved) changed.push_back(m.id);
  for (uint64_t id : synced.lost) changed.push_back(id);
  std::vector<uint64_t> heard = std::move(synced.heard);
  feed(synced);
  // A heartbeat heard by another host's API counts as one heard here, now.
  for (uint64_t id : heard) feed(LeaseHeartbeat{id});
  for (uint64_t id : changed) lease_writer_->wake(id);
}

asio::awaitable<Result<std::optional<nlohmann::json>>> Daemon::lease_elsewhere(uint64_t id) {
  if (!host_store_) co_return std::optional<nlohmann::json>();
  Now now = clock_();
  auto op = run_on(store_thread_,
                   [store = host_store_, id, now, timeout = arbiter_.config().daemon.host_timeout] {
                     return store->find(id, now, timeout);
                   });
  Result<std::optional<ElsewhereLease>> r = co_await std::move(op);
  if (!r) co_return make_error(r.error());
  if (!*r) co_return std::optional<nlohmann::json>();
  const ElsewhereLease& e = **r;
  nlohmann::json j;
  if (e.lease) {
    j = to_json(*e.lease, arbiter_, now);
  } else {
    j = to_json(*e.job);
    j["ended"] = true;
  }
  j["host"] = e.host;
  j["elsewhere"] = e.host != host_;
  co_return std::optional<nlohmann::json>(std::move(j));
}

asio::awaitable<Result<bool>> Daemon::release_elsewhere(uint64_t id, std::string why) {
  if (!host_store_) co_return false;
  auto op = run_on(store_thread_, [store = host_store_, id, why = std::move(why)] {
    return store->ask_release(id, why);
  });
  Result<bool> r = co_await std::move(op);
  claim_soon();
  co_return r;
}

asio::awaitable<Result<bool>> Daemon::heartbeat_elsewhere(uint64_t id) {
  if (!host_store_) co_return false;
  auto op = run_on(store_thread_, [store = host_store_, id] { return store->beat_lease(id); });
  Result<std::optional<std::string>> r = co_await std::move(op);
  if (!r) co_return make_error(r.error());
  co_return r->has_value();
}

asio::awaitable<void> Daemon::host_loop() {
  while (!stopping_) {
    // The snapshot is taken on the loop (it reads the Arbiter), written on the store thread.
    std::string snapshot = host_snapshot().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    // Then, under an advisory lock (one live host at a time), what becomes of lost hosts' leases.
    const Duration timeout = arbiter_.config().daemon.host_timeout;
    const Now now = clock_();
    const MonoTime sent = now.mono;
    auto op = run_on(store_thread_, [store = host_store_, snapshot = std::move(snapshot), timeout,
                                     now] {
      Status beat = store->beat(snapshot);
      Result<std::vector<LostHost>> lost =
          beat ? store->handle_lost_hosts(timeout, now) : Result<std::vector<LostHost>>(make_error(beat.error()));
      return std::make_pair(beat, std::move(lost));
    });
    auto [r, lost] = co_await std::move(op);
    if (stopping_) break;
    // The write began no earlier than `sent`: the right to this host's shared leases runs from
    // there (self-fencing).
    if (r) feed(StoreContact{sent});
    if (r && lost)
      sink_.works("hosts");
    else
      sink_.failed("hosts", r ? lost.error() : r.error());
    if (lost && !lost->empty()) {
      ClusterSynced synced;
      synced.answers_claim = false;
      synced.lost_hosts = std::move(*lost);
      feed(synced);
      claim_soon();
    }
    // At least four beats within host_timeout, two within the half of it that a host holds its
    // shared leases after its last beat: a live host never reads as lost, nor fences itself.
    host_timer_->expires_after(std::min<Duration>(kHostBeatEvery, timeout / 4));
    boost::system::error_code ec;
    co_await host_timer_->async_wait(asio::redirect_error(use_awaitable, ec));
  }
}

asio::awaitable<Result<nlohmann::json>> Daemon::hosts() {
  const Duration timeout = arbiter_.config().daemon.host_timeout;
  nlohmann::json out = nlohmann::json::array();
  if (!host_store_) {
    // SQLite: one host, this one, as it is now.
    out.push_back({{"host", host_},
                   {"state", "up"},
                   {"heartbeat", format_rfc3339(clock_().wall)},
                   {"age_ms", 0},
                   {"status", host_snapshot()}});
    co_return nlohmann::json{{"hosts", std::move(out)}, {"host_timeout_ms", timeout.count()}};
  }
  auto op = run_on(store_thread_, [store = host_store_] { return store->all(); });
  Result<std::vector<HostRow>> rows = co_await std::move(op);
  if (!rows) co_return make_error(rows.error());
  for (const auto& row : *rows) {
    bool lost = row.age > timeout;
    nlohmann::json status = row.status.empty() ? nlohmann::json(nullptr)
                                               : nlohmann::json::parse(row.status, nullptr, false);
    if (status.is_discarded()) status = nullptr;
    // A lost host's last snapshot is shown as it was, its services' states unknown now.
    if (lost && status.is_object() && status.contains("services"))
      for (auto& s : status["services"]) s["state"] = "unknown";
    out.push_back({{"host", row.host},
                   {"state", lost ? "lost" : "up"},
                   {"heartbeat", format_rfc3339(row.heartbeat)},
                   {"age_ms", row.age.count()},
                   {"status", std::move(status)}});
  }
  co_return nlohmann::json{{"hosts", std::move(out)}, {"host_timeout_ms", timeout.count()}};
}

asio::awaitable<Result<DaemonControl::OtherLeases>> Daemon::leases_elsewhere(std::string only) {
  if (!host_store_) co_return OtherLeases{{host_}, {}};  // SQLite: this host alone
  const Duration timeout = arbiter_.config().daemon.host_timeout;
  Now now = clock_();
  // Both reads on the store thread: the hosts (names, snapshots) and the other hosts' rows.
  auto op = run_on(store_thread_, [store = host_store_, only, now, timeout] {
    Result<std::vector<HostRow>> rows = store->all();
    Result<std::vector<HostLease>> leases =
        rows ? store->leases_elsewhere(only, now, timeout) : Result<std::vector<HostLease>>(make_error(rows.error()));
    return std::make_pair(std::move(rows), std::move(leases));
  });
  auto [rows, leases] = co_await std::move(op);
  if (!rows) co_return make_error(rows.error());
  if (!leases) co_return make_error(leases.error());
  OtherLeases out;
  // What only the holding host knows (queue position, what its holder uses, its GPU's
  // CUDA_VISIBLE_DEVICES, the reason of a lease for a service there) comes from its last
  // snapshot, where that lease is there in the same state.
  std::map<std::string, std::map<uint64_t, nlohmann::json>> seen;  // host -> id -> lease JSON
  for (const auto& row : *rows) {
    out.hosts.push_back(row.host);
    if (row.host == host_ || row.status.empty()) continue;
    if (!only.empty() && row.host != only) continue;
    nlohmann::json status = nlohmann::json::parse(row.status, nullptr, false);
    if (!status.is_object() || !status.contains("leases") || !status["leases"].is_array()) continue;
    for (auto& l : status["leases"])
      if (l.is_object() && l.contains("id") && l["id"].is_number_unsigned()) {
        uint64_t id = l["id"].get<uint64_t>();  // read before the move (json's = takes by value)
        seen[row.host][id] = std::move(l);
      }
  }
  for (const HostLease& hl : *leases) {
    nlohmann::json j = to_json(hl.lease, now);
    j["host"] = hl.host;
    j["elsewhere"] = true;
    auto h = seen.find(hl.host);
    if (h != seen.end()) {
      auto it = h->second.find(hl.lease.id);
      if (it != h->second.end() && it->second.value("state", "") == j["state"]) {
        for (const char* key : {"position", "gpu_cuda_visible_devices", "held_bytes", "peak_bytes"})
          if (it->second.contains(key)) j[key] = it->second[key];
        // A shared lease's reason is the store's (every live host's, fresh); another's, that host's.
        if (it->second.contains("reason") && (hl.lease.reason.text.empty() || !hl.lease.request.cluster))
          j["reason"] = it->second["reason"];
      }
    }
    out.leases.push_back(std::move(j));
  }
  co_return out;
}

}  // namespace vramd
