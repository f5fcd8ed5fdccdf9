// The `vramd` policy: the real core Arbiter, fed on a virtual clock by a second shell that does
// what daemon/daemon.cc does against the modelled world (docs/sim.md "vramd"). Samples of the
// world's GPUs become SampleTaken, requests become RequestsInFlight (as the proxy counts them),
// jobs become leases with the job's pid, a request for a service that cannot take it is held and
// its wake asked of the core (WakeRequested, as the proxy does); CallUnload, CallWake, Lifecycle
// and LeaseChanged act on the world and are answered with the events the daemon would feed.
#pragma once

#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/arbiter.h"
#include "sim/policy.h"

namespace vramd::sim {

// The Arbiter's config for a trace: `base` (--config, or defaults) for the daemon and GPU
// settings and for each trace service of the same name (TTL, min_idle, pinned, group, backoff);
// every trace service becomes a container with an unload call, restarted when an unload frees
// nothing unless the config says otherwise.
//
// `vramd` is the daemon as configured (its defaults: the depth of each sleep its own choice,
// prewarm off). Its variants: `vramd:fixed-depth` fixes every level-1 sleeper at level 1
// (sleep_level 1, vLLM's default before vramd chose); `vramd:prewarm` turns prewarm on for all.
// no_suspend: the ablation of issue 28, suspend never offered (preemptible jobs are not).
enum class VramdVariant { full, fixed_depth, prewarm, no_suspend };
Config sim_config(const Trace& trace, const Config& base, bool base_from_file,
                  VramdVariant variant = VramdVariant::full);

class VramdPolicy : public Policy {
 public:
  VramdPolicy(Config base, bool base_from_file, VramdVariant variant = VramdVariant::full)
      : base_(std::move(base)), from_file_(base_from_file), variant_(variant) {}
  std::string name() const override {
    return variant_ == VramdVariant::fixed_depth  ? "vramd:fixed-depth"
           : variant_ == VramdVariant::prewarm    ? "vramd:prewarm"
           : variant_ == VramdVariant::no_suspend ? "vramd:no-suspend"
                                                  : "vramd";
  }

  void start(World& w) override;
  std::optional<Ms> next_wakeup() const override;
  void on_wakeup(World& w) override;
  void on_request_arrived(World& w, size_t svc) override { report_requests(w, svc); }
  void on_request_done(World& w, size_t svc) override { report_requests(w, svc); }
  bool may_load(World& w, size_t svc) override;
  void on_load_done(World& w, size_t svc) override;
  void on_unload_done(World& w, size_t svc, bool freed) override;
  void on_restart_done(World& w, size_t svc) override;
  bool admits_jobs() const override { return true; }
  void on_job_arrived(World& w, size_t job) override;
  void on_job_done(World& w, size_t job) override;

  const Arbiter& arbiter() const { return *arbiter_; }

 private:
  void feed(World& w, Event e);
  void apply(World& w, const std::vector<Action>& actions);
  void on_lease(World& w, const Lease& l);
  void on_wake_finished(const WakeFinished& f);
  void probe(World& w, size_t svc, bool reachable);
  void report_requests(World& w, size_t svc);
  SampleTaken sample(const World& w) const;
  Now at(const World& w) const { return Now(MonoTime(Duration(w.now()))); }

  Config base_;
  bool from_file_ = false;
  VramdVariant variant_ = VramdVariant::full;
  std::map<size_t, uint64_t> calling_;  // service -> the wake call its load answers
  std::map<size_t, bool> restart_asked_;  // a restart of vramd's (not a host OOM's)
  std::unique_ptr<Arbiter> arbiter_;
  std::deque<Event> pending_;  // answers to actions, fed after the batch (as the daemon posts)
  bool feeding_ = false;
  bool fast_ = false;
  Ms next_sample_ = 0;
  Ms last_tick_ = -1;
  std::map<uint64_t, size_t> job_of_lease_;
  std::map<size_t, uint64_t> lease_of_job_;
  uint64_t next_wake_ = 1;
  std::map<size_t, uint64_t> wake_of_service_;  // service -> its wake under way
  std::map<uint64_t, size_t> service_of_wake_;
  std::map<size_t, bool> wake_ready_;  // its wake finished ready: its request may load
  std::map<size_t, bool> oom_counted_;  // a forwarded load waits where it does not fit
};

}  // namespace vramd::sim
