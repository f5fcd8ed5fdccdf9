// What each service runs (its version and arguments) and the prompts it finished: the core's
// side of the durations history (core/durations.h, docs/history.md).
#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/service_policy.h"

namespace vramd {

namespace {

constexpr size_t kRecordedPrompts = 512;

}  // namespace

void ServicePolicy::restore_variants(const std::vector<ServiceVariant>& latest) {
  for (const ServiceVariant& v : latest) {
    auto it = services_.find(v.service);
    if (it == services_.end()) continue;
    it->second.version = v.version;
    it->second.args = v.args;
    it->second.args_fp = v.args_fp;
  }
}

void ServicePolicy::on_started(const std::string& service, const Now& now,
                               std::vector<Action>& actions) {
  auto it = services_.find(service);
  if (it != services_.end()) note_variant(it->second, ServiceProbe{}, now, actions);
}

void ServicePolicy::note_variant(ServiceStatus& st, const ServiceProbe& p, const Now& now,
                                 std::vector<Action>& actions) {
  // The arguments: vramd's own `start` and the environment it gives, for a service it runs
  // (known before its first answer, and the same whatever the server says of its argv); else
  // what the server says it was started with.
  std::vector<std::string> args = p.args;
  if (const ServiceConfig* cfg = config_.find_service(st.name); cfg && !cfg->start.empty()) {
    args = cfg->start;
    for (const auto& [k, v] : cfg->env) args.push_back(fmt::format("{}={}", k, v));
  }
  std::string version = p.version.empty() ? st.version : p.version;
  std::string fp = args.empty() ? st.args_fp : args_fingerprint(args);
  if (args.empty()) args = st.args;
  if (version == st.version && fp == st.args_fp) return;
  const bool first = st.version.empty() && st.args_fp.empty();
  ServiceChange change{st.version, version, st.args_fp, fp, {}};
  std::vector<std::string> parts;
  if (!first && version != st.version && !st.version.empty())
    parts.push_back(fmt::format("version {} → {}", st.version, version));
  if (!first && fp != st.args_fp && !st.args_fp.empty()) {
    change.args_diff = args_diff(st.args, args);
    parts.push_back(fmt::format(
        "args {}", change.args_diff.empty() ? fp : fmt::format("{}", fmt::join(change.args_diff, " "))));
  }
  st.version = version;
  st.args = args;
  st.args_fp = fp;
  actions.emplace_back(RememberVariant{ServiceVariant{st.name, version, fp, args, now.wall, now.wall}});
  if (parts.empty()) return;  // first sight, or a version or argument list learned
  st.changed_at = now.wall;
  st.last_change = fmt::format("{}", fmt::join(parts, "; "));
  EmitEvent e = make_event(now, "service.changed", st.last_gpu, st.name,
                           fmt::format("{} changed: {}", st.name, st.last_change));
  e.event.change = std::move(change);
  actions.emplace_back(std::move(e));
}

void ServicePolicy::note_finished(ServiceStatus& st, const ServiceProbe& p,
                                  std::vector<Action>& actions) {
  if (p.finished.empty()) return;
  RecordDurations out;
  for (const DurationRecord& r : p.finished) {
    if (!r.key.empty()) {
      if (std::find(st.recorded_prompts.begin(), st.recorded_prompts.end(), r.key) !=
          st.recorded_prompts.end())
        continue;
      st.recorded_prompts.push_back(r.key);
      if (st.recorded_prompts.size() > kRecordedPrompts) st.recorded_prompts.pop_front();
    }
    DurationRecord stamped = r;
    stamped.service = st.name;
    stamped.version = st.version;
    stamped.args_fp = st.args_fp;
    if (!stamped.gpu) stamped.gpu = st.last_gpu;
    out.records.push_back(std::move(stamped));
  }
  if (!out.records.empty()) actions.emplace_back(std::move(out));
}

}  // namespace vramd
