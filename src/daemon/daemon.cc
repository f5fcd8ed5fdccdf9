#include "daemon/daemon.h"

#include <charconv>

#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <filesystem>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "daemon/sampler.h"
#include "daemon/sd_notify.h"
#include "store/postgres_store.h"
#include "store/stores.h"
#include "host/docker.h"
#include "host/proc_table.h"
#include "server/json_view.h"

namespace vramd {

namespace asio = boost::asio;
using asio::use_awaitable;

namespace {
constexpr auto kFastSampleInterval = std::chrono::milliseconds(250);
// With nothing due, the loop still wakes this often (log rotation of services vramd runs).
constexpr auto kIdleWake = std::chrono::seconds(10);
constexpr auto kUnloadWaitLimit = std::chrono::minutes(5);
// A sample (NVML, /proc) not back in this long (or 4 intervals, if longer) is reported stalled.
constexpr auto kSampleStallAfter = std::chrono::seconds(5);
// Events kept while the store fails, to be written once it works again.
constexpr size_t kMaxUnstoredEvents = 1000;
// How soon a lease the store failed to write is written again.
constexpr auto kLeaseRewriteAfter = std::chrono::seconds(1);

}  // namespace

Daemon::Daemon(asio::io_context& io, Config config, DaemonWorld world)
    : io_(io),
      arbiter_(std::move(config)),
      reader_(std::move(world.reader)),
      scanner_(std::move(world.scanner)),
      clock_(world.clock ? std::move(world.clock) : std::function<Now()>(read_clocks)),
      api_(*this),
      http_(io, [this](HttpRequest req, HttpStream& s) { return api_.handle(std::move(req), s); }),
      runner_(world.runner
                  ? std::move(world.runner)
                  : make_local_process_runner(io, worker_, arbiter_.config().daemon.state_dir)),
      lifecycle_(world.lifecycle ? std::move(world.lifecycle)
                                 : make_lifecycle_backend(arbiter_.config().daemon.docker_socket,
                                                          systemd_tools(arbiter_.config()))),
      sample_gate_(arbiter_.scan_request(), arbiter_.config().daemon.sample_interval),
      tick_timer_(io),
      stream_(io),
      stall_timer_(io) {
  runner_->set_sink({[this](ChildStarted e) { feed(e); }, [this](ChildExited e) { feed(e); }});
}

Daemon::~Daemon() {
  stop();
  sampler_.join();
  worker_.join();
  store_thread_.join();
}

Now Daemon::now() const { return clock_(); }

std::string Daemon::socket_path() const {
  return (std::filesystem::path(arbiter_.config().daemon.state_dir) / "vramd.sock").string();
}

Status Daemon::start() {
  const auto& cfg = arbiter_.config();
  std::error_code ec;
  std::filesystem::create_directories(cfg.daemon.state_dir, ec);
  if (ec)
    return make_error(fmt::format("cannot create state_dir {}: {}", cfg.daemon.state_dir, ec.message()));
  if (auto s = open_store(); !s) return s;
  if (auto max = store_->max_id(); max) next_stream_id_ = *max + 1;
  if (auto peaks = peak_store_->all(); peaks) {
    arbiter_.restore_load_peaks(*peaks);
  } else {
    spdlog::warn("{}: wakes and starts are sized without past loads", peaks.error());
  }
  if (auto times = peak_store_->wake_times(); times) {
    arbiter_.restore_wake_times(*times);
  } else {
    spdlog::warn("{}: wake times start from each kind's first guess", times.error());
  }
  if (auto demand = peak_store_->demand(); demand) {
    arbiter_.restore_demand(*demand);
  } else {
    spdlog::warn("{}: prewarm learns when services are asked from now on", demand.error());
  }
  if (auto variants = duration_store_->variants(""); variants) {
    // Each service's latest: what it ran with when vramd last saw it.
    std::map<std::string, ServiceVariant> latest;
    for (auto& v : *variants) {
      auto [it, fresh] = latest.try_emplace(v.service, v);
      if (!fresh && std::max(v.last_seen, v.first_seen) >=
                        std::max(it->second.last_seen, it->second.first_seen))
        it->second = v;
    }
    std::vector<ServiceVariant> list;
    list.reserve(latest.size());
    for (auto& [name, v] : latest) list.push_back(std::move(v));
    arbiter_.restore_variants(list);
  } else {
    spdlog::warn("{}: a change of version or arguments made while vramd was down is not told",
                 variants.error());
  }
  recorder_ = std::make_unique<DurationRecorder>(
      io_, store_thread_, duration_store_, cfg.daemon.history_retention,
      [this] {
        std::map<std::string, DurationRecorder::Running> out;
        for (const auto& svc : arbiter_.config().services)
          if (const ServiceStatus* st = arbiter_.service_policy_status(svc.name))
            out[svc.name] = {st->version, st->args_fp, st->last_gpu};
        return out;
      });
  recorder_->start();
  // Last of the reads on this thread: what the restore ends (a holder gone while vramd was down)
  // is written on the store thread from here on, and the stores are not to be used from two
  // threads at once (libpq's connection is not thread-safe: a read here while the store thread
  // wrote took the write's answer, and that thread waited for it forever).
  // On a shared store a heartbeat first: the shared leases restored below are held only while
  // the store took one recently (self-fencing, Admission::check_fence), and their last one was
  // the previous process's.
  if (host_store_) {
    MonoTime sent = clock_().mono;
    if (auto beat = host_store_->beat(""); beat) feed(StoreContact{sent});
  }
  if (auto s = restore_leases(); !s) return s;
  for (const auto& svc : cfg.services) {
    auto adapter = make_adapter(svc, io_.get_executor());
    if (!adapter) return make_error(fmt::format("service {}: {}", svc.name, adapter.error()));
    adapters_[svc.name] = std::move(*adapter);
  }
  if (auto s = http_.secure(cfg.daemon.token, cfg.daemon.token_file); !s) return s;
  if (auto s = http_.listen_tcp(cfg.daemon.listen); !s) return s;
  if (auto s = http_.listen_unix(socket_path()); !s) return s;
  if (wants_proxy(cfg)) {
    ProxyOptions options = proxy_options(cfg);
    if (cfg.daemon.history) options.request_log = recorder_->log();
    if (!cfg.proxy.api_keys_file.empty()) {
      auto keys = read_api_keys_file(cfg.proxy.api_keys_file);
      if (!keys) return make_error(keys.error());
      options.api_keys.insert(options.api_keys.end(), keys->begin(), keys->end());
    }
    proxy_ = std::make_unique<Proxy>(io_, std::move(options), *this);
    if (auto s = proxy_->start(); !s) return s;
  }
  start_host_beats();
  arm_stall_timer();
  asio::post(sampler_, [this] { sampler_thread(); });
  asio::co_spawn(io_, tick_loop(), asio::detached);
  for (const auto& svc : cfg.services) asio::co_spawn(io_, probe_loop(svc.name), asio::detached);
  if (cfg.daemon.discovers(!cfg.services.empty())) asio::co_spawn(io_, discover_loop(), asio::detached);
  runner_->adopt(cfg.services);
  start_container_watch();
  start_unit_watch();
  sd_notify("READY=1\nSTATUS=sampling GPUs; API on " + cfg.daemon.listen);  // Type=notify
  if (auto interval = sd_watchdog_interval()) asio::co_spawn(io_, watchdog_loop(*interval), asio::detached);
  return Ok{};
}

Status Daemon::open_store() {
  const auto& cfg = arbiter_.config();
  host_ = cfg.daemon.host;
  if (host_.empty()) {
    char name[256] = {};
    host_ = ::gethostname(name, sizeof name - 1) == 0 && name[0] ? name : "localhost";
  }
  auto stores = open_configured_stores(cfg.daemon, host_);
  if (!stores) return make_error(stores.error());
  store_ = stores->events;
  lease_store_ = stores->leases;
  crash_store_ = stores->crashes;
  peak_store_ = stores->peaks;
  duration_store_ = stores->durations;
  host_store_ = stores->hosts;
  stream_.set_host(host_);
  if (host_store_) {
    // Leases move between hosts: each host gives ids no other host gives.
    auto slot = host_store_->slot();
    if (!slot) return make_error(slot.error());
    arbiter_.set_lease_id_space(kLeaseIdStride, *slot);
  }
  return Ok{};
}

void Daemon::stop() {
  if (stopping_) return;
  stopping_ = true;
  sd_notify("STOPPING=1");
  sample_gate_.close();
  tick_timer_.cancel();
  stall_timer_.cancel();
  if (host_timer_) host_timer_->cancel();
  if (claim_timer_) claim_timer_->cancel();
  for (auto& [name, t] : probe_timers_) t.timer.cancel();
  waiters_.stop();
  stream_.close();
  container_watch_.reset();  // joins its thread
  unit_watch_.reset();
  for (auto& [id, t] : lease_waiters_) t->cancel();
  command_waiters_.stop();
  wake_waiters_.stop();
  // Managed children outlive vramd unless on_shutdown = "stop" (they are adopted again).
  for (const auto& st : arbiter_.services()) {
    const ServiceConfig* cfg = arbiter_.config().find_service(st.name);
    if (cfg && cfg->on_shutdown == "stop" && st.managed && st.managed->pid)
      ::kill(-*st.managed->pid, SIGTERM);
  }
  runner_->close();
  http_.close();
  if (proxy_) proxy_->close();
  if (recorder_) recorder_->stop();  // the last requests' samples, written before the store closes
}

void Daemon::feed(const Event& event) {
  // What may have changed the GPUs' processes: their lists are read on the next sample
  // (core/process_scan.h; between such moments, only when memory moves or every 10 s).
  if (std::holds_alternative<ChildStarted>(event) || std::holds_alternative<ChildExited>(event) ||
      std::holds_alternative<HolderExited>(event) ||
      std::holds_alternative<ContainerChanged>(event) ||
      std::holds_alternative<LifecycleDone>(event) || std::holds_alternative<UnloadCallDone>(event) ||
      std::holds_alternative<WakeCallDone>(event))
    sample_gate_.list_processes();
  apply(arbiter_.handle(event, clock_()));
  // A deadline sooner than the tick loop's wake-up: wake it to wait for that one instead.
  if (auto due = arbiter_.next_deadline(); due && *due < tick_at_) tick_timer_.cancel();
}

namespace {
template <class... Ts>
struct ActionCases : Ts... {
  using Ts::operator()...;
};
template <class... Ts>
ActionCases(Ts...) -> ActionCases<Ts...>;
}  // namespace

void Daemon::apply(std::vector<Action> actions) {
  // The event telling a lease's change comes right before its LeaseChanged (core/actions.h): it
  // is written with the lease, in one transaction.
  std::vector<StoredEvent> told;
  for (size_t i = 0; i < actions.size(); ++i) {
    Action& a = actions[i];
    metrics_.observe(a);
    // One case per Action: an Action without its case does not compile.
    std::visit(ActionCases{
        [&](EmitEvent& e) {
          spdlog::info("{}: {}", e.event.type, e.event.message);
          int64_t id = next_stream_id_++;
          nlohmann::json data = e.event.verdict  ? to_json(*e.event.verdict)
                                : e.event.change ? to_json(*e.event.change)
                                                  : nlohmann::json(nullptr);
          // SSE subscribers first (they are on this loop), then the store on its own thread.
          stream_.publish(id, e.event, data);
          const auto* next = i + 1 < actions.size() ? std::get_if<LeaseChanged>(&actions[i + 1]) : nullptr;
          if (next && e.event.type.starts_with("lease.") &&
              e.event.message.starts_with(fmt::format("lease #{} ", next->lease.id))) {
            told.push_back(StoredEvent{id, e.event, std::move(data)});
            return;
          }
          asio::post(store_thread_, [this, ev = e.event, data, id] {
            store_event(UnstoredEvent{ev, data, id});
          });
        },
        [&](CallUnload& c) {
          asio::co_spawn(io_, call_unload(c), asio::detached);
        },
        [&](CallWake& cw) {
          asio::co_spawn(io_, call_wake(cw), asio::detached);
        },
        [&](WakeFinished& wf) {
          wake_waiters_.answer(wf.id, wf);
        },
        [&](WakeProgressed& wp) {
          if (WakeWaiter* w = wake_waiters_.pending(wp.id); w && w->progress) w->progress(wp.text);
        },
        [&](RememberWakeTime& rw) {
          asio::post(store_thread_, [store = peak_store_, t = rw.time, at = clock_().wall] {
            if (auto r = store->save_wake(t, at); !r) spdlog::warn("{}", r.error());
          });
        },
        [&](RememberDemand& rd) {
          asio::post(store_thread_, [store = peak_store_, d = rd.demand] {
            if (auto r = store->save_demand(d); !r) spdlog::warn("{}", r.error());
          });
        },
        [&](SetFastSampling& f) {
          fast_sampling_ = f.on;
          sample_gate_.set_fast(f.on);  // a verification reads the lists on every sample
          sample_gate_.set_interval(f.on ? Duration(kFastSampleInterval)
                                          : arbiter_.config().daemon.sample_interval);
          if (f.on) sample_gate_.wake();  // sample now rather than at the end of the interval
        },
        [&](UnloadFinished& u) {
          waiters_.answer(u.request_id, u);
        },
        [&](Lifecycle& l) {
          run_lifecycle(l);
        },
        [&](LeaseChanged& lc) {
          // A grant lets its holder allocate; an end, its memory go.
          if (lc.lease.state == LeaseState::granted || !is_active(lc.lease.state))
            sample_gate_.list_processes();
          save_lease(lc.lease, std::exchange(told, {}));
          // A lost lease's holder hears it now, not when a store that cannot be reached takes it.
          if (lc.lease.state == LeaseState::lost) wake_lease_waiters(lc.lease.id);
          // A lease for the shared queue, or room given back: claim soon rather than at the round.
          if (lc.lease.request.cluster || !is_active(lc.lease.state)) claim_soon();
        },
        [&](SpawnService& sp) {
          // After this batch: spawning feeds the Arbiter (not from inside apply()).
          asio::post(io_, [this, name = sp.service] {
            if (stopping_) return;
            std::vector<int> ours;  // its port may be held by something vramd runs
            for (const auto& st : arbiter_.services())
              if (st.managed && st.managed->pid) ours.push_back(*st.managed->pid);
            if (const ServiceConfig* cfg = arbiter_.config().find_service(name))
              runner_->spawn(*cfg, std::move(ours));
          });
        },
        [&](ScheduleProbe& sp) {
          if (auto it = probe_timers_.find(sp.service); it != probe_timers_.end()) {
            it->second.at = std::chrono::steady_clock::now() + sp.after;
            it->second.timer.cancel();  // a loop waiting waits again, for the new time
          }
        },
        [&](WatchService& w) {
          watch_service(w.service);
        },
        [&](SignalService& sig) {
          runner_->signal(sig.pid, sig.signal);
        },
        [&](CheckHealth& ch) {
          check_health(ch.service);
        },
        [&](RecordCrash& rc) {
          record_crash(rc);
        },
        [&](RememberVariant& rv) {
          recorder_->remember(rv.variant);
        },
        [&](RecordDurations& rd) {
          if (arbiter_.config().daemon.history) recorder_->record(std::move(rd.records));
        },
        [&](RememberLoadPeak& rp) {
          asio::post(store_thread_, [store = peak_store_, peak = rp.peak, at = clock_().wall] {
            if (auto r = store->save(peak, at); !r) spdlog::warn("{}", r.error());
          });
        },
        [&](CommandFinished& cf) {
          command_waiters_.answer(cf.request_id, cf);
        },
    }, a);
  }
}

void Daemon::store_event(std::optional<UnstoredEvent> e) {
  if (e)
    unstored_events_.push_back(std::move(*e));
  else if (unstored_events_.empty())
    return;
  std::string error;
  while (!unstored_events_.empty()) {
    const UnstoredEvent& next = unstored_events_.front();
    auto r = store_->append(next.event, next.data, next.id);
    if (!r) {
      error = r.error();
      break;
    }
    unstored_events_.pop_front();
  }
  if (unstored_events_.size() > kMaxUnstoredEvents) {
    spdlog::warn("the store has not taken {} events: the oldest is dropped",
                 unstored_events_.size());
    unstored_events_.pop_front();
  }
  bool ok = error.empty();
  if (!ok) spdlog::warn("{}", error);
  // Only a change is posted back: a working store costs the loop nothing.
  if (ok != std::exchange(store_ok_, ok))
    asio::post(io_, [this, error] {
      if (stopping_) return;
      if (error.empty())
        backend_works("store");
      else
        backend_failed("store", error);
    });
}

void Daemon::run_lifecycle(const Lifecycle& lc) {
  // A call still out after kSampleStallAfter (a hung Docker socket: its timeout is a minute) is
  // shown as a failing backend until it returns.
  auto stalled = std::make_shared<asio::steady_timer>(io_, kSampleStallAfter);
  stalled->async_wait([this, lc](const boost::system::error_code& ec) {
    if (!ec && !stopping_)
      backend_failed("lifecycle",
                     fmt::format("{} {} ({}) has not answered in {}", to_string(lc.action),
                                 lc.target, to_string(lc.via), format_duration(kSampleStallAfter)));
  });
  asio::post(worker_, [this, lc, stalled, backend = lifecycle_.get()] {
    LifecycleDone done = backend->run(lc);
    asio::post(io_, [this, done, stalled] {
      stalled->cancel();
      if (stopping_) return;
      backend_works("lifecycle");
      feed(done);
    });
  });
}

asio::awaitable<void> Daemon::call_unload(CallUnload call) {
  auto it = adapters_.find(call.service);
  UnloadCallDone done{call.service, call.unload_id, {UnloadCall::Result::failed, "no adapter"}, {}};
  auto t0 = std::chrono::steady_clock::now();
  if (it != adapters_.end()) done.call = co_await it->second->unload(call.depth);
  done.took = std::chrono::duration_cast<Duration>(std::chrono::steady_clock::now() - t0);
  if (stopping_) co_return;
  feed(done);
  // Verification counts samples taken after the call returned: take the first one now rather
  // than up to 250 ms later (bench/RESULTS.md, unload_verdict and lease_load). A sample in
  // flight was taken before the call returned: the wake asks for one more once it is handled.
  sample_gate_.wake();
}

asio::awaitable<void> Daemon::probe_loop(std::string service) {
  ProbeTimer& pt = probe_timers_.try_emplace(service, io_).first->second;
  Adapter& adapter = *adapters_.at(service);
  const auto interval = arbiter_.config().daemon.probe_interval;
  while (!stopping_) {
    // Each service has its own loop, so a hung server delays only its own probes.
    ServiceProbe probe = co_await adapter.probe();
    if (stopping_) break;
    // The core answers with ScheduleProbe (its pace, core/probe_pacing.h); the interval is the
    // fallback. A later ScheduleProbe moves `at` and cancels the wait.
    pt.at = std::chrono::steady_clock::now() + interval;
    probe.can_wake = adapter.can_wake();  // llama.cpp's is known once its router is detected
    feed(ProbeDone{service, std::move(probe)});
    while (!stopping_ && std::chrono::steady_clock::now() < pt.at) {
      pt.timer.expires_at(pt.at);
      boost::system::error_code ec;
      co_await pt.timer.async_wait(asio::redirect_error(use_awaitable, ec));
    }
  }
}

asio::awaitable<void> Daemon::tick_loop() {
  // Sleeps until the Arbiter's next deadline (feed() wakes it when a sooner one appears), so
  // nothing polls while nothing is due.
  bool managed = false;
  for (const auto& svc : arbiter_.config().services) managed |= !svc.start.empty();
  while (!stopping_) {
    std::optional<MonoTime> due = arbiter_.next_deadline();
    tick_at_ = due ? std::min(*due, mono_now() + kIdleWake) : mono_now() + kIdleWake;
    tick_timer_.expires_at(tick_at_);
    boost::system::error_code ec;
    co_await tick_timer_.async_wait(asio::redirect_error(use_awaitable, ec));
    if (stopping_) break;
    if (managed && mono_now() - last_rotation_ >= kIdleWake) {
      last_rotation_ = mono_now();
      runner_->rotate_logs(arbiter_.config().services);
    }
    if (ec) continue;  // woken for a sooner deadline: wait for that one
    if (due = arbiter_.next_deadline(); due && mono_now() >= *due) feed(Tick{});
  }
}

asio::awaitable<void> Daemon::watchdog_loop(std::chrono::microseconds interval) {
  // Pinged from the event loop itself: a loop that hangs stops the pings and systemd restarts it.
  asio::steady_timer timer(io_);
  while (!stopping_) {
    sd_notify("WATCHDOG=1");
    timer.expires_after(interval / 2);
    boost::system::error_code ec;
    co_await timer.async_wait(asio::redirect_error(use_awaitable, ec));
  }
}

void Daemon::sampler_thread() {
  // Blocking reads, off the event loop; the Arbiter is only touched back on the loop. The
  // process lists' schedule is this thread's alone.
  const GpuConfig& gpu = arbiter_.config().gpu;
  ProcessListSchedule lists({gpu.process_scan_threshold, gpu.process_scan_interval});
  while (std::optional<SampleGate::Order> order = sample_gate_.next()) {
    SampleTaken sample =
        take_sample(*reader_, *scanner_, order->request, &lists, mono_now(), order->list_all);
    sample_gate_.taken();
    asio::post(io_, [this, sample = std::move(sample)]() mutable { on_sample(std::move(sample)); });
  }
}

void Daemon::arm_stall_timer() {
  // A read that hangs (NVML, a stuck /proc) is reported while it hangs, not once it returns.
  const Duration interval = arbiter_.config().daemon.sample_interval;
  stall_timer_.expires_after((fast_sampling_ ? Duration(kFastSampleInterval) : interval) +
                             stall_limit());
  stall_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (!ec && !stopping_) sample_stalled();
  });
}

void Daemon::on_sample(SampleTaken sample) {
  if (stopping_) return;
  arm_stall_timer();
  backend_works("sampler");
  if (!sample.gpus.nvml_calls.empty()) metrics_.nvml_calls = std::move(sample.gpus.nvml_calls);
  if (!sample.host.error.empty()) {
    // Without the process table every GPU process would read as unowned and every service as
    // empty: such a sample would mislead the core (a verification, an idle TTL), so it is not
    // fed. The GPUs are read again on the next sample.
    backend_failed("host", sample.host.error);
  } else {
    backend_works("host");
    feed(Event{std::move(sample)});
  }
  ++samples_;
  check_lease_holders();
  sample_gate_.handled();
}

uint64_t Daemon::request_unload(const std::string& service, bool force) {
  uint64_t id = next_request_++;
  waiters_.add(id, kUnloadWaitLimit);  // a limit from the request: /v1/free waits for several
  feed(UnloadRequested{service, "manual", id, force});
  return id;
}

asio::awaitable<UnloadFinished> Daemon::wait_unload(uint64_t request_id) {
  std::optional<UnloadFinished> got = co_await waiters_.wait(request_id);
  if (got) co_return *got;
  UnloadFinished out;
  out.refused = true;
  out.verdict.message = stopping_ ? "vramd is stopping" : "no verdict within 5 minutes";
  co_return out;
}

asio::awaitable<Result<std::vector<StoredEvent>>> Daemon::events(int64_t after_id,
                                                                 std::optional<TimePoint> since,
                                                                 size_t limit) {
  // Named, not a temporary in the co_await expression: GCC 12 may destroy such temporaries twice,
  // which here released the store's shared_ptr once too often.
  auto op = run_on(store_thread_, [store = store_, after_id, since, limit] {
    return store->list(after_id, since, limit);
  });
  co_return co_await std::move(op);
}

asio::awaitable<void> Daemon::stream_events(HttpStream& stream, int64_t after_id) {
  co_await stream_.serve(stream, after_id, [this](int64_t after) { return events(after, std::nullopt, 1000); });
}

void Daemon::save_lease(const Lease& lease, std::vector<StoredEvent> told) {
  ++lease_writes_pending_[lease.id];
  lease_latest_.insert_or_assign(lease.id, lease);
  std::vector<StoredEvent> events;
  if (!told.empty() || lease_events_unwritten_.count(lease.id)) {
    auto& unwritten = lease_events_unwritten_[lease.id];
    for (auto& e : told) unwritten.push_back(std::move(e));
    events = unwritten;
  }
  asio::post(store_thread_, [this, store = lease_store_, lease, now = clock_(),
                             events = std::move(events)] {
    Status r = store->save(lease, now, events);
    if (!r) spdlog::error("{}", r.error());
    store_ok_ = r.ok();
    std::vector<int64_t> told;
    told.reserve(events.size());
    for (const auto& e : events) told.push_back(e.id);
    asio::post(io_, [this, lease, r, told = std::move(told)] { lease_saved(lease, r, told); });
  });
}

void Daemon::lease_saved(const Lease& lease, const Status& written,
                         const std::vector<int64_t>& told) {
  uint64_t id = lease.id;
  if (written && !told.empty()) {
    if (auto it = lease_events_unwritten_.find(id); it != lease_events_unwritten_.end()) {
      std::erase_if(it->second, [&](const StoredEvent& e) {
        return std::find(told.begin(), told.end(), e.id) != told.end();
      });
      if (it->second.empty()) lease_events_unwritten_.erase(it);
    }
  }
  if (!written) {
    backend_failed("store", written.error());
    // The write stays pending (no client hears of this change) until it lands: the newest
    // state of the lease is written again soon, unless a newer write is already queued (it
    // carries this change, and retries in its turn).
    if (lease_writes_pending_[id] > 1) {
      --lease_writes_pending_[id];
    } else if (!stopping_) {
      auto timer = std::make_shared<asio::steady_timer>(io_, kLeaseRewriteAfter);
      timer->async_wait([this, timer, id](const boost::system::error_code&) {
        if (stopping_) return;
        --lease_writes_pending_[id];
        save_lease(Lease(lease_latest_.at(id)));
      });
    }
    return;
  }
  backend_works("store");
  if (--lease_writes_pending_[id] <= 0) {
    lease_writes_pending_.erase(id);
    lease_latest_.erase(id);
  }
  wake_lease_waiters(id);
}

std::vector<BackendFault> Daemon::faults() const {
  std::vector<BackendFault> out;
  for (const auto& [name, f] : faults_) out.push_back(f);
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.since < b.since; });
  return out;
}

void Daemon::backend_failed(const std::string& backend, const std::string& error) {
  auto it = faults_.find(backend);
  if (it != faults_.end() && it->second.error == error) return;
  Now now = clock_();
  if (it == faults_.end())
    faults_[backend] = BackendFault{backend, error, now.wall};
  else
    it->second.error = error;
  spdlog::error("{}: {}", backend, error);
  if (backend == "store" && it == faults_.end()) retry_store_soon();
  // An event like the core's, so the dashboard, SSE and `vramd events` see it (stored when the
  // store works again, if it is the store that fails).
  apply({make_event(now, "backend.failed", std::nullopt, backend,
                    fmt::format("{}: {}", backend, error))});
}

void Daemon::retry_store_soon() {
  // Events that could not be written are tried again while the store fails, so that it is seen
  // to work again (and they are written) even when nothing new happens.
  auto timer = std::make_shared<asio::steady_timer>(io_, kLeaseRewriteAfter);
  timer->async_wait([this, timer](const boost::system::error_code&) {
    if (stopping_ || !faults_.count("store")) return;
    asio::post(store_thread_, [this] { store_event(std::nullopt); });
    retry_store_soon();
  });
}

void Daemon::backend_works(const std::string& backend) {
  auto it = faults_.find(backend);
  if (it == faults_.end()) return;
  Now now = clock_();
  Duration down = std::chrono::duration_cast<Duration>(now.wall - it->second.since);
  faults_.erase(it);
  apply({make_event(now, "backend.recovered", std::nullopt, backend,
                    fmt::format("{} works again after {}", backend, format_duration(down)))});
}

Duration Daemon::stall_limit() const {
  return std::max<Duration>(kSampleStallAfter, 4 * arbiter_.config().daemon.sample_interval);
}

void Daemon::sample_stalled() {
  backend_failed("sampler", fmt::format("a GPU or host read has not returned in {}",
                                        format_duration(stall_limit())));
}

void Daemon::wake_lease_waiters(uint64_t id) {
  auto [from, to] = lease_waiters_.equal_range(id);
  for (auto it = from; it != to; ++it) it->second->cancel();
}

Status Daemon::restore_leases() {
  auto max = lease_store_->max_id();
  if (!max) return make_error(max.error());
  auto kept = lease_store_->active(clock_());
  if (!kept) return make_error(kept.error());
  std::vector<uint64_t> alive;
  for (const auto& l : *kept)
    if (l.request.pid && process_alive("/proc", *l.request.pid, l.request.pid_start_ticks))
      alive.push_back(l.id);
  if (!kept->empty()) spdlog::info("restoring {} leases from the store", kept->size());
  apply(arbiter_.restore_leases(std::move(*kept), alive, clock_(), *max + 1));
  return Ok{};
}

void Daemon::check_lease_holders() {
  auto holders = arbiter_.lease_holders();
  if (holders.empty() || holder_check_running_) return;
  holder_check_running_ = true;
  // /proc reads on the worker; a holder whose pid is gone (or reused) ends its lease.
  asio::post(worker_, [this, holders] {
    std::vector<uint64_t> gone;
    for (const auto& [id, pid, ticks] : holders)
      if (!process_alive("/proc", pid, ticks)) gone.push_back(id);
    asio::post(io_, [this, gone] {
      holder_check_running_ = false;
      if (stopping_) return;
      for (uint64_t id : gone) feed(HolderExited{id});
    });
  });
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
  if (!host_store_ && !request.host.empty() && request.host != host_)
    return make_error(fmt::format(
        "host: this daemon's store is SQLite, which knows only this host ('{}'); a lease for host "
        "'{}' needs a store the hosts share ([daemon] store = \"postgresql://...\")",
        host_, request.host));
  if (!request.service.empty() && !request.host.empty() && request.host != host_)
    return make_error(fmt::format("host: service {} is this host's ('{}'), not '{}'",
                                  request.service, host_, request.host));
  request.cluster = host_store_ && request.service.empty();
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
  auto deadline = std::chrono::steady_clock::now() + max;
  asio::steady_timer timer(io_);
  for (;;) {
    const Lease* l = arbiter_.lease(id);
    // A lost lease is this host's word alone, told at once: its write may wait for a store
    // that cannot be reached (the reason it was lost).
    bool written = !lease_writes_pending_.count(id) || (l && l->state == LeaseState::lost);
    bool settled = !l || (until_ended ? !is_active(l->state) : l->state != LeaseState::queued);
    if (written && (settled || std::chrono::steady_clock::now() >= deadline || stopping_)) break;
    // Waiting only for the write: it takes milliseconds, the deadline does not apply.
    bool write_only = settled || std::chrono::steady_clock::now() >= deadline;
    timer.expires_at(write_only ? std::chrono::steady_clock::now() + std::chrono::seconds(5)
                                : deadline);
    auto it = lease_waiters_.emplace(id, &timer);
    boost::system::error_code ec;
    co_await timer.async_wait(asio::redirect_error(use_awaitable, ec));
    lease_waiters_.erase(it);
    // The store did not answer in 5 s: say what we know (a lease still queued too: its write
    // may wait as long as the store is down).
    if (!ec && write_only) break;
  }
}

asio::awaitable<Result<std::optional<JobRecord>>> Daemon::job(uint64_t id) {
  auto op = run_on(store_thread_, [store = lease_store_, id] { return store->job(id); });
  co_return co_await std::move(op);
}

asio::awaitable<Result<std::vector<DurationRecord>>> Daemon::durations(DurationQuery q) {
  auto op = run_on(store_thread_, [store = duration_store_, q = std::move(q)] { return store->list(q); });
  co_return co_await std::move(op);
}

asio::awaitable<Result<std::vector<ServiceVariant>>> Daemon::variants(std::string service) {
  auto op = run_on(store_thread_, [store = duration_store_, service = std::move(service)] {
    return store->variants(service);
  });
  co_return co_await std::move(op);
}

asio::awaitable<Result<std::vector<JobRecord>>> Daemon::jobs(std::string label, size_t limit) {
  auto op = run_on(store_thread_, [store = lease_store_, label = std::move(label), limit] {
    return store->jobs(label, limit);
  });
  co_return co_await std::move(op);
}

}  // namespace vramd
