// Several hosts on one PostgreSQL store (issue 17): the Daemon's side of its ClusterLink (what a
// claim round reads from the core, this host's status snapshot), and the views of other hosts
// and their leases the API shows (GET /v1/hosts, /v1/leases?host=). Which host counts as lost is
// the age of its heartbeat against [daemon] host_timeout, read here from the rows.
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
// How many of the leases queued here have their state and reasons read each round.
constexpr size_t kSyncedQueued = 256;
}  // namespace

nlohmann::json Daemon::status_snapshot() const {
  Now now = clock_();
  nlohmann::json out = to_json(arbiter_.status(), now);
  out["host"] = store_.host();
  out["suspend"] = to_json(arbiter_.suspend_offer());
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
    j["host"] = store_.host();
    leases.push_back(std::move(j));
  }
  out["leases"] = std::move(leases);
  return out;
}

void Daemon::start_host_beats() {
  store_.start_cluster(
      arbiter_.config().daemon.host_timeout,
      ClusterLink::Hooks{
          clock_,
          [this](const Now& now) {
            ClusterLink::Round round{arbiter_.begin_claim(store_.host(), now),
                                     arbiter_.cluster_queued(kSyncedQueued), {},
                                     store_.leases().unwritten(), arbiter_.cluster_fenced()};
            for (uint64_t id : arbiter_.cluster_granted())
              if (store_.leases().written(id)) round.granted.push_back(id);  // the store may not know yet
            return round;
          },
          [this] {
            return host_snapshot().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
          },
          [this](const Event& e) { feed(e); },
          [this](uint64_t id) { store_.leases().wake(id); },
          [this](const std::string& backend, const Status& s) {
            if (s)
              sink_.works(backend);
            else
              sink_.failed(backend, s.error());
          }});
}

void Daemon::claim_soon() {
  if (ClusterLink* cluster = store_.cluster()) cluster->claim_soon();
}

asio::awaitable<Result<std::optional<nlohmann::json>>> Daemon::lease_elsewhere(uint64_t id) {
  ClusterLink* cluster = store_.cluster();
  if (!cluster) co_return std::optional<nlohmann::json>();
  auto op = cluster->find(id);
  Result<std::optional<ElsewhereLease>> r = co_await std::move(op);
  Now now = clock_();
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
  j["elsewhere"] = e.host != store_.host();
  co_return std::optional<nlohmann::json>(std::move(j));
}

asio::awaitable<Result<bool>> Daemon::release_elsewhere(uint64_t id, std::string why) {
  ClusterLink* cluster = store_.cluster();
  if (!cluster) co_return false;
  auto op = cluster->ask_release(id, std::move(why));
  co_return co_await std::move(op);
}

asio::awaitable<Result<bool>> Daemon::heartbeat_elsewhere(uint64_t id) {
  ClusterLink* cluster = store_.cluster();
  if (!cluster) co_return false;
  auto op = cluster->beat_lease(id);
  co_return co_await std::move(op);
}

asio::awaitable<Result<nlohmann::json>> Daemon::hosts() {
  const Duration timeout = arbiter_.config().daemon.host_timeout;
  nlohmann::json out = nlohmann::json::array();
  ClusterLink* cluster = store_.cluster();
  if (!cluster) {
    // SQLite: one host, this one, as it is now.
    out.push_back({{"host", store_.host()},
                   {"state", "up"},
                   {"heartbeat", format_rfc3339(clock_().wall)},
                   {"age_ms", 0},
                   {"status", host_snapshot()}});
    co_return nlohmann::json{{"hosts", std::move(out)}, {"host_timeout_ms", timeout.count()}};
  }
  auto op = cluster->hosts();
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
  ClusterLink* cluster = store_.cluster();
  if (!cluster) co_return OtherLeases{{store_.host()}, {}};  // SQLite: this host alone
  auto op = cluster->leases_elsewhere(only);
  Result<ClusterLink::Elsewhere> elsewhere = co_await std::move(op);
  if (!elsewhere) co_return make_error(elsewhere.error());
  const Now now = clock_();
  const auto& rows = elsewhere->hosts;
  const auto& leases = elsewhere->leases;
  OtherLeases out;
  // What only the holding host knows (queue position, what its holder uses, its GPU's
  // CUDA_VISIBLE_DEVICES, the reason of a lease for a service there) comes from its last
  // snapshot, where that lease is there in the same state.
  std::map<std::string, std::map<uint64_t, nlohmann::json>> seen;  // host -> id -> lease JSON
  for (const auto& row : rows) {
    out.hosts.push_back(row.host);
    if (row.host == store_.host() || row.status.empty()) continue;
    if (!only.empty() && row.host != only) continue;
    nlohmann::json status = nlohmann::json::parse(row.status, nullptr, false);
    if (!status.is_object() || !status.contains("leases") || !status["leases"].is_array()) continue;
    for (auto& l : status["leases"])
      if (l.is_object() && l.contains("id") && l["id"].is_number_unsigned()) {
        uint64_t id = l["id"].get<uint64_t>();  // read before the move (json's = takes by value)
        seen[row.host][id] = std::move(l);
      }
  }
  for (const HostLease& hl : leases) {
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
