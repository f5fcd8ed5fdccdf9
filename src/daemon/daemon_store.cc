// What the Daemon keeps: the stores opened at start (SQLite, or PostgreSQL for several hosts),
// the leases restored from them, and the DaemonControl calls answered from them or that change
// a lease (each a core event; the store thread does the reading). Part of class Daemon.
#include "daemon/daemon.h"

#include <utility>

#include <boost/asio/post.hpp>
#include <filesystem>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "host/proc_table.h"
#include "store/postgres_store.h"
#include "store/stores.h"

namespace vramd {

namespace asio = boost::asio;

Status Daemon::open_store() {
  Status opened = store_.open(
      arbiter_.config().daemon,
      LeaseWriter::Hooks{
          clock_, [this](uint64_t id) { return arbiter_.lease(id); },
          [this](const Status& written) {
            if (written)
              sink_.works("store");
            else
              sink_.failed("store", written.error());
          },
          // On the store thread: the event writes' view of the store's health follows.
          [this](bool ok) { sink_.store_thread_saw(ok); }});
  if (!opened) return opened;
  sink_.open(store_.stores().events, store_.host());
  if (store_.shared()) {
    // Leases move between hosts: each host gives ids no other host gives.
    auto slot = store_.stores().hosts->slot();
    if (!slot) return make_error(slot.error());
    arbiter_.set_lease_id_space(kLeaseIdStride, *slot);
  }
  return Ok{};
}

asio::awaitable<Result<std::vector<StoredEvent>>> Daemon::events(int64_t after_id,
                                                                 std::optional<TimePoint> since,
                                                                 size_t limit) {
  auto op = store_.events(after_id, since, limit);
  co_return co_await std::move(op);
}

asio::awaitable<void> Daemon::stream_events(HttpStream& stream, int64_t after_id) {
  co_await sink_.stream().serve(stream, after_id, [this](int64_t after) { return events(after, std::nullopt, 1000); });
}

Status Daemon::restore_leases() {
  auto max = store_.stores().leases->max_id();
  if (!max) return make_error(max.error());
  auto kept = store_.stores().leases->active(clock_());
  if (!kept) return make_error(kept.error());
  std::vector<uint64_t> alive;
  for (const auto& l : *kept)
    if (l.request.pid && process_alive("/proc", *l.request.pid, l.request.pid_start_ticks))
      alive.push_back(l.id);
  if (!kept->empty()) spdlog::info("restoring {} leases from the store", kept->size());
  apply(arbiter_.restore_leases(std::move(*kept), alive, clock_(), *max + 1));
  return Ok{};
}

Result<uint64_t> Daemon::request_lease(LeaseRequest request) {
  if (request.pid) {
    auto p = read_process("/proc", *request.pid);
    if (!p) return make_error(fmt::format("no process with pid {}", *request.pid));
    request.pid_start_ticks = p->start_ticks;
    if (request.holder.empty()) request.holder = p->comm;
  }
  // Several hosts (core/cluster.h): on a shared store a client's lease goes to the one queue,
  // for any host or the one it names; a lease for a service is this host's.
  if (request.host == "any") request.host.clear();
  const std::string& host = store_.host();
  if (!store_.shared() && !request.host.empty() && request.host != host)
    return make_error(fmt::format(
        "host: this daemon's store is SQLite, which knows only this host ('{}'); a lease for host "
        "'{}' needs a store the hosts share ([daemon] store = \"postgresql://...\")",
        host, request.host));
  if (!request.service.empty() && !request.host.empty() && request.host != host)
    return make_error(fmt::format("host: service {} is this host's ('{}'), not '{}'",
                                  request.service, host, request.host));
  request.cluster = store_.shared() && request.service.empty();
  if (!request.cluster) request.host.clear();
  uint64_t id = arbiter_.next_lease_id();  // one counter for client and start leases
  feed(LeaseRequested{id, std::move(request)});
  return id;
}

void Daemon::lease_heartbeat(uint64_t id) { feed(LeaseHeartbeat{id}); }

void Daemon::release_lease(uint64_t id, std::optional<int> exit_status) {
  feed(LeaseReleased{id, exit_status});
}

asio::awaitable<void> Daemon::wait_lease(uint64_t id, Duration max, bool until_ended) {
  co_await store_.leases().wait(id, max, until_ended);
}

asio::awaitable<Result<std::optional<JobRecord>>> Daemon::job(uint64_t id) {
  auto op = store_.job(id);
  co_return co_await std::move(op);
}

asio::awaitable<Result<std::vector<DurationRecord>>> Daemon::durations(DurationQuery q) {
  auto op = store_.durations(std::move(q));
  co_return co_await std::move(op);
}

asio::awaitable<Result<std::vector<ServiceVariant>>> Daemon::variants(std::string service) {
  auto op = store_.variants(std::move(service));
  co_return co_await std::move(op);
}

asio::awaitable<Result<std::vector<JobRecord>>> Daemon::jobs(std::string label, size_t limit) {
  auto op = store_.jobs(std::move(label), limit);
  co_return co_await std::move(op);
}

}  // namespace vramd
