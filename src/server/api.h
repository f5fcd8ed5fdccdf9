// The /v1 API routes over the daemon's state. Runs on the event loop, like the Arbiter.
#pragma once

#include <nlohmann/json.hpp>

#include <functional>

#include "core/arbiter.h"
#include "supervisor/children.h"
#include "server/http_server.h"
#include "server/routes.h"
#include "server/metrics.h"
#include "server/target.h"
#include "store/event_store.h"
#include "store/crash_store.h"
#include "store/lease_store.h"

namespace vramd {

// A backend of the shell that fails now (the store, the sampler's reads): shown in /v1/status
// until it works again.
struct BackendFault {
  std::string backend;  // "store" | "sampler" | "host"
  std::string error;    // the last error, as the backend said it
  TimePoint since;      // wall time of the first failure in this run of failures
};

// What the API needs from the daemon beyond the Arbiter's snapshots.
class DaemonControl {
 public:
  virtual ~DaemonControl() = default;
  virtual const Arbiter& arbiter() const = 0;
  virtual Now now() const = 0;  // both clocks, read now
  // More Prometheus families to append to /metrics (the request path's), "" for none.
  virtual std::string extra_metrics() const { return ""; }
  // GET /v1/proxy: the request path (front door, models, per-service proxies and their
  // counters); {"enabled": false} when none is configured.
  virtual nlohmann::json request_path() const { return {{"enabled", false}}; }
  // This daemon's host name ([daemon] host, else the machine's), shown in statuses, leases and
  // events; and GET /v1/hosts: every host's heartbeat and last status (issue 17).
  virtual std::string host() const { return ""; }
  virtual boost::asio::awaitable<Result<nlohmann::json>> hosts() {
    co_return make_error("this daemon has no view of other hosts");
  }
  // GET /v1/leases?host=: the leases of the hosts other than this one (`only`, when not empty:
  // of that host alone), as their rows in the shared store have them, each with its "host", and
  // the names of every host the store knows (this one too). With SQLite: this host, no others.
  struct OtherLeases {
    std::vector<std::string> hosts;
    std::vector<nlohmann::json> leases;
  };
  virtual boost::asio::awaitable<Result<OtherLeases>> leases_elsewhere(std::string /*only*/) {
    co_return OtherLeases{{host()}, {}};
  }
  // Several hosts on one store (core/cluster.h): whether leases go to the shared queue; a lease
  // this host does not hold, read from the store (null when no host has it); and asking the
  // host that holds one to end it (false when none does), or passing a heartbeat on to it (false
  // when none holds it).
  virtual bool shared_queue() const { return false; }
  virtual boost::asio::awaitable<Result<std::optional<nlohmann::json>>> lease_elsewhere(uint64_t) {
    co_return std::optional<nlohmann::json>();
  }
  virtual boost::asio::awaitable<Result<bool>> release_elsewhere(uint64_t, std::string) {
    co_return false;
  }
  virtual boost::asio::awaitable<Result<bool>> heartbeat_elsewhere(uint64_t) { co_return false; }
  // Asks for an unload; the id is then awaited with wait_unload (the verdict may come at once).
  virtual uint64_t request_unload(const std::string& service, bool force) = 0;
  virtual boost::asio::awaitable<UnloadFinished> wait_unload(uint64_t request_id) = 0;
  virtual boost::asio::awaitable<Result<std::vector<StoredEvent>>> events(
      int64_t after_id, std::optional<TimePoint> since, size_t limit) = 0;
  // Streams events as Server-Sent Events until the client goes away.
  virtual boost::asio::awaitable<void> stream_events(HttpStream& stream, int64_t after_id) = 0;

  // Queues a lease; error when its holder pid does not exist.
  virtual Result<uint64_t> request_lease(LeaseRequest request) = 0;
  virtual void lease_heartbeat(uint64_t id) = 0;
  virtual void release_lease(uint64_t id, std::optional<int> exit_status) = 0;
  // Returns once the lease is no longer queued (`until_ended`: once it ended; or after `max`), and
  // what the client will be told is on disk: a grant is answered only once a restart would keep
  // it (a lost lease is told at once).
  virtual boost::asio::awaitable<void> wait_lease(uint64_t id, Duration max,
                                                  bool until_ended = false) = 0;
  // Whether every change to lease `id` is on disk (false while the store fails to write it).
  virtual bool lease_written(uint64_t id) const = 0;
  // The shell's backends that fail now, oldest first.
  virtual std::vector<BackendFault> faults() const = 0;
  // An ended lease's job record (after a restart of vramd the Arbiter knows only active ones).
  virtual boost::asio::awaitable<Result<std::optional<JobRecord>>> job(uint64_t id) = 0;
  virtual boost::asio::awaitable<Result<std::vector<JobRecord>>> jobs(std::string label,
                                                                      size_t limit) = 0;

  // start | stop | restart a service; the id is then awaited with wait_command.
  // force: a start skips start admission (no wait for GPU room).
  virtual uint64_t service_command(const std::string& service, Command action,
                                   bool force) = 0;
  virtual boost::asio::awaitable<CommandFinished> wait_command(uint64_t request_id, Duration max) = 0;
  virtual boost::asio::awaitable<Result<std::vector<CrashRecord>>> crashes(std::string service,
                                                                           size_t limit) = 0;
  // state_dir/logs/NAME.log
  virtual std::string log_path(const std::string& service) const = 0;
  virtual boost::asio::awaitable<LogPage> read_log(std::string path, size_t lines,
                                                   std::optional<uint64_t> after) = 0;
  // A container's output from its engine: the last `lines`, or those after `after`; the
  // offset is then the engine's timestamp (ns) of the last line, to follow from.
  virtual boost::asio::awaitable<Result<LogPage>> read_container_log(std::string container,
                                                                     size_t lines,
                                                                     std::optional<uint64_t> after) = 0;
  // A unit's output from the journal: the same, the offset the realtime µs of the last entry.
  virtual boost::asio::awaitable<Result<LogPage>> read_unit_log(std::string unit, size_t lines,
                                                                std::optional<uint64_t> after) = 0;
  // Counters for /metrics since the daemon started.
  virtual const MetricsCounters& metrics() const = 0;
  // The durations history (docs/history.md): records, newest first; the variants services ran.
  virtual boost::asio::awaitable<Result<std::vector<DurationRecord>>> durations(DurationQuery) {
    co_return make_error("this daemon keeps no durations history");
  }
  virtual boost::asio::awaitable<Result<std::vector<ServiceVariant>>> variants(std::string) {
    co_return make_error("this daemon keeps no durations history");
  }
};


// The /v1 API: a table of routes (method, path pattern, handler) and one handler per route.
// A path that matches with another method gets 405 with Allow; docs/api.md's endpoint list is
// checked against the table (server/api_routes_test.cc).
class Api {
 public:
  explicit Api(DaemonControl& daemon) : daemon_(daemon) {}
  boost::asio::awaitable<HttpResponse> handle(HttpRequest req, HttpStream& stream);

  // What a handler is given: the request, its stream, its target and the path's parameters.
  struct Call {
    const HttpRequest& req;
    HttpStream& stream;
    const Target& t;
    PathParams params;
    std::string param() const { return std::string(params.values[0]); }
  };
  using Handler = boost::asio::awaitable<HttpResponse> (Api::*)(const Call&);
  struct Route {
    unsigned methods;  // Methods
    std::string_view pattern;
    Handler handler;
  };
  static const std::vector<Route>& routes();

 private:
  // A service as GET /v1/services shows it: its probed models and its configured ones.
  nlohmann::json service_json(const ServiceStatus& s, const Now& now) const;
  boost::asio::awaitable<HttpResponse> version(const Call& c);
  boost::asio::awaitable<HttpResponse> status(const Call& c);
  boost::asio::awaitable<HttpResponse> chart(const Call& c);
  boost::asio::awaitable<HttpResponse> services(const Call& c);
  boost::asio::awaitable<HttpResponse> service(const Call& c);
  boost::asio::awaitable<HttpResponse> unload(const Call& c);
  boost::asio::awaitable<HttpResponse> start(const Call& c);
  boost::asio::awaitable<HttpResponse> stop(const Call& c);
  boost::asio::awaitable<HttpResponse> restart(const Call& c);
  boost::asio::awaitable<HttpResponse> lifecycle(const Call& c, Command command);
  boost::asio::awaitable<HttpResponse> logs(const Call& c);
  boost::asio::awaitable<HttpResponse> crashes(const Call& c);
  boost::asio::awaitable<HttpResponse> free_idle(const Call& c);
  boost::asio::awaitable<HttpResponse> doctor(const Call& c);
  boost::asio::awaitable<HttpResponse> hosts(const Call& c);
  boost::asio::awaitable<HttpResponse> request_path(const Call& c);
  boost::asio::awaitable<HttpResponse> events(const Call& c);
  boost::asio::awaitable<HttpResponse> jobs(const Call& c);
  boost::asio::awaitable<HttpResponse> job_stats(const Call& c);
  boost::asio::awaitable<HttpResponse> metrics(const Call& c);
  boost::asio::awaitable<HttpResponse> dashboard(const Call& c);
  // GET /v1/history/records and /v1/history/durations (server/api_history.cc).
  boost::asio::awaitable<HttpResponse> history(const Call& c);
  // Leases (server/api_leases.cc).
  boost::asio::awaitable<HttpResponse> list_leases(const Call& c);
  boost::asio::awaitable<HttpResponse> create_lease(const Call& c);
  boost::asio::awaitable<HttpResponse> get_lease(const Call& c);
  boost::asio::awaitable<HttpResponse> release_lease(const Call& c);
  boost::asio::awaitable<HttpResponse> heartbeat(const Call& c);
  // Several hosts: a lease this host does not hold, read from (and asked of) the store.
  enum class LeaseVerb { get, release, heartbeat };
  boost::asio::awaitable<std::optional<HttpResponse>> lease_elsewhere(uint64_t id, LeaseVerb verb);
  // The lease as it stands, once written (or the store's error).
  boost::asio::awaitable<HttpResponse> lease_reply(uint64_t id);
  // A lease this daemon no longer holds (it ended before a restart of vramd): its job record,
  // `ended: true`; 404 when there is none. GET, DELETE and heartbeat answer alike, so that a
  // release repeated after a lost answer reads how the lease ended instead of "no lease".
  boost::asio::awaitable<HttpResponse> ended_lease(uint64_t id);
  std::string store_error() const;
  // A lease as the API shows it: the Arbiter's view and this daemon's host.
  nlohmann::json lease_json(const Lease& l, const Now& now) const;

  DaemonControl& daemon_;
};


}  // namespace vramd
