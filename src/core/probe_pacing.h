// How often a service's API is probed (issue 14 item 6). A probe is an HTTP round trip on the
// loopback, the largest part of what a quiet daemon costs its host (bench/RESULTS.md,
// serve_cost), while the GPU's numbers, read every sample anyway, show most of what a probe
// would: a model loading or unloading moves the service's bytes, work moves its GPU's
// utilization. So a service is probed every `probe_interval` while anything about it may be
// changing, and backs off (doubling) to `quiet_probe_interval` while its answers repeat and its
// GPU numbers stand still; any change brings it back to `probe_interval` at the next sample.
// Decisions taken on a probe's word (an idle TTL, an eviction for a waiting lease) are never
// taken on a backed-off one: near a TTL, with a lease waiting, or on a shared store (several
// hosts: another host's lease may be given room here at any claim round), the pace is
// probe_interval.
#pragma once

#include <optional>

#include "core/clock.h"
#include "core/model.h"
#include "core/service_model.h"
#include "core/service_status.h"

namespace vramd {

// The probes answering as the one before them before backing off starts.
constexpr int kQuietAfterSameAnswers = 2;
// Bytes the service's holdings may move from where they stood at its last probe.
constexpr Bytes kProbeOnBytesMoved = 64 * MiB;

// The probe's answer as the service stood before it (busy, queue, models, reachability, error).
bool same_answer(const ServiceProbe& probe, const ServiceStatus& before);

struct PaceContext {
  Duration base{0};   // probe_interval
  Duration quiet{0};  // quiet_probe_interval (>= base)
  bool decisions_pending = false;  // an eviction may soon be decided on its answers
  std::optional<Duration> unload_after_idle;  // the service's TTL
};

// Its holdings moved by kProbeOnBytesMoved or more since its last probe.
bool gpu_moved(const ServiceStatus& st);

// How long after `st.last_probe` the next probe is due, as `st` and `ctx` stand.
Duration probe_wait(const ServiceStatus& st, const PaceContext& ctx);

}  // namespace vramd
