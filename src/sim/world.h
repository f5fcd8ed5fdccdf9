// The modelled world (docs/sim.md): servers that load and release memory, requests served one at
// a time per service, jobs that hold memory once granted. Policies act on it through a few verbs
// (load, unload, restart, grant); it keeps the metrics. Pure: a virtual clock in milliseconds.
#pragma once

#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "sim/metrics.h"
#include "sim/trace.h"

namespace vramd::sim {

class Policy;

enum class Phase {
  unloaded,    // holds nothing; a request must load it first
  loading,     // memory grows to its footprint over load_seconds
  loaded,      // holds its footprint; serves requests
  unloading,   // an unload call runs; at its end the memory is back (or, ineffective, not)
  restarting,  // its process was restarted: holds nothing, answers nothing until restart_seconds
};
const char* to_string(Phase p);

struct ServiceSim {
  const TraceService* spec = nullptr;
  Phase phase = Phase::unloaded;
  Ms phase_start = 0, phase_end = 0;
  bool unload_frees = true;       // the unload under way frees its memory
  std::deque<size_t> queue;       // requests waiting, by index into Trace::requests
  std::optional<size_t> serving;  // the request being served
  Ms serve_end = 0;
  Ms last_used = 0;  // end of the last request (or its load)
  int loads = 0;
  int unload_calls = 0;
  int generation = 0;  // bumps at each restart: a new process
  bool unload_shallow = false;  // the unload under way is a level-1 sleep (weights to host RAM)
  bool in_host_ram = false;     // asleep at level 1: its weights held in host RAM, its wake short
  bool busy() const { return serving.has_value() || !queue.empty(); }
};

struct JobSim {
  enum class State { future, waiting, running, done };
  const TraceJob* spec = nullptr;
  State state = State::future;
  Ms granted_at = 0;
  Ms done_at = 0;
  // Suspended (cuda-checkpoint, running still): its work stops; its bytes leave the GPU once
  // copied out (copy_end), for host RAM, and come back with the resume, which copies them in.
  bool suspended = false;
  Ms copy_end = 0;
  Ms work_left = 0;  // its work still to do when it was suspended
  int suspends = 0;
};

// One decision the world saw, for tests and `--json`'s log: "unload comfyui", "grant whisper-1".
struct Decision {
  Ms t = 0;
  std::string what;
};

class World {
 public:
  explicit World(const Trace& trace);

  const Trace& trace() const { return trace_; }
  Ms now() const { return now_; }
  const std::vector<ServiceSim>& services() const { return services_; }
  const ServiceSim& service(size_t i) const { return services_[i]; }
  const std::vector<JobSim>& jobs() const { return jobs_; }

  // ---- what the GPU shows ----
  // Bytes a service holds now as the GPU would show it (a load grows, an unload falls).
  Bytes observed_bytes(size_t svc) const;
  // Bytes a service has or will have once what it does now finishes (a load: all of it).
  Bytes committed_bytes(size_t svc) const;
  Bytes used(unsigned gpu) const;  // observed, baseline included
  // total − baseline − committed services − running jobs (what a new allocation can count on).
  Bytes free_committed(unsigned gpu) const;
  Bytes idle_bytes(unsigned gpu) const;  // committed by services with no request
  // Host RAM (the trace's "host" line; 0: not modelled): what sleepers keep there now.
  Bytes host_ram_used() const { return host_used_; }

  // ---- the verbs a policy uses ----
  // REQUIRES: phase unloaded. Starts the load whether or not it fits (the policy decides).
  void load(size_t svc);
  // Calls the service's unload. Returns false (and counts nothing) unless it is loaded and idle.
  // `shallow`: a level-1 sleep, where the service has one (its weights go to host RAM, its wake
  // takes sleep1_seconds); else it frees all. Without it, the server's own default: its
  // shallowest sleep (vLLM's /sleep is level 1 unless asked; ComfyUI's /free unload_models).
  bool unload(size_t svc, bool shallow);
  bool unload(size_t svc) { return unload(svc, services_[svc].spec->sleep1 >= 0); }
  // Ends its process (a server that owns its runners: Ollama, LocalAI, llama-swap): always frees,
  // after unload_seconds. Counted as an unload call. False unless it is loaded and idle.
  bool stop(size_t svc);
  // Restarts its process (frees all); a request being served goes back to its queue's front.
  void restart(size_t svc);
  // REQUIRES: job waiting.
  void grant(size_t job);
  // Suspends a running job: its work stops at once, its bytes leave the GPU once copied out
  // (the copy's time, returned, at kSuspendCopyRate). nullopt unless running and not suspended.
  std::optional<Ms> suspend(size_t job);
  // Resumes it: its bytes are back on the GPU at once, its work goes on once they are copied in.
  // nullopt unless suspended.
  std::optional<Ms> resume(size_t job);
  std::vector<Decision>& decisions() { return decisions_; }
  // A load the server tried unadmitted found too little free (counted once per load).
  void count_unadmitted_oom() { ++m_.unadmitted_load_ooms; }

  // ---- the loop (sim.cc) ----
  // The next moment something in the world finishes; nullopt when nothing runs.
  std::optional<Ms> next_completion() const;
  // Accrues the time-integrated metrics up to `t`, then moves the clock there.
  void advance(Ms t);
  // Finishes what is due at now(), telling the policy.
  void complete_due(Policy& policy);
  void arrive_request(size_t request, Policy& policy);
  void arrive_job(size_t job, Policy& policy);
  // Starts serving where a service is loaded and starts loads the policy allows; grants jobs in
  // queue order where they fit, unless the policy admits jobs itself. True when anything moved.
  bool progress(Policy& policy);
  // Closes the books at the trace's end.
  Metrics finish(const std::string& policy_name);

  // The memory timeline by owner (for --plot): one point each time it changes.
  struct TimelinePoint {
    Ms t = 0;
    std::vector<Bytes> per_service;  // by service index: committed, but an unload's remainder
    Bytes jobs = 0;
  };
  const std::map<unsigned, std::vector<TimelinePoint>>& timeline() const { return timeline_; }

 private:
  bool ineffective_draw(size_t svc, int call) const;
  // Its requests that found it down have waited until now.
  void mark_ready(size_t svc);
  void leave_host_ram(ServiceSim& s);
  void finish_service(size_t svc, Policy& policy);
  void record_timeline();
  bool grant_jobs_in_order();

  const Trace& trace_;
  Ms now_ = 0;
  std::vector<ServiceSim> services_;
  std::vector<JobSim> jobs_;
  std::vector<Ms> request_done_;  // per request; -1: not yet
  // Per request: it found its service not loaded, and how long until it was (-1: not yet).
  std::vector<bool> found_down_;
  std::vector<Ms> reload_wait_;
  // Per request that found its service down: the time it waited while the service was loading
  // or restarting (the reload it paid; its waits for room are not in it).
  std::vector<Ms> reload_paid_;
  Bytes host_used_ = 0;
  std::vector<Ms> job_end_;       // per job
  std::vector<size_t> waiting_;   // jobs arrived and not granted, in queue order
  std::vector<size_t> running_;   // jobs granted and not done
  Metrics m_;
  std::vector<Decision> decisions_;
  std::map<unsigned, std::vector<TimelinePoint>> timeline_;
};

}  // namespace vramd::sim
