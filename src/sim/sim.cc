#include "sim/sim.h"

#include <algorithm>
#include <chrono>

namespace vramd::sim {

RunResult run_policy(const Trace& trace, Policy& policy) {
  World w(trace);
  policy.start(w);
  w.progress(policy);
  size_t next_request = 0, next_job = 0;
  for (;;) {
    Ms next = trace.end;
    if (next_request < trace.requests.size()) next = std::min(next, trace.requests[next_request].t);
    if (next_job < trace.jobs.size()) next = std::min(next, trace.jobs[next_job].t);
    if (auto c = w.next_completion()) next = std::min(next, *c);
    if (auto p = policy.next_wakeup()) next = std::min(next, std::max(*p, w.now()));
    w.advance(next);
    w.complete_due(policy);
    while (next_request < trace.requests.size() && trace.requests[next_request].t <= w.now())
      w.arrive_request(next_request++, policy);
    while (next_job < trace.jobs.size() && trace.jobs[next_job].t <= w.now())
      w.arrive_job(next_job++, policy);
    if (auto p = policy.next_wakeup(); p && *p <= w.now()) policy.on_wakeup(w);
    w.progress(policy);
    if (w.now() >= trace.end) break;
  }
  RunResult out;
  out.metrics = w.finish(policy.name());
  out.decisions = std::move(w.decisions());
  out.timeline = w.timeline();
  return out;
}

}  // namespace vramd::sim
