// What one policy did over a trace (docs/sim.md "Metrics"), and how it is printed.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace vramd::sim {

struct Metrics {
  std::string policy;
  double job_wait_p50_s = 0, job_wait_p95_s = 0, job_wait_max_s = 0;
  // From a job's arrival to its end (a preemptible job's suspensions included).
  double job_completion_p50_s = 0, job_completion_p95_s = 0;
  int suspends = 0;                  // preemptible jobs suspended (vramd)
  double blocked_by_idle_job_s = 0;  // job-seconds waiting while idle services held the room
  int reloads = 0;                   // loads of a service after its first
  double reload_s = 0;               // their load seconds (what requests paid)
  double reload_s_sleep1 = 0;        // of which wakes from host RAM (a level-1 sleep)
  double reload_s_cold = 0;          // of which loads from disk (a deeper sleep, a stop, a restart)
  int host_ooms = 0;                 // sleepers killed for keeping more host RAM than there was
  // Requests that found their service not loaded, and the 95th percentile of their wait for it.
  int requests_found_down = 0;
  double reload_wait_p95_s = 0;  // from its arrival to its service loaded (room waits too)
  // The reload each paid: its wait while its service was loading or restarting (not for room).
  double request_reload_p95_s = 0;
  double request_latency_p50_s = 0, request_latency_p95_s = 0;
  double idle_gib_h = 0;  // GiB-hours held by services with no request
  int unload_calls = 0;
  int unload_ineffective = 0;
  int restarts = 0;
  int unadmitted_load_ooms = 0;  // vramd: a load forwarded unadmitted found too little free
  int loads_over_capacity = 0;   // loads started where the GPU showed too little free (an OOM)
  int jobs = 0;
  int jobs_never_admitted = 0;
  int requests = 0;
  int requests_never_served = 0;
  double wall_s = 0;  // how long the replay took (not part of the model)
  // Filled by mark_pareto(): the policies better on job wait p95 and reload seconds at once.
  std::vector<std::string> dominated_by;
  // Distance to the ideal corner (the best job wait p95 and the best reload seconds among the
  // policies compared), each axis scaled by its range among them: 0 best, sqrt(2) worst.
  double distance_to_ideal = 0;
};

// Fills dominated_by and distance_to_ideal over the policies run side by side.
void mark_pareto(std::vector<Metrics>& rows);

// Nearest-rank percentile (p in [0, 100]) of `values`; 0 for none.
double percentile(std::vector<double> values, double p);

nlohmann::json to_json(const Metrics& m);
// The side-by-side table, one row per policy (markdown when `markdown`).
std::string format_table(const std::vector<Metrics>& rows, bool markdown);

}  // namespace vramd::sim
