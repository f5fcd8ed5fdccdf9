// A policy: who decides when memory is freed, loads are let through and jobs granted. The world
// tells it what happened; it acts through the world's verbs (sim/world.h). `vramd` is the real
// Arbiter (sim/vramd_policy.h); the baselines are the field's own rules (sim/baselines.cc).
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "core/config.h"
#include "core/result.h"
#include "sim/world.h"

namespace vramd::sim {

class Policy {
 public:
  virtual ~Policy() = default;
  // As given on the command line ("ttl:300s").
  virtual std::string name() const = 0;

  virtual void start(World&) {}
  // When it wants to be woken (timers, samples); nullopt: only on the world's news.
  virtual std::optional<Ms> next_wakeup() const { return std::nullopt; }
  virtual void on_wakeup(World&) {}

  virtual void on_request_arrived(World&, size_t /*svc*/) {}
  // A request finished; the service's queue may be empty now.
  virtual void on_request_done(World&, size_t /*svc*/) {}
  // A service has requests waiting and holds nothing: may it load now? (The world loads it when
  // this says yes.) Called again each time the world changes while it waits.
  virtual bool may_load(World& w, size_t svc) = 0;
  virtual void on_load_done(World&, size_t /*svc*/) {}
  virtual void on_unload_done(World&, size_t /*svc*/, bool /*freed*/) {}
  virtual void on_restart_done(World&, size_t /*svc*/) {}

  // true: jobs are granted only by grant() from the policy (vramd's leases); false: the world
  // grants them in (priority, arrival) order per GPU as soon as they fit.
  virtual bool admits_jobs() const { return false; }
  virtual void on_job_arrived(World&, size_t /*job*/) {}
  virtual void on_job_done(World&, size_t /*job*/) {}
};

// "never", "ttl:300s", "free-at-end", "ollama", "localai", "localai:max=2", "llama-swap",
// "llama-swap:ttl=300s", "vramd". `config` is vramd's (its TTLs, min_idle, ...).
Result<std::unique_ptr<Policy>> make_policy(const std::string& spec, const Config& config,
                                            bool config_from_file = false);
// Every policy, in the order the bench runs them.
const std::vector<std::string>& all_policies();

}  // namespace vramd::sim
