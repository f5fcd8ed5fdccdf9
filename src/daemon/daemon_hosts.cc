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
}

asio::awaitable<void> Daemon::host_loop() {
  while (!stopping_) {
    // The snapshot is taken on the loop (it reads the Arbiter), written on the store thread.
    std::string snapshot = host_snapshot().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    auto op = run_on(store_thread_, [store = host_store_, snapshot = std::move(snapshot)] {
      return store->beat(snapshot);
    });
    Status r = co_await std::move(op);
    if (stopping_) break;
    if (r)
      backend_works("hosts");
    else
      backend_failed("hosts", r.error());
    host_timer_->expires_after(kHostBeatEvery);
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

}  // namespace vramd
