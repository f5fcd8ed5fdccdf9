#include "core/durations.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <unordered_set>

#include <fmt/format.h>

namespace vramd {

const char* to_string(RecordKind k) {
  switch (k) {
    case RecordKind::prompt: return "prompt";
    case RecordKind::request: return "request";
  }
  return "request";
}

std::optional<RecordKind> record_kind_from(std::string_view s) {
  if (s == "prompt") return RecordKind::prompt;
  if (s == "request") return RecordKind::request;
  return std::nullopt;
}

const char* to_string(PromptOutcome o) {
  switch (o) {
    case PromptOutcome::success: return "success";
    case PromptOutcome::error: return "error";
    case PromptOutcome::interrupted: return "interrupted";
  }
  return "error";
}

std::optional<PromptOutcome> prompt_outcome_from(std::string_view s) {
  for (PromptOutcome o : {PromptOutcome::success, PromptOutcome::error, PromptOutcome::interrupted})
    if (s == to_string(o)) return o;
  return std::nullopt;
}

const char* to_string(CompareBy b) { return b == CompareBy::version ? "version" : "args"; }

std::optional<CompareBy> compare_by_from(std::string_view s) {
  if (s == "version") return CompareBy::version;
  if (s == "args") return CompareBy::args;
  return std::nullopt;
}

std::string args_fingerprint(const std::vector<std::string>& args) {
  if (args.empty()) return "";
  // FNV-1a 64 over each argument and a separator no argument holds.
  uint64_t h = 1469598103934665603ULL;
  auto mix = [&h](unsigned char c) {
    h ^= c;
    h *= 1099511628211ULL;
  };
  for (const std::string& a : args) {
    for (unsigned char c : a) mix(c);
    mix(0);
  }
  return fmt::format("{:012x}", h & 0xffffffffffffULL);
}

double percentile(std::vector<double>& v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  auto rank = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(v.size())));
  rank = std::clamp<size_t>(rank, 1, v.size());
  return v[rank - 1];
}

namespace {

bool succeeded(const DurationRecord& r) {
  if (r.kind == RecordKind::prompt) return r.outcome == PromptOutcome::success;
  return r.status >= 200 && r.status < 300;
}

}  // namespace

std::vector<DurationGroup> compare_durations(const std::vector<DurationRecord>& records,
                                             CompareBy by) {
  // Oldest first, so that "first seen" and "latest model" read in order.
  std::vector<const DurationRecord*> sorted;
  sorted.reserve(records.size());
  for (const DurationRecord& r : records) sorted.push_back(&r);
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const DurationRecord* a, const DurationRecord* b) { return a->at < b->at; });

  struct Acc {
    DurationGroup g;
    std::vector<double> seconds, waits, tps;
  };
  std::vector<std::string> subjects;  // in order of first record
  std::map<std::string, std::vector<Acc>> by_subject;
  for (const DurationRecord* r : sorted) {
    std::string subject = !r->workflow.empty() ? r->workflow : r->model;
    const std::string& variant = by == CompareBy::version ? r->version : r->args_fp;
    auto [it, fresh] = by_subject.try_emplace(subject);
    if (fresh) subjects.push_back(subject);
    auto& accs = it->second;
    auto acc = std::find_if(accs.begin(), accs.end(),
                            [&](const Acc& a) { return a.g.variant == variant; });
    if (acc == accs.end()) {
      accs.push_back(Acc{});
      acc = std::prev(accs.end());
      acc->g.kind = r->kind;
      acc->g.subject = subject;
      acc->g.variant = variant;
      acc->g.first = r->at;
    }
    acc->g.last = r->at;
    if (!r->model.empty()) acc->g.model = r->model;
    if (!succeeded(*r)) {
      ++acc->g.failed;
      continue;
    }
    ++acc->g.count;
    acc->seconds.push_back(r->seconds);
    if (r->wait_s) acc->waits.push_back(*r->wait_s);
    if (r->tokens_per_s) acc->tps.push_back(*r->tokens_per_s);
  }

  std::vector<DurationGroup> out;
  for (const std::string& subject : subjects) {
    std::optional<double> previous;
    for (Acc& a : by_subject[subject]) {
      a.g.p50 = percentile(a.seconds, 50);
      a.g.p95 = percentile(a.seconds, 95);
      if (!a.waits.empty()) a.g.wait_p50 = percentile(a.waits, 50);
      if (!a.tps.empty()) a.g.tokens_per_s_p50 = percentile(a.tps, 50);
      if (a.g.count > 0) {
        if (previous && *previous > 0) a.g.change_pct = (a.g.p50 - *previous) / *previous * 100.0;
        previous = a.g.p50;
      }
      out.push_back(std::move(a.g));
    }
  }
  return out;
}

std::vector<std::string> args_diff(const std::vector<std::string>& from,
                                   const std::vector<std::string>& to) {
  // Options with their values read as one ("--port 8188"): an argument starting with '-'
  // takes the next one when that does not.
  auto words = [](const std::vector<std::string>& v) {
    std::vector<std::string> w;
    for (size_t i = 0; i < v.size(); ++i) {
      std::string a = v[i];
      if (a.size() > 1 && a[0] == '-' && a.find('=') == std::string::npos && i + 1 < v.size() &&
          (v[i + 1].empty() || v[i + 1][0] != '-'))
        a += " " + v[++i];
      w.push_back(std::move(a));
    }
    return w;
  };
  std::vector<std::string> a = words(from), b = words(to);
  auto option = [](const std::string& w) {
    size_t cut = w.find_first_of(" =");
    return w[0] == '-' && cut != std::string::npos ? w.substr(0, cut) : std::string();
  };
  std::multiset<std::string> in_a(a.begin(), a.end()), in_b(b.begin(), b.end());
  std::vector<std::string> out;
  std::unordered_set<std::string> changed;  // options whose value changed: told once
  for (const std::string& w : b) {
    if (in_a.count(w)) continue;
    std::string opt = option(w);
    if (!opt.empty()) {
      auto old = std::find_if(a.begin(), a.end(), [&](const std::string& x) {
        return option(x) == opt && !in_b.count(x);
      });
      if (old != a.end()) {
        out.push_back(fmt::format("{} → {}", *old, w));
        changed.insert(*old);
        continue;
      }
    }
    out.push_back("+" + w);
  }
  for (const std::string& w : a)
    if (!in_b.count(w) && !changed.count(w)) out.push_back("-" + w);
  return out;
}

}  // namespace vramd
