#include "daemon/store_side.h"

#include <unistd.h>

#include <boost/asio/post.hpp>
#include <spdlog/spdlog.h>

#include "daemon/run_on.h"
#include "store/postgres_store.h"

namespace vramd {

namespace asio = boost::asio;

Status StoreSide::open(const DaemonConfig& d, LeaseWriter::Hooks lease_hooks) {
  host_ = d.host;
  if (host_.empty()) {
    char name[256] = {};
    host_ = ::gethostname(name, sizeof name - 1) == 0 && name[0] ? name : "localhost";
  }
  auto stores = open_configured_stores(d, host_);
  if (!stores) return make_error(stores.error());
  stores_ = std::move(*stores);
  lease_writer_ = std::make_unique<LeaseWriter>(io_, thread_, stores_.leases, std::move(lease_hooks));
  return Ok{};
}

void StoreSide::start_history(Duration retention, DurationRecorder::Stamps stamps) {
  recorder_ = std::make_unique<DurationRecorder>(io_, thread_, stores_.durations, retention,
                                                 std::move(stamps));
  recorder_->start();
}

void StoreSide::start_cluster(Duration host_timeout, ClusterLink::Hooks hooks) {
  if (!stores_.hosts) return;
  cluster_ = std::make_unique<ClusterLink>(io_, thread_, stores_.hosts, host_timeout, std::move(hooks));
  cluster_->start();
}

void StoreSide::stop_cluster() {
  if (cluster_) cluster_->stop();
}

void StoreSide::stop_leases() {
  if (lease_writer_) lease_writer_->stop();
}

void StoreSide::stop_history() {
  if (recorder_) recorder_->stop();  // the last requests' samples, written before the store closes
}

void StoreSide::save_peak(const LoadPeak& peak, TimePoint at) {
  asio::post(thread_, [store = stores_.peaks, peak, at] {
    if (auto r = store->save(peak, at); !r) spdlog::warn("{}", r.error());
  });
}

void StoreSide::save_wake(const WakeTime& t, TimePoint at) {
  asio::post(thread_, [store = stores_.peaks, t, at] {
    if (auto r = store->save_wake(t, at); !r) spdlog::warn("{}", r.error());
  });
}

void StoreSide::save_demand(const DemandHistory& d) {
  asio::post(thread_, [store = stores_.peaks, d] {
    if (auto r = store->save_demand(d); !r) spdlog::warn("{}", r.error());
  });
}

void StoreSide::add_crash(CrashRecord rec, std::function<void(const CrashRecord&)> then) {
  asio::post(thread_, [this, store = stores_.crashes, rec = std::move(rec), then = std::move(then)] {
    if (auto r = store->add(rec); !r) spdlog::warn("{}", r.error());
    asio::post(io_, [rec, then] { then(rec); });
  });
}

// Each read's operation is named, not a temporary in the co_await expression: GCC 12 may destroy
// such temporaries twice, which here released the store's shared_ptr once too often.
asio::awaitable<Result<std::vector<StoredEvent>>> StoreSide::events(int64_t after_id,
                                                                    std::optional<TimePoint> since,
                                                                    size_t limit) {
  auto op = run_on(thread_, [store = stores_.events, after_id, since, limit] {
    return store->list(after_id, since, limit);
  });
  co_return co_await std::move(op);
}

asio::awaitable<Result<std::vector<CrashRecord>>> StoreSide::crashes(std::string service, size_t limit) {
  auto op = run_on(thread_, [store = stores_.crashes, service = std::move(service), limit] {
    return store->list(service, limit);
  });
  co_return co_await std::move(op);
}

asio::awaitable<Result<std::optional<JobRecord>>> StoreSide::job(uint64_t id) {
  auto op = run_on(thread_, [store = stores_.leases, id] { return store->job(id); });
  co_return co_await std::move(op);
}

asio::awaitable<Result<std::vector<JobRecord>>> StoreSide::jobs(std::string label, size_t limit) {
  auto op = run_on(thread_, [store = stores_.leases, label = std::move(label), limit] {
    return store->jobs(label, limit);
  });
  co_return co_await std::move(op);
}

asio::awaitable<Result<std::vector<DurationRecord>>> StoreSide::durations(DurationQuery q) {
  auto op = run_on(thread_, [store = stores_.durations, q = std::move(q)] { return store->list(q); });
  co_return co_await std::move(op);
}

asio::awaitable<Result<std::vector<ServiceVariant>>> StoreSide::variants(std::string service) {
  auto op = run_on(thread_, [store = stores_.durations, service = std::move(service)] {
    return store->variants(service);
  });
  co_return co_await std::move(op);
}

}  // namespace vramd
