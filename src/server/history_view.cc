#include "server/history_view.h"

#include <algorithm>
#include <map>
#include <regex>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace vramd {

using nlohmann::json;

namespace {

json opt(const std::optional<double>& v) { return v ? json(*v) : json(nullptr); }
json text(const std::string& s) { return s.empty() ? json(nullptr) : json(s); }

double days_between(TimePoint a, TimePoint b) {
  return std::max(0.0, std::chrono::duration<double>(b - a).count() / 86400.0);
}

// The name a variant is read by: its change from the one before ("+--disable-async-offload"),
// else its version or fingerprint.
std::string variant_label(const std::vector<ServiceVariant>& vs, size_t i) {
  const ServiceVariant& v = vs[i];
  if (i > 0) {
    std::vector<std::string> parts;
    // A version learned (none known before) is no change.
    if (v.version != vs[i - 1].version && !v.version.empty() && !vs[i - 1].version.empty())
      parts.push_back("version " + v.version);
    if (v.args_fp != vs[i - 1].args_fp) {
      auto d = args_diff(vs[i - 1].args, v.args);
      if (!d.empty()) parts.push_back(fmt::format("{}", fmt::join(d, " ")));
    }
    if (!parts.empty()) return fmt::format("{}", fmt::join(parts, ", "));
  }
  if (!v.args_fp.empty()) return "args " + v.args_fp;
  return v.version.empty() ? "unknown" : "version " + v.version;
}

}  // namespace

json to_json(const DurationRecord& r) {
  return {{"kind", to_string(r.kind)},
          {"service", r.service},
          {"at", format_rfc3339(r.at)},
          {"prompt_id", text(r.key)},
          {"model", text(r.model)},
          {"workflow", text(r.workflow)},
          {"outcome", r.outcome ? json(to_string(*r.outcome)) : json(nullptr)},
          {"status", r.status ? json(r.status) : json(nullptr)},
          {"wait_seconds", opt(r.wait_s)},
          {"first_byte_seconds", opt(r.first_byte_s)},
          {"seconds", r.seconds},
          {"tokens_per_second", opt(r.tokens_per_s)},
          {"cached_nodes", r.kind == RecordKind::prompt ? json(r.cached_nodes) : json(nullptr)},
          {"version", text(r.version)},
          {"args_fingerprint", text(r.args_fp)},
          {"gpu", r.gpu ? json(*r.gpu) : json(nullptr)}};
}

json to_json(const DurationGroup& g) {
  return {{"kind", to_string(g.kind)},
          {"subject", g.subject},
          {"model", text(g.model)},
          {"variant", text(g.variant)},
          {"count", g.count},
          {"failed", g.failed},
          {"p50_seconds", g.p50},
          {"p95_seconds", g.p95},
          {"wait_p50_seconds", opt(g.wait_p50)},
          {"tokens_per_second_p50", opt(g.tokens_per_s_p50)},
          {"change_pct", opt(g.change_pct)},
          {"first", format_rfc3339(g.first)},
          {"last", format_rfc3339(g.last)}};
}

json variants_json(const std::vector<ServiceVariant>& variants) {
  json out = json::array();
  for (size_t i = 0; i < variants.size(); ++i) {
    const ServiceVariant& v = variants[i];
    json j = {{"service", v.service},
              {"version", text(v.version)},
              {"args_fingerprint", text(v.args_fp)},
              {"args", v.args},
              {"first_seen", format_rfc3339(v.first_seen)},
              {"label", variant_label(variants, i)}};
    j["args_diff"] = i > 0 ? json(args_diff(variants[i - 1].args, v.args)) : json::array();
    j["args_from_first"] = i > 0 ? json(args_diff(variants[0].args, v.args)) : json::array();
    out.push_back(std::move(j));
  }
  return out;
}

Result<TimePoint> parse_since(const std::string& s, TimePoint now) {
  if (auto d = parse_duration(s); d) return now - *d;
  auto t = parse_rfc3339(s);
  if (!t) return make_error(fmt::format("expected an RFC 3339 time or a duration (7d, 12h), got '{}'", s));
  return *t;
}

json crash_split_json(const std::vector<CrashRecord>& crashes,
                      const std::vector<ServiceVariant>& in, const std::vector<std::string>& current_args,
                      TimePoint now) {
  std::vector<ServiceVariant> sorted = in;
  std::stable_sort(sorted.begin(), sorted.end(), [](const ServiceVariant& a, const ServiceVariant& b) {
    return a.first_seen < b.first_seen;
  });
  // A version learned (none known, then the server said it) on the same arguments is one
  // period, not a change: a crash before the first answer belongs to it.
  std::vector<ServiceVariant> vs;
  std::vector<std::set<std::string>> versions;  // the versions each period's crashes may carry
  for (const ServiceVariant& v : sorted) {
    if (!vs.empty() && vs.back().args_fp == v.args_fp &&
        (vs.back().version.empty() || v.version.empty())) {
      if (!v.version.empty()) vs.back().version = v.version;
      versions.back().insert(v.version);
      continue;
    }
    vs.push_back(v);
    versions.push_back({v.version});
  }
  // Signatures, most frequent first.
  std::map<std::string, std::vector<const CrashRecord*>> by_sig;
  for (const CrashRecord& c : crashes) by_sig[c.signature].push_back(&c);
  std::vector<std::string> sigs;
  sigs.reserve(by_sig.size());
  for (const auto& [sig, list] : by_sig) sigs.push_back(sig);
  std::stable_sort(sigs.begin(), sigs.end(), [&](const std::string& a, const std::string& b) {
    return by_sig[a].size() > by_sig[b].size();
  });
  static const std::regex kOption(R"((--?[A-Za-z][A-Za-z0-9_-]*))");
  json out = json::array();
  for (const std::string& sig : sigs) {
    const auto& list = by_sig[sig];
    json per = json::array();
    std::vector<std::string> parts;
    size_t matched = 0;
    for (size_t i = 0; i < vs.size(); ++i) {
      TimePoint from = vs[i].first_seen;
      TimePoint to = i + 1 < vs.size() ? vs[i + 1].first_seen : now;
      size_t n = 0;
      for (const CrashRecord* c : list)
        n += versions[i].count(c->version) && c->args_fp == vs[i].args_fp;
      matched += n;
      double days = days_between(from, to);
      std::string label = variant_label(vs, i);
      per.push_back({{"version", text(vs[i].version)},
                     {"args_fingerprint", text(vs[i].args_fp)},
                     {"label", label},
                     {"since", format_rfc3339(from)},
                     {"days", days},
                     {"crashes", n}});
      parts.push_back(fmt::format("{} in {:.1f} days {} {}", n, days, i == 0 ? "on" : "since",
                                  label));
    }
    if (matched < list.size())
      per.push_back({{"version", nullptr}, {"args_fingerprint", nullptr}, {"label", "unknown"},
                     {"crashes", list.size() - matched}});
    json entry = {{"signature", sig},
                  {"title", list.front()->title},
                  {"count", list.size()},
                  {"by_variant", per},
                  {"summary", vs.size() > 1 ? json(fmt::format("{}: {}", sig, fmt::join(parts, ", ")))
                                            : json(nullptr)}};
    // The suggested fix applied: the option it names is in the arguments now.
    std::string suggestion;
    for (const CrashRecord* c : list)
      if (!c->suggestion.empty()) suggestion = c->suggestion;
    std::smatch m;
    json applied = nullptr;
    if (std::regex_search(suggestion, m, kOption)) {
      std::string option = m[1];
      auto holds = [&](const std::vector<std::string>& args) {
        return std::any_of(args.begin(), args.end(), [&](const std::string& a) {
          return a == option || a.rfind(option + "=", 0) == 0;
        });
      };
      if (holds(current_args)) {
        applied = {{"option", option}, {"since", nullptr}};
        for (const ServiceVariant& v : vs)
          if (holds(v.args)) {
            applied["since"] = format_rfc3339(v.first_seen);
            break;
          }
      }
    }
    entry["applied"] = applied;
    out.push_back(std::move(entry));
  }
  return out;
}

}  // namespace vramd
