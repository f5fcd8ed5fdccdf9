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

#include "core/overloaded.h"
#include "daemon/sampler.h"
#include "daemon/sd_notify.h"
#include "host/docker.h"
#include "host/proc_table.h"
#include "server/json_view.h"

namespace vramd {

namespace asio = boost::asio;
using asio::use_awaitable;

namespace {
// With nothing due, the loop still wakes this often (log rotation of services vramd runs).
constexpr auto kIdleWake = std::chrono::seconds(10);
constexpr auto kUnloadWaitLimit = std::chrono::minutes(5);

}  // namespace

Daemon::Daemon(asio::io_context& io, Config config, DaemonWorld world)
    : io_(io),
      arbiter_(std::move(config)),
      clock_(world.clock ? std::move(world.clock) : std::function<Now()>(read_clocks)),
      store_(io),
      api_(io, *this),
      runtime_(io, arbiter_.config(), std::move(world.runner), std::move(world.lifecycle),
               {[this](const Event& e) { feed(e); },
                [this](const std::string& backend, bool ok, const std::string& why) {
                  if (ok)
                    sink_.works(backend);
                  else
                    sink_.failed(backend, why);
                }}),
      ticks_(io, kIdleWake,
             {[this] { return arbiter_.next_deadline(); }, [this] { feed(Tick{}); },
              [this] {  // the logs of the services vramd runs
                const auto& services = arbiter_.config().services;
                if (std::any_of(services.begin(), services.end(),
                                [](const ServiceConfig& s) { return !s.start.empty(); }))
                  runtime_.runner().rotate_logs(services);
              }}),
      calls_(io, {[this](const Event& e) { feed(e); },
                  // Verification counts samples taken after the call returned: take the first
                  // one now rather than up to 250 ms later (bench/RESULTS.md, unload_verdict and
                  // lease_load). A sample in flight was taken before the call returned: the wake
                  // asks for one more once it is handled.
                  [this] { sampling_.wake(); }}),
      sink_(io, store_.thread(),
            {[this] { return clock_(); }, [this](EmitEvent e) { apply({std::move(e)}); }}),
      requests_(io, {[this](const Event& e) { feed(e); },
                     [this](const std::string& service, const std::string& model) {
                       return arbiter_.ready_for(service, model, calls_.can_wake(service));
                     },
                     [this](const std::string& service) { return calls_.can_wake(service); },
                     [this](const RequestPath::Hooks::EachModels& each) { each_models(each); }}),
      sampling_(io, std::move(world.reader), std::move(world.scanner), arbiter_.config().gpu,
                arbiter_.config().daemon.sample_interval, arbiter_.scan_request(),
                {[this](SampleTaken s) { on_sample(std::move(s)); },
                 [this](const std::string& why) { sink_.failed("sampler", why); }}),
      discovery_(io, arbiter_, sampling_,
                 [this](ServiceConfig cfg) { feed(ServiceDiscovered{std::move(cfg)}); }) {
}

Daemon::~Daemon() {
  stop();
  runtime_.join();
  store_.join();
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
  if (auto peaks = store_.stores().peaks->all(); peaks) {
    arbiter_.restore_load_peaks(*peaks);
  } else {
    spdlog::warn("{}: wakes and starts are sized without past loads", peaks.error());
  }
  if (auto times = store_.stores().peaks->wake_times(); times) {
    arbiter_.restore_wake_times(*times);
  } else {
    spdlog::warn("{}: wake times start from each kind's first guess", times.error());
  }
  if (auto demand = store_.stores().peaks->demand(); demand) {
    arbiter_.restore_demand(*demand);
  } else {
    spdlog::warn("{}: prewarm learns when services are asked from now on", demand.error());
  }
  if (auto variants = store_.stores().durations->variants(""); variants) {
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
  store_.start_history(
      cfg.daemon.history_retention,
      [this] {
        std::map<std::string, DurationRecorder::Running> out;
        for (const auto& svc : arbiter_.config().services)
          if (const ServiceStatus* st = arbiter_.service_policy_status(svc.name))
            out[svc.name] = {st->version, st->args_fp, st->last_gpu};
        return out;
      });
  // Last of the reads on this thread: what the restore ends (a holder gone while vramd was down)
  // is written on the store thread from here on, and the stores are not to be used from two
  // threads at once (libpq's connection is not thread-safe: a read here while the store thread
  // wrote took the write's answer, and that thread waited for it forever).
  // On a shared store a heartbeat first: the shared leases restored below are held only while
  // the store took one recently (self-fencing, Admission::check_fence), and their last one was
  // the previous process's.
  if (store_.shared()) {
    MonoTime sent = clock_().mono;
    if (auto beat = store_.stores().hosts->beat(""); beat) feed(StoreContact{sent});
  }
  if (auto s = restore_leases(); !s) return s;
  for (const auto& svc : cfg.services)
    if (auto s = calls_.add(svc); !s) return make_error(fmt::format("service {}: {}", svc.name, s.error()));
  if (auto s = api_.listen(cfg.daemon, socket_path()); !s) return s;
  if (auto s = requests_.start(cfg, cfg.daemon.history ? store_.history()->log() : nullptr); !s)
    return s;
  start_host_beats();
  sampling_.start();
  asio::co_spawn(io_, ticks_.run(), asio::detached);
  for (const auto& svc : cfg.services) calls_.watch(svc.name, cfg.daemon.probe_interval);
  if (cfg.daemon.discovers(!cfg.services.empty())) asio::co_spawn(io_, discovery_.run(), asio::detached);
  runtime_.start();
  sd_notify("READY=1\nSTATUS=sampling GPUs; API on " + cfg.daemon.listen);  // Type=notify
  if (auto interval = sd_watchdog_interval()) asio::co_spawn(io_, watchdog_loop(*interval), asio::detached);
  return Ok{};
}

void Daemon::stop() {
  if (stopping_) return;
  stopping_ = true;
  sd_notify("STOPPING=1");
  sampling_.stop();
  discovery_.stop();
  ticks_.stop();
  store_.stop_cluster();
  calls_.stop();
  answers_.unloads.stop();
  sink_.stop();
  runtime_.stop_watches();  // joins their threads
  store_.stop_leases();
  answers_.commands.stop();
  requests_.stop();
  // Managed children outlive vramd unless on_shutdown = "stop" (they are adopted again): the
  // core says which to signal.
  apply(arbiter_.handle(ShuttingDown{}, clock_()));
  runtime_.close();
  api_.close();
  requests_.close();
  store_.stop_history();
}

void Daemon::feed(const Event& event) {
  // What may have changed the GPUs' processes: their lists are read on the next sample
  // (core/process_scan.h; between such moments, only when memory moves or every 10 s).
  if (std::holds_alternative<ChildStarted>(event) || std::holds_alternative<ChildExited>(event) ||
      std::holds_alternative<HolderExited>(event) ||
      std::holds_alternative<ContainerChanged>(event) ||
      std::holds_alternative<LifecycleDone>(event) || std::holds_alternative<UnloadCallDone>(event) ||
      std::holds_alternative<WakeCallDone>(event) ||
      std::holds_alternative<LeaseSuspendDone>(event) ||
      std::holds_alternative<LeaseResumeDone>(event) ||
      std::holds_alternative<SuspensionChecked>(event))
    sampling_.list_processes();
  // What a probe says of the server's wire (llama.cpp's total_slots) sizes the proxy's
  // connections to it: a fact for the request path, not a decision of the core's.
  if (const auto* probe = std::get_if<ProbeDone>(&event); probe && probe->probe.slots)
    requests_.heard_slots(probe->service, *probe->probe.slots);
  apply(arbiter_.handle(event, clock_()));
  // A deadline sooner than the tick loop's wake-up: wake it to wait for that one instead.
  ticks_.deadline_changed();
}


void Daemon::apply(std::vector<Action> actions) {
  // The event telling a lease's change comes right before its LeaseChanged (core/actions.h): it
  // is written with the lease, in one transaction.
  std::vector<StoredEvent> told;
  for (size_t i = 0; i < actions.size(); ++i) {
    Action& a = actions[i];
    metrics_.observe(a);
    // One case per Action: an Action without its case does not compile.
    std::visit(Overloaded{
        [&](EmitEvent& e) {
          spdlog::info("{}: {}", e.event.type, e.event.message);
          StoredEvent published = sink_.publish(e.event);
          // A lease's event is written with its change, in one transaction; any other alone.
          const auto* next = i + 1 < actions.size() ? std::get_if<LeaseChanged>(&actions[i + 1]) : nullptr;
          if (next && e.event.lease == next->lease.id)
            told.push_back(std::move(published));
          else
            sink_.store(std::move(published));
        },
        [&](CallUnload& c) {
          // At suspend its processes are checkpointed, whatever its server offers.
          if (c.depth == SleepDepth::suspend)
            runtime_.suspend_service(c);
          else
            calls_.unload(std::move(c));
        },
        [&](CallWake& cw) {
          if (cw.depth == SleepDepth::suspend)
            runtime_.resume_service(cw);
          else
            calls_.wake(std::move(cw));
        },
        [&](WakeFinished& wf) {
          requests_.wake_finished(wf);
        },
        [&](WakeProgressed& wp) {
          requests_.wake_progressed(wp);
        },
        [&](RememberWakeTime& rw) {
          store_.save_wake(rw.time, clock_().wall);
        },
        [&](RememberDemand& rd) {
          store_.save_demand(rd.demand);
        },
        [&](SetFastSampling& f) {
          sampling_.set_fast(f.on);
        },
        [&](UnloadFinished& u) {
          answers_.unloads.answer(u.request_id, u);
        },
        [&](Lifecycle& l) {
          runtime_.run_lifecycle(l, SampleLoop::kStallAfter);
        },
        [&](LeaseChanged& lc) {
          // A grant lets its holder allocate; an end, its memory go.
          if (lc.lease.state == LeaseState::granted || !is_active(lc.lease.state))
            sampling_.list_processes();
          store_.leases().save(lc.lease, std::exchange(told, {}));
          // A lost lease's holder hears it now, not when a store that cannot be reached takes it.
          if (lc.lease.state == LeaseState::lost) store_.leases().wake(lc.lease.id);
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
              runtime_.runner().spawn(*cfg, std::move(ours));
          });
        },
        [&](ScheduleProbe& sp) {
          calls_.schedule(sp.service, sp.after);
        },
        [&](WatchService& w) {
          watch_service(w.service);
        },
        [&](SuspendLease& sl) {
          runtime_.suspend_lease(sl);
        },
        [&](ResumeLease& rl) {
          runtime_.resume_lease(rl);
        },
        [&](CheckSuspension& cs) {
          runtime_.check_suspension(cs);
        },
        [&](SignalService& sig) {
          runtime_.runner().signal(sig.pid, sig.signal);
        },
        [&](CheckHealth& ch) {
          calls_.check_health(ch.service);
        },
        [&](RecordCrash& rc) {
          record_crash(rc);
        },
        [&](RememberVariant& rv) {
          store_.history()->remember(rv.variant);
        },
        [&](RecordDurations& rd) {
          if (arbiter_.config().daemon.history) store_.history()->record(std::move(rd.records));
        },
        [&](RememberLoadPeak& rp) {
          store_.save_peak(rp.peak, clock_().wall);
        },
        [&](CommandFinished& cf) {
          answers_.commands.answer(cf.request_id, cf);
        },
    }, a);
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

// Each sample, on the loop (SampleLoop's hook): the next waits until this returns.
void Daemon::on_sample(SampleTaken sample) {
  if (stopping_) return;
  sink_.works("sampler");
  if (!sample.gpus.nvml_calls.empty()) metrics_.nvml_calls = std::move(sample.gpus.nvml_calls);
  if (!sample.host.error.empty()) {
    // Without the process table every GPU process would read as unowned and every service as
    // empty: such a sample would mislead the core (a verification, an idle TTL), so it is not
    // fed. The GPUs are read again on the next sample.
    sink_.failed("host", sample.host.error);
  } else {
    sink_.works("host");
    feed(Event{std::move(sample)});
  }
  runtime_.check_holders(arbiter_.lease_holders());
}

uint64_t Daemon::request_unload(const std::string& service, bool force) {
  uint64_t id = answers_.unloads.next_id();
  answers_.unloads.add(id, kUnloadWaitLimit);  // a limit from the request: /v1/free waits for several
  feed(UnloadRequested{service, UnloadReason::manual, id, force});
  return id;
}

asio::awaitable<UnloadFinished> Daemon::wait_unload(uint64_t request_id) {
  std::optional<UnloadFinished> got = co_await answers_.unloads.wait(request_id);
  if (got) co_return *got;
  UnloadFinished out;
  out.refused = true;
  out.verdict.message = stopping_ ? "vramd is stopping" : "no verdict within 5 minutes";
  co_return out;
}

}  // namespace vramd
