#include "server/json_view.h"

#include <fmt/format.h>

#include "core/gpu_select.h"
#include "core/service_kinds.h"
#include "core/wake.h"

namespace vramd {

using nlohmann::json;

namespace {
template <typename T>
json opt(const std::optional<T>& v) {
  return v ? json(*v) : json(nullptr);
}
// A time the core keeps (monotonic) as people read it: RFC 3339, by the clocks' offset now.
json when(const Now& now, MonoTime t) { return format_rfc3339(now.wall_of(t)); }
json when(const Now& now, const std::optional<MonoTime>& t) {
  return t ? when(now, *t) : json(nullptr);
}
}  // namespace

json to_json(const Holding& h, const Now& now) {
  json candidates = json::array();
  for (const auto& c : h.candidates) candidates.push_back({{"pid", c.pid}, {"name", c.name}});
  return {{"owner", h.owner.name},   {"owner_kind", to_string(h.owner.kind)},
          {"bytes", h.bytes},        {"source", to_string(h.source)},
          {"pids", h.pids},          {"since", when(now, h.since)},
          {"candidates", candidates}};
}

json to_json(const GpuStatus& g, const Now& now) {
  const GpuSample& s = g.sample;
  json holdings = json::array();
  for (const auto& h : g.holdings) holdings.push_back(to_json(h, now));
  json processes = json::array();
  for (const auto& p : s.processes) {
    json j = {{"pid", p.pid}, {"used_bytes", opt(p.used)}};
    if (!p.name.empty()) j["name"] = p.name;
    if (p.gpu_instance_id) j["gpu_instance_id"] = *p.gpu_instance_id;
    if (p.compute_instance_id) j["compute_instance_id"] = *p.compute_instance_id;
    processes.push_back(std::move(j));
  }
  return {{"index", s.index},
          {"label", gpu_label(s)},
          {"mig_enabled", s.mig_enabled},
          {"parent", s.parent ? json(gpu_label(*s.parent)) : json(nullptr)},
          {"gpu_instance_id", opt(s.gpu_instance_id)},
          {"compute_instance_id", opt(s.compute_instance_id)},
          {"mig_profile", s.mig_profile.empty() ? json(nullptr) : json(s.mig_profile)},
          {"note", s.note.empty() ? json(nullptr) : json(s.note)},
          {"uuid", s.uuid},
          {"name", s.name},
          {"health", to_string(s.health)},
          {"error", s.error.empty() ? json(nullptr) : json(s.error)},
          {"total_bytes", s.total},
          {"used_bytes", s.used},
          {"free_bytes", s.total >= s.used ? s.total - s.used : 0},
          {"reserved_bytes", opt(s.reserved)},
          {"utilization_pct", opt(s.utilization_pct)},
          {"temperature_c", opt(s.temperature_c)},
          {"power_w", opt(s.power_w)},
          {"per_process_available", g.per_process_available},
          {"baseline_bytes", opt(g.baseline)},
          {"baseline_source", g.baseline_source.empty() ? json(nullptr) : json(g.baseline_source)},
          {"holdings", holdings},
          {"processes", processes}};
}

json to_json(const StatusSnapshot& s, const Now& now) {
  json gpus = json::array();
  for (const auto& g : s.gpus) gpus.push_back(to_json(g, now));
  return {{"sampled_at", s.sampled ? when(now, s.sampled_at) : json(nullptr)},
          {"backend", s.backend},
          {"driver_version", s.driver_version},
          {"error", s.error.empty() ? json(nullptr) : json(s.error)},
          {"gpus", gpus}};
}

json to_json(const SuspendOffer& s) {
  return {{"probed", s.probed},
          {"offered", s.offered},
          {"tool", s.tool},
          {"form", s.offered ? json(s.form) : json(nullptr)},
          {"version", s.offered && !s.version.empty() ? json(s.version) : json(nullptr)},
          {"why", s.why.empty() ? json(nullptr) : json(s.why)}};
}

json to_json(const HistoryView& v, unsigned gpu, const Now& now) {
  json times = json::array();  // Unix seconds
  for (auto t : v.times)
    times.push_back(static_cast<double>(now.wall_of(t).time_since_epoch().count()) / 1000.0);
  json series = json::array();
  for (const auto& s : v.series)
    series.push_back(
        {{"owner", s.owner.name}, {"owner_kind", to_string(s.owner.kind)}, {"bytes", s.values}});
  return {{"gpu", gpu}, {"total_bytes", v.total}, {"times", times}, {"series", series}};
}

json to_json(const EventRecord& e) {
  json j = {{"at", format_rfc3339(e.at)},
            {"type", e.type},
            {"gpu", e.gpu ? json(*e.gpu) : json(nullptr)},
            {"subject", e.subject},
            {"message", e.message}};
  if (e.verdict) j["data"] = to_json(*e.verdict);
  if (e.change) j["data"] = to_json(*e.change);
  return j;
}

json to_json(const ServiceChange& c) {
  auto text = [](const std::string& s) { return s.empty() ? json(nullptr) : json(s); };
  return {{"old_version", text(c.old_version)},
          {"new_version", text(c.new_version)},
          {"old_args_fingerprint", text(c.old_args_fp)},
          {"new_args_fingerprint", text(c.new_args_fp)},
          {"args_diff", c.args_diff}};
}

json to_json(const UnloadVerdict& v) {
  json per_gpu = json::array();
  for (const auto& [gpu, ba] : v.per_gpu)
    per_gpu.push_back({{"gpu", gpu}, {"before_bytes", ba.first}, {"after_bytes", ba.second}});
  return {{"service", v.service},
          {"outcome", to_string(v.outcome)},
          {"reason", to_string(v.reason)},
          {"before_bytes", v.before_bytes},
          {"after_bytes", v.after_bytes},
          {"freed_bytes", v.before_bytes > v.after_bytes ? v.before_bytes - v.after_bytes : 0},
          {"per_gpu", per_gpu},
          {"rss_before_bytes", opt(v.rss_before)},
          {"rss_after_bytes", opt(v.rss_after)},
          {"duration_ms", v.duration.count()},
          {"call_ms", v.call_duration.count()},
          {"escalation", v.escalation == Escalation::none ? json(nullptr) : json(to_string(v.escalation))},
          {"depth", to_string(v.depth)},
          {"host_ram_kept_bytes", v.host_ram_kept},
          {"message", v.message},
          {"at", format_rfc3339(v.at)}};
}

json to_json(const ServiceStatus& s, const Now& now) {
  auto time = [&](const std::optional<MonoTime>& t) { return when(now, t); };
  json per_gpu = json::array();
  for (const auto& [gpu, b] : s.per_gpu) per_gpu.push_back({{"gpu", gpu}, {"bytes", b}});
  json asleep = nullptr;
  if (s.asleep)
    asleep = {{"depth", to_string(s.asleep->depth)},
              {"label", describe_depth(s.asleep->depth, s.kind)},
              {"since", when(now, s.asleep->since)},
              {"gpu_kept_bytes", s.asleep->gpu_kept},
              {"host_ram_bytes", s.asleep->host_ram},
              {"host_ram_measured", s.asleep->host_ram_measured},
              {"reason", s.asleep->reason ? json(to_string(*s.asleep->reason)) : json(nullptr)},
              {"pids", s.asleep->pids}};
  // The expected wake from each depth (core/wake.h expected_wake), for its one model if it has
  // one, and whether it was measured.
  json wake_seconds = json::object();
  std::string model = s.models.size() == 1 ? s.models[0] : std::string();
  std::vector<SleepDepth> depths;
  if (const ServiceKind* kind = find_service_kind(s.kind)) depths = kind->sleeps;
  if (s.control != Control::none) depths.push_back(SleepDepth::stop);
  // Suspend (cuda-checkpoint): once it slept or woke there.
  bool suspend_seen = s.asleep && s.asleep->depth == SleepDepth::suspend;
  for (const auto& [key, took] : s.wake_times) suspend_seen |= key.second == SleepDepth::suspend;
  if (suspend_seen) depths.push_back(SleepDepth::suspend);
  for (SleepDepth d : depths) {
    bool measured = false;
    for (const auto& [key, took] : s.wake_times) measured |= key.second == d;
    wake_seconds[to_string(d)] = {
        {"seconds", std::chrono::duration<double>(expected_wake(s, model, d)).count()},
        {"measured", measured}};
  }
  return {
      {"name", s.name},
      {"kind", s.kind},
      {"url", s.url},
      {"state", to_string(s.state)},
      {"busy", s.requests_in_flight > 0 ? json(true) : opt(s.busy)},
      {"requests_in_flight", s.requests_in_flight},
      {"queue_depth", opt(s.queue_depth)},
      {"models", s.models},
      {"probe_error", s.probe_error.empty() ? json(nullptr) : json(s.probe_error)},
      {"last_probe", time(s.last_probe)},
      {"next_probe", time(s.pace.due)},
      {"last_activity", time(s.last_activity)},
      {"idle_since", time(s.idle_since)},
      {"idle_seconds", s.idle_since
                           ? json(static_cast<double>((now.mono - *s.idle_since).count()) / 1000.0)
                           : json(nullptr)},
      {"bytes", s.bytes},
      {"per_gpu", per_gpu},
      {"rss_bytes", opt(s.rss)},
      {"self_reported_vram_bytes", opt(s.self_reported_vram)},
      {"unload_after_idle_seconds",
       s.unload_after_idle ? json(static_cast<double>(s.unload_after_idle->count()) / 1000.0)
                           : json(nullptr)},
      {"last_unload", s.last_unload ? to_json(*s.last_unload) : json(nullptr)},
      {"backoff_until", time(s.backoff_until)},
      {"can_restart", s.control == Control::none ? json(nullptr) : json(to_string(s.control))},
      // Which actions the kind has: a `process` service has no API to unload through.
      {"can_unload", s.can_unload},
      // A suspend of its processes that failed or freed nothing: not tried again.
      {"suspend_refused", s.suspend_refused.empty() ? json(nullptr) : json(s.suspend_refused)},
      {"reload_cost_seconds", static_cast<double>(s.reload_cost.count()) / 1000.0},
      {"reload_cost_measured", s.reload_measured},
      // What a wake or start is admitted for (core/wake.h): learned per model.
      {"load_peaks", s.load_peaks.empty() ? json::object() : json(s.load_peaks)},
      {"last_load_bytes", opt(s.last_load_bytes)},
      // Put to sleep by vramd (core/sleep.h): its depth, what it keeps on the GPU and in host RAM.
      {"asleep", asleep},
      {"wake_seconds", wake_seconds},
      // Woken by a prewarm and not asked since (docs/proxy.md "Prewarm").
      {"prewarmed_at", time(s.prewarmed)},
      // Found by `[daemon] discover`, not configured (and left alone unless discover_unload).
      {"discovered", s.discovered},
      {"discovered_by", s.discovered ? json(s.discovered_by) : json(nullptr)},
      // What it runs (docs/history.md): its version, arguments, and their last change.
      {"version", s.version.empty() ? json(nullptr) : json(s.version)},
      {"args", s.args},
      {"args_fingerprint", s.args_fp.empty() ? json(nullptr) : json(s.args_fp)},
      {"last_change",
       s.changed_at ? json{{"at", format_rfc3339(*s.changed_at)}, {"what", s.last_change}}
                    : json(nullptr)},
      {"process",
       s.managed
           ? json{{"state", to_string(s.managed->state)},
                  {"pid", opt(s.managed->pid)},
                  {"adopted", s.managed->adopted},
                  {"started_at", time(s.managed->started_at)},
                  {"healthy_since", time(s.managed->healthy_since)},
                  {"health_failures", s.managed->health_failures},
                  {"last_health", s.managed->last_health},
                  {"restarts", s.managed->restart_count},
                  {"reason", s.managed->reason.empty() ? json(nullptr) : json(s.managed->reason)},
                  {"last_exit_code", opt(s.managed->last_exit_code)},
                  {"last_signal", opt(s.managed->last_signal)},
                  {"restart_at", time(s.managed->restart_at)},
                  {"start_lease", opt(s.managed->start_lease)},
                  {"docker_restart_policy",
                   !s.managed->docker_restart_policy || s.control == Control::unit
                       ? json(nullptr)
                       : json(to_string(*s.managed->docker_restart_policy))},
                  // A unit's Restart= (systemd restarts it, not vramd).
                  {"systemd_restart",
                   !s.managed->docker_restart_policy || s.control != Control::unit
                       ? json(nullptr)
                       : json(to_string(*s.managed->docker_restart_policy))}}
           : json(nullptr)}};
}

namespace {

// A lease; `arbiter`, when it is this host's (not another host's row), fills what only this host
// knows: the queue position, the lease in front, the GPU's CUDA_VISIBLE_DEVICES.
json lease_json(const Lease& l, const Arbiter* local, const Now& now) {
  auto time = [&](const std::optional<MonoTime>& t) { return when(now, t); };
  const LeaseRequest& r = l.request;
  json reason = nullptr;
  std::optional<size_t> position;
  if (l.state == LeaseState::queued && !local) {
    reason = {{"text", l.reason.text}, {"gpu", opt(l.reason.gpu)}, {"needs_bytes", l.reason.needs},
              {"free_bytes", l.reason.free}, {"behind", opt(l.reason.behind)},
              {"blockers", json::array()}};
  } else if (l.state == LeaseState::queued) {
    const Arbiter& arbiter = *local;
    position = arbiter.queue_position(l.id);
    LeaseReason why = l.reason;
    // Leases far down the queue are not looked at on every pass: name the one in front.
    bool head = false;
    for (const auto& [gpu, id] : arbiter.queue_heads()) head |= id == l.id;
    if (!head && !why.behind && !r.cluster) {  // a shared lease's reason is every host's
      unsigned gpu = r.gpu.value_or(0);
      if (auto it = arbiter.queue_heads().find(gpu); it != arbiter.queue_heads().end()) {
        why.behind = it->second;
        why.gpu = gpu;
        why.text = fmt::format("needs {} on GPU {}; queued behind lease #{}", format_size(r.vram),
                               gpu, it->second);
        why.blockers.clear();
      }
    }
    json blockers = json::array();
    for (const auto& b : why.blockers)
      blockers.push_back({{"owner", b.owner},
                          {"kind", b.kind},
                          {"bytes", b.bytes},
                          {"state", b.state},
                          {"evicting", b.evicting},
                          {"candidates", b.candidates}});
    reason = {{"text", why.text},       {"gpu", opt(why.gpu)},       {"needs_bytes", why.needs},
              {"free_bytes", why.free}, {"behind", opt(why.behind)}, {"blockers", blockers}};
  }
  // What the holder's CUDA_VISIBLE_DEVICES names: a MIG instance by its UUID.
  std::optional<unsigned> gpu_or_requested = l.gpu ? l.gpu : r.gpu;
  std::string cuda_devices;
  if (gpu_or_requested && local)
    for (const auto& g : local->status().gpus)
      if (g.sample.index == *gpu_or_requested) cuda_devices = cuda_visible_devices(g.sample);
  return {{"id", l.id},
          {"state", to_string(l.state)},
          {"owner", l.owner_name()},
          {"gpu", l.gpu ? json(*l.gpu) : opt(r.gpu)},
          {"gpu_requested", r.gpu ? json(*r.gpu) : json("any")},
          {"gpu_label", gpu_or_requested ? json(gpu_label(*gpu_or_requested)) : json(nullptr)},
          {"gpu_cuda_visible_devices", cuda_devices.empty() ? json(nullptr) : json(cuda_devices)},
          {"vram_bytes", r.vram},
          {"ram_bytes", opt(r.ram)},
          {"holder", r.holder},
          {"pid", opt(r.pid)},
          {"priority", r.priority},
          {"label", r.label},
          {"service", r.service.empty() ? json(nullptr) : json(r.service)},
          {"group", r.group.empty() ? json(nullptr) : json(r.group)},
          {"command", r.command},
          {"start", r.start},
          {"wake", r.wake},
          {"shared_queue", r.cluster},
          {"host_requested", r.cluster ? json(r.host.empty() ? "any" : r.host) : json(nullptr)},
          {"on_host_lost", to_string(r.on_host_lost)},
          {"preemptible", r.preemptible},
          // Suspended (issue 28): since when, for whom, and the step of a suspend under way.
          {"suspended_at", time(l.suspension ? l.suspension->at : std::nullopt)},
          {"suspended_for", l.suspension ? json(l.suspension->for_whom) : json(nullptr)},
          {"suspension", l.suspension ? json(to_string(l.suspension->step)) : json(nullptr)},
          {"suspended_bytes", l.suspension ? json(l.suspension->bytes) : json(nullptr)},
          {"suspend_refused", l.suspend_refused.empty() ? json(nullptr) : json(l.suspend_refused)},
          {"position", opt(position)},
          {"reason", reason},
          {"requested_at", when(now, l.requested_at)},
          {"granted_at", time(l.granted_at)},
          {"token", l.token ? json(l.token) : json(nullptr)},
          {"ended_at", time(l.ended_at)},
          {"end_reason", l.end_reason.empty() ? json(nullptr) : json(l.end_reason)},
          {"held_bytes", l.held},
          {"peak_bytes", l.peak_vram},
          {"evicted", l.evicted},
          {"exit_status", opt(l.exit_status)}};
}

}  // namespace

json to_json(const Lease& l, const Arbiter& arbiter, const Now& now) { return lease_json(l, &arbiter, now); }

json to_json(const Lease& l, const Now& now) { return lease_json(l, nullptr, now); }

json to_json(const JobRecord& j) {
  return {{"id", j.id},
          {"label", j.label},
          {"command", j.command},
          {"holder", j.holder},
          {"state", to_string(j.state)},
          {"gpu", opt(j.gpu)},
          {"vram_bytes", j.vram},
          {"requested_at", format_rfc3339(j.requested_at)},
          {"wait_ms", j.wait.count()},
          {"run_ms", j.run ? json(j.run->count()) : json(nullptr)},
          {"peak_bytes", j.peak_vram},
          {"exit_status", opt(j.exit_status)},
          {"end_reason", j.end_reason}};
}

json error_json(const std::string& code, const std::string& message) {
  return {{"error", {{"code", code}, {"message", message}}}};
}

}  // namespace vramd
