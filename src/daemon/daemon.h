// The daemon: one event loop owns the Arbiter. Sampling, SQLite and restarts run on worker
// threads and post their results back as events; service probes and unload calls are
// coroutines on the loop with their own timeouts; the HTTP API answers from the Arbiter.
#pragma once

#include <utility>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <type_traits>

#include "core/arbiter.h"
#include "core/wake.h"
#include "daemon/cluster_link.h"
#include "daemon/event_sink.h"
#include "daemon/lease_writer.h"
#include "daemon/probe_scheduler.h"
#include "daemon/request_path.h"
#include "daemon/run_on.h"
#include "daemon/waiters.h"
#include "daemon/discovery_loop.h"
#include "daemon/sample_loop.h"
#include "daemon/service_calls.h"
#include "daemon/sampler.h"
#include "daemon/service_runtime.h"
#include "daemon/store_side.h"
#include "daemon/tick_loop.h"
#include "gpu/gpu_reader.h"
#include "host/host_scanner.h"
#include "proxy/hooks.h"
#include "proxy/proxy.h"
#include "server/api.h"
#include "server/api_server.h"
#include "server/event_stream.h"
#include "server/http_server.h"
#include "services/adapter.h"
#include "store/event_store.h"
#include "store/crash_store.h"
#include "store/lease_store.h"
#include "store/peak_store.h"
#include "store/duration_store.h"
#include "daemon/duration_recorder.h"
#include "store/stores.h"
#include "supervisor/container_watch.h"
#include "supervisor/unit_watch.h"
#include "supervisor/lifecycle.h"
#include "supervisor/process_runner.h"

namespace vramd {

// The Daemon's world, handed in at construction: what it reads and what it acts through. Tests
// (and fault injection) hand in their own; nullptr parts get the real ones.
struct DaemonWorld {
  std::unique_ptr<GpuReader> reader;
  std::unique_ptr<HostScanner> scanner;
  std::unique_ptr<ProcessRunner> runner;        // nullptr: fork/exec, pidfd (supervisor/)
  std::unique_ptr<LifecycleBackend> lifecycle;  // nullptr: Docker Engine API and systemctl
  std::function<Now()> clock;                   // nullptr: the system's clocks (read_clocks)
};

class Daemon : public DaemonControl {
 public:
  Daemon(boost::asio::io_context& io, Config config, DaemonWorld world);
  ~Daemon() override;

  // Creates the state directory and its event store, makes the adapters, listens on
  // daemon.listen and state_dir/vramd.sock, and starts sampling and probing.
  Status start();
  void stop();

  int tcp_port() const { return api_.tcp_port(); }
  // The request path's ports (0 when not open).
  int front_door_port() const { return requests_.front_door_port(); }
  int service_proxy_port(const std::string& s) const { return requests_.service_port(s); }

  std::string extra_metrics() const override { return requests_.metrics_text(); }
  nlohmann::json request_path() const override { return requests_.describe(arbiter_.config()); }
  std::string socket_path() const;
  uint64_t samples_taken() const { return sampling_.samples(); }

  // DaemonControl
  const Arbiter& arbiter() const override { return arbiter_; }
  Now now() const override;
  uint64_t request_unload(const std::string& service, bool force) override;
  boost::asio::awaitable<UnloadFinished> wait_unload(uint64_t request_id) override;
  boost::asio::awaitable<Result<std::vector<StoredEvent>>> events(
      int64_t after_id, std::optional<TimePoint> since, size_t limit) override;
  boost::asio::awaitable<void> stream_events(HttpStream& stream, int64_t after_id) override;
  Result<uint64_t> request_lease(LeaseRequest request) override;
  void lease_heartbeat(uint64_t id) override;
  void release_lease(uint64_t id, std::optional<int> exit_status) override;
  boost::asio::awaitable<void> wait_lease(uint64_t id, Duration max, bool until_ended = false) override;
  bool lease_written(uint64_t id) const override { return store_.leases().written(id); }
  std::vector<BackendFault> faults() const override { return sink_.faults(); }
  boost::asio::awaitable<Result<std::optional<JobRecord>>> job(uint64_t id) override;
  boost::asio::awaitable<Result<std::vector<DurationRecord>>> durations(DurationQuery q) override;
  boost::asio::awaitable<Result<std::vector<ServiceVariant>>> variants(std::string service) override;
  boost::asio::awaitable<Result<std::vector<JobRecord>>> jobs(std::string label,
                                                              size_t limit) override;
  uint64_t service_command(const std::string& service, Command action,
                           bool force = false) override;
  boost::asio::awaitable<CommandFinished> wait_command(uint64_t request_id, Duration max) override;
  boost::asio::awaitable<Result<std::vector<CrashRecord>>> crashes(std::string service,
                                                                   size_t limit) override;
  std::string log_path(const std::string& service) const override;
  const MetricsCounters& metrics() const override { return metrics_; }
  boost::asio::awaitable<LogPage> read_log(std::string path, size_t lines,
                                           std::optional<uint64_t> after) override;

 private:

  // The sampler thread's loop (SampleGate), and the event loop's handling of each sample.
  void on_sample(SampleTaken sample);
  boost::asio::awaitable<void> watchdog_loop(std::chrono::microseconds interval);
  void feed(const Event& event);
  void apply(std::vector<Action> actions);
  Status restore_leases();
  // The request path (daemon_proxy.cc).
  // Each proxied service's models (RequestPath's hook), copying nothing.
  void each_models(const RequestPath::Hooks::EachModels& each) const;
  // An adapter and a probe loop for a service the core added (discovered: daemon/discovery_loop.h).
  void watch_service(const std::string& name);
  // Supervision (daemon_children.cc).
  void record_crash(const RecordCrash& crash);
  // A unit's journal: the last `lines` (after: the realtime µs of the last line already read).
  boost::asio::awaitable<Result<LogPage>> read_unit_log(std::string unit, size_t lines,
                                                        std::optional<uint64_t> after) override {
    return runtime_.read_unit_log(std::move(unit), lines, after);
  }
  boost::asio::awaitable<Result<LogPage>> read_container_log(std::string container, size_t lines,
                                                             std::optional<uint64_t> after) override {
    return runtime_.read_container_log(std::move(container), lines, after);
  }

  Status open_store();
  nlohmann::json status_snapshot() const;  // /v1/status's JSON, with host and faults
  nlohmann::json host_snapshot() const;    // that, with services and leases (the hosts table)
  // One queue across hosts (core/cluster.h): heartbeats and claim rounds (PostgreSQL only).
  void start_host_beats();
  void claim_soon();  // a claim round soon, after a change here

 public:
  std::string host() const override { return store_.host(); }
  boost::asio::awaitable<Result<nlohmann::json>> hosts() override;
  bool shared_queue() const override { return store_.shared(); }
  boost::asio::awaitable<Result<std::optional<nlohmann::json>>> lease_elsewhere(uint64_t id) override;
  boost::asio::awaitable<Result<bool>> release_elsewhere(uint64_t id, std::string why) override;
  boost::asio::awaitable<Result<OtherLeases>> leases_elsewhere(std::string only) override;
  boost::asio::awaitable<Result<bool>> heartbeat_elsewhere(uint64_t id) override;

 private:
  // The parts, each in its own files with its own tests; the Daemon wires them to the core.
  boost::asio::io_context& io_;
  Arbiter arbiter_;
  std::function<Now()> clock_;
  // The stores, this host's name, the store thread and what writes on it: each lease change,
  // the durations history, the link to the other hosts (daemon/store_side.h).
  StoreSide store_;
  MetricsCounters metrics_;
  ApiServer api_;  // the API on TCP and the state directory's socket
  // Children, containers and units, their logs and crash diagnoses; its worker thread also
  // checks lease holders.
  ServiceRuntime runtime_;
  TickLoop ticks_;  // the core's next deadline; log rotation when idle
  ServiceCalls calls_;  // each service's adapter, its probe loop and the calls the core asks
  // The API's requests awaiting the core's answer: unloads' verdicts, lifecycle commands.
  struct Answers {
    explicit Answers(boost::asio::io_context& io) : unloads(io), commands(io) {}
    Waiters<UnloadFinished> unloads;
    Waiters<CommandFinished> commands;
  } answers_{io_};
  // Events to the stream and the store; the shell's own faults (backend.failed/recovered).
  EventSink sink_;
  RequestPath requests_;  // the proxy, requests in flight, held requests' wakes (daemon_proxy.cc)
  bool stopping_ = false;
  // GPU reads and host scans on a thread of their own: a hung NVML call must not hold up
  // restarts and lifecycle calls, nor a hung Docker socket the samples.
  SampleLoop sampling_;
  DiscoveryLoop discovery_;  // `[daemon] discover`: servers nobody configured, found and fed
};

}  // namespace vramd
