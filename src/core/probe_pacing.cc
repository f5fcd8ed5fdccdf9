#include "core/probe_pacing.h"

#include <algorithm>

#include "core/eviction.h"

namespace vramd {

bool same_answer(const ServiceProbe& p, const ServiceStatus& before) {
  bool was_reachable = before.state == ServiceState::up || before.state == ServiceState::unloading;
  if (before.state == ServiceState::unknown || p.reachable != was_reachable) return false;
  if (p.error != before.probe_error) return false;
  if (!p.reachable) return true;
  return p.busy == before.busy && p.queue_depth == before.queue_depth && p.models == before.models;
}

bool gpu_moved(const ServiceStatus& st) {
  Bytes b = st.bytes, p = st.pace.probed_bytes;
  return (b > p ? b - p : p - b) >= kProbeOnBytesMoved;
}

Duration probe_wait(const ServiceStatus& st, const PaceContext& ctx) {
  const ProbePace& pace = st.pace;
  if (ctx.quiet <= ctx.base || pace.same_answers < kQuietAfterSameAnswers) return ctx.base;
  // Something is or may be moving: its own state, work through it, a lease that may need its
  // memory, the GPU's numbers.
  if (st.state != ServiceState::up && st.state != ServiceState::unreachable) return ctx.base;
  if (st.busy.value_or(false) || st.requests_in_flight > 0 || st.queue_depth.value_or(0) > 0)
    return ctx.base;
  if (ctx.decisions_pending || pace.gpu_working) return ctx.base;
  if (gpu_moved(st)) return ctx.base;
  Duration wait = ctx.base;
  for (int i = kQuietAfterSameAnswers; i <= pace.same_answers && wait < ctx.quiet; ++i) wait *= 2;
  wait = std::min(wait, ctx.quiet);
  // An idle TTL is decided on a probe no older than probe_interval: near it, no backing off.
  // (One that will not fire, as check_idle_ttl sees it, does not count.)
  auto idle = idle_since(st);
  if (ctx.unload_after_idle && idle && st.last_probe && st.bytes >= kWorthUnloading &&
      !(st.last_unload_at && *st.last_unload_at >= *idle) &&
      *idle + *ctx.unload_after_idle <= *st.last_probe + wait + ctx.base)
    return ctx.base;
  return wait;
}

}  // namespace vramd
