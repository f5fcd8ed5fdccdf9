#include "server/metrics.h"

#include <array>
#include <fmt/format.h>

#include "core/gpu_select.h"


namespace vramd {

namespace {

// Every state a service's API can report, so the enum-style gauge always has the same series
// (the process states are all_managed_phases()).
constexpr std::array kProbeStates = {ServiceState::unknown, ServiceState::up,
                                     ServiceState::unloading, ServiceState::unreachable};

class Out {
 public:
  void family(std::string_view name, std::string_view type, std::string_view help) {
    s_ += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
  }
  // labels: name="value" pairs already joined.
  void sample(std::string_view name, std::string_view labels, double value) {
    if (labels.empty()) s_ += fmt::format("{} {}\n", name, number(value));
    else s_ += fmt::format("{}{{{}}} {}\n", name, labels, number(value));
  }
  std::string take() { return std::move(s_); }

 private:
  static std::string number(double v) {
    // The range first: casting 1e300 to int64 would be undefined behaviour.
    if (v < 9e15 && v > -9e15 && v == static_cast<double>(static_cast<int64_t>(v)))
      return fmt::format("{}", static_cast<int64_t>(v));
    return fmt::format("{}", v);
  }
  std::string s_;
};

std::string label(std::string_view name, std::string_view value) {
  return fmt::format("{}=\"{}\"", name, escape_label(value));
}

template <typename... More>
std::string labels(std::string_view name, std::string_view value, More&&... more) {
  std::string out = label(name, value);
  if constexpr (sizeof...(more) > 0) out += "," + labels(std::forward<More>(more)...);
  return out;
}

}  // namespace

std::string escape_label(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

const std::vector<double>& MetricsCounters::wait_buckets() {
  static const std::vector<double> buckets = {0.1, 0.5, 1, 5, 15, 60, 300, 900, 3600};
  return buckets;
}

void MetricsCounters::observe(const Action& action) {
  if (const auto* e = std::get_if<EmitEvent>(&action)) {
    const EventRecord& ev = e->event;
    if (ev.lease && ev.type == "lease.suspended") {
      suspended_since_[*ev.lease] = ev.at;
      ++suspends;
    } else if (ev.lease && ev.type == "lease.suspend_failed") {
      ++suspend_failures;
    } else if (auto s = ev.lease ? suspended_since_.find(*ev.lease) : suspended_since_.end();
               s != suspended_since_.end() &&
               (ev.type == "lease.resumed" || ev.type == "lease.released" ||
                ev.type == "lease.expired" || ev.type == "lease.cancelled" ||
                ev.type == "lease.lost")) {
      suspended_seconds += std::chrono::duration<double>(ev.at - s->second).count();
      suspended_since_.erase(s);
    }
    if (const auto& v = e->event.verdict) {
      ++unloads[{v->service, to_string(v->outcome)}];
      freed[v->service] += v->before_bytes > v->after_bytes ? v->before_bytes - v->after_bytes : 0;
    }
  } else if (const auto* lc = std::get_if<LeaseChanged>(&action)) {
    const Lease& l = lc->lease;
    if (!is_active(l.state)) {
      waited_.erase(l.id);
      ++lease_ends[to_string(l.state)];
    } else if (l.state == LeaseState::granted && l.granted_at && waited_.insert(l.id).second) {
      double s = std::chrono::duration<double>(*l.granted_at - l.requested_at).count();
      const auto& b = wait_buckets();
      if (wait_counts.empty()) wait_counts.assign(b.size() + 1, 0);
      size_t i = 0;
      while (i < b.size() && s > b[i]) ++i;
      ++wait_counts[i];
      ++wait_count;
      wait_sum += s;
    }
  } else if (const auto* lf = std::get_if<Lifecycle>(&action)) {
    if (lf->action == Command::restart) ++lifecycle_restarts[lf->service];
  }
}

void MetricsCounters::crash(const std::string& service, const std::string& signature) {
  ++crashes[{service, signature}];
}

std::string render_metrics(const Arbiter& arbiter, const MetricsCounters& c, const Now& now,
                           const std::string& host) {
  Out o;
  const StatusSnapshot& status = arbiter.status();

  o.family("vramd_build_info", "gauge", "vramd's version and host name; always 1.");
  o.sample("vramd_build_info",
           host.empty() ? label("version", VRAMD_VERSION_STRING)
                        : labels("version", VRAMD_VERSION_STRING, "host", host),
           1);

  o.family("vramd_gpu_memory_total_bytes", "gauge", "GPU memory in all, as the driver reports it.");
  for (const auto& g : status.gpus)
    o.sample("vramd_gpu_memory_total_bytes",
             labels("gpu", gpu_label(g.sample), "uuid", g.sample.uuid, "name", g.sample.name),
             static_cast<double>(g.sample.total));
  o.family("vramd_gpu_memory_used_bytes", "gauge",
           "GPU memory not available to a new allocation (total minus free).");
  for (const auto& g : status.gpus)
    o.sample("vramd_gpu_memory_used_bytes", labels("gpu", gpu_label(g.sample), "uuid", g.sample.uuid),
             static_cast<double>(g.sample.used));
  o.family("vramd_gpu_utilization_ratio", "gauge", "GPU busy time over the last sample period, 0 to 1.");
  for (const auto& g : status.gpus)
    if (g.sample.utilization_pct)
      o.sample("vramd_gpu_utilization_ratio", labels("gpu", gpu_label(g.sample), "uuid", g.sample.uuid),
               *g.sample.utilization_pct / 100.0);

  o.family("vramd_owner_memory_bytes", "gauge",
           "GPU memory each owner holds; source is the evidence it was attributed by.");
  for (const auto& g : status.gpus) {
    // One series per (owner, kind, source): holdings of one owner may come from several pids.
    std::map<std::tuple<std::string, std::string, std::string>, Bytes> by;
    for (const auto& h : g.holdings)
      by[{h.owner.name.empty() ? to_string(h.owner.kind) : h.owner.name, to_string(h.owner.kind),
          to_string(h.source)}] += h.bytes;
    for (const auto& [key, bytes] : by)
      o.sample("vramd_owner_memory_bytes",
               labels("gpu", gpu_label(g.sample), "owner", std::get<0>(key), "kind",
                      std::get<1>(key), "source", std::get<2>(key)),
               static_cast<double>(bytes));
  }

  std::vector<ServiceStatus> services = arbiter.services();
  o.family("vramd_service_state", "gauge",
           "1 for the service's current state, 0 for the others: the process state for services "
           "vramd runs, else the state of its API.");
  for (const auto& s : services) {
    std::string current = s.managed ? to_string(s.managed->state) : to_string(s.state);
    auto emit = [&](const auto& states) {
      for (auto st : states)
        o.sample("vramd_service_state", labels("service", s.name, "state", to_string(st)),
                 current == to_string(st) ? 1 : 0);
    };
    if (s.managed) emit(all_managed_phases());
    else emit(kProbeStates);
  }
  o.family("vramd_service_idle_seconds", "gauge",
           "Seconds since the service last did work; absent while it is busy or unknown.");
  for (const auto& s : services)
    if (s.idle_since && !s.busy.value_or(false))
      o.sample("vramd_service_idle_seconds", label("service", s.name),
               std::max(0.0, std::chrono::duration<double>(now.mono - *s.idle_since).count()));

  o.family("vramd_unloads_total", "counter", "Unloads by their verified outcome, since vramd started.");
  for (const auto& [key, n] : c.unloads)
    o.sample("vramd_unloads_total", labels("service", key.first, "outcome", key.second),
             static_cast<double>(n));
  o.family("vramd_unload_freed_bytes_total", "counter",
           "GPU memory that unloads gave back, measured on the GPU, since vramd started.");
  for (const auto& [svc, bytes] : c.freed)
    o.sample("vramd_unload_freed_bytes_total", label("service", svc), static_cast<double>(bytes));

  o.family("vramd_leases", "gauge", "Active leases by state.");
  size_t queued = 0, granted = 0, suspended = 0;
  Bytes suspended_bytes = 0;
  for (const auto& l : arbiter.leases()) {
    if (l.state == LeaseState::suspended) {
      ++suspended;
      if (l.suspension) suspended_bytes += l.suspension->bytes;
    } else {
      (l.state == LeaseState::queued ? queued : granted)++;
    }
  }
  o.sample("vramd_leases", label("state", "queued"), static_cast<double>(queued));
  o.sample("vramd_leases", label("state", "granted"), static_cast<double>(granted));
  o.sample("vramd_leases", label("state", "suspended"), static_cast<double>(suspended));
  o.family("vramd_suspended_bytes", "gauge",
           "GPU memory of suspended preemptible leases, held in host RAM (cuda-checkpoint).");
  o.sample("vramd_suspended_bytes", "", static_cast<double>(suspended_bytes));
  o.family("vramd_lease_suspends_total", "counter",
           "Preemptible leases suspended, and suspends that failed, since vramd started.");
  o.sample("vramd_lease_suspends_total", label("outcome", "suspended"),
           static_cast<double>(c.suspends));
  o.sample("vramd_lease_suspends_total", label("outcome", "failed"),
           static_cast<double>(c.suspend_failures));
  o.family("vramd_lease_suspended_seconds_total", "counter",
           "Seconds preemptible leases spent suspended (counted when each is resumed or ends).");
  o.sample("vramd_lease_suspended_seconds_total", "", c.suspended_seconds);

  o.family("vramd_lease_ends_total", "counter", "Leases that ended, by how, since vramd started.");
  for (const auto& [state, n] : c.lease_ends)
    o.sample("vramd_lease_ends_total", label("state", state), static_cast<double>(n));
  // Several hosts: how long since the store last took this host's heartbeat (its shared leases
  // are given up at half of host_timeout).
  if (auto contact = arbiter.store_contact()) {
    o.family("vramd_store_contact_age_seconds", "gauge",
             "Seconds since the shared store last took this host's heartbeat.");
    o.sample("vramd_store_contact_age_seconds", "",
             std::max(0.0, std::chrono::duration<double>(now.mono - *contact).count()));
  }

  o.family("vramd_lease_wait_seconds", "histogram", "How long leases waited before they were granted.");
  const auto& buckets = MetricsCounters::wait_buckets();
  uint64_t cumulative = 0;
  for (size_t i = 0; i < buckets.size(); ++i) {
    cumulative += c.wait_counts.empty() ? 0 : c.wait_counts[i];
    o.sample("vramd_lease_wait_seconds_bucket", label("le", fmt::format("{}", buckets[i])),
             static_cast<double>(cumulative));
  }
  o.sample("vramd_lease_wait_seconds_bucket", label("le", "+Inf"), static_cast<double>(c.wait_count));
  o.sample("vramd_lease_wait_seconds_sum", "", c.wait_sum);
  o.sample("vramd_lease_wait_seconds_count", "", static_cast<double>(c.wait_count));

  o.family("vramd_restarts_total", "counter",
           "Restarts of a service (vramd's own children, or its container or unit), since vramd started.");
  for (const auto& s : services) {
    uint64_t n = s.managed ? static_cast<uint64_t>(s.managed->restart_count) : 0;
    if (auto it = c.lifecycle_restarts.find(s.name); it != c.lifecycle_restarts.end()) n += it->second;
    if (s.managed || n) o.sample("vramd_restarts_total", label("service", s.name), static_cast<double>(n));
  }
  o.family("vramd_crashes_total", "counter", "Crashes by diagnosed signature, since vramd started.");
  for (const auto& [key, n] : c.crashes)
    o.sample("vramd_crashes_total", labels("service", key.first, "signature", key.second),
             static_cast<double>(n));
  o.family("vramd_nvml_calls_total", "counter",
           "NVML calls vramd made, by entry point, since it started. The process lists "
           "(nvmlDeviceGet*RunningProcesses*) take the driver's global lock: they are read when "
           "memory moves ([gpu] process_scan_threshold).");
  for (const auto& [function, n] : c.nvml_calls)
    o.sample("vramd_nvml_calls_total", label("function", function), static_cast<double>(n));
  return o.take();
}

}  // namespace vramd
