// Durations history: what each ComfyUI prompt and each proxied request took, and what it ran on
// (the service's version, a fingerprint of its arguments, the GPU), so that "was 0.28.0 faster
// than 0.27.0?" and "did the crashes stop after adding --disable-async-offload?" have answers
// (docs/history.md). Pure: the records come from services/ (ComfyUI's /history) and proxy/ (the
// request path), the store keeps them (store/duration_store.h), and the comparisons here read
// them back.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/units.h"

namespace vramd {

enum class RecordKind {
  prompt,   // a ComfyUI prompt, read from its /history
  request,  // a request through a vramd proxy
};
const char* to_string(RecordKind k);
std::optional<RecordKind> record_kind_from(std::string_view s);

// How a ComfyUI prompt ended: the first execution_success, execution_error or
// execution_interrupted message of its /history entry.
enum class PromptOutcome { success, error, interrupted };
const char* to_string(PromptOutcome o);
std::optional<PromptOutcome> prompt_outcome_from(std::string_view s);

struct DurationRecord {
  RecordKind kind = RecordKind::request;
  std::string service;
  TimePoint at{};        // when it ended
  std::string key;       // prompt: ComfyUI's prompt id (a prompt is kept once); request: ""
  std::string model;     // request: the model asked; prompt: its main checkpoint or UNet
  std::string workflow;  // prompt: the workflow's fingerprint (services/comfyui_history.h)
  std::optional<PromptOutcome> outcome;  // prompt: how it ended; request: none
  int status = 0;        // request: the HTTP status answered
  std::optional<double> wait_s;        // prompt: queued to started; request: held (queue, wake)
  std::optional<double> first_byte_s;  // request: to the response's head
  double seconds = 0;                  // prompt: execution; request: in all
  std::optional<double> tokens_per_s;  // request: from the answer's usage, where it says
  int cached_nodes = 0;                // prompt: nodes ComfyUI took from its cache
  std::string version;                 // the service's, "" when it does not say
  std::string args_fp;                 // args_fingerprint() of what it was started with
  std::optional<unsigned> gpu;
};

// A version and argument set a service ran with, and when it was first seen with them.
struct ServiceVariant {
  std::string service;
  std::string version;
  std::string args_fp;
  std::vector<std::string> args;  // the argument list (environment as KEY=VALUE after it)
  TimePoint first_seen{};
  TimePoint last_seen{};  // the latest change to it (a service back on an older variant)
};

// 12 hex digits of a hash of the argument list and environment, in order: "" when both are
// empty (nothing known).
std::string args_fingerprint(const std::vector<std::string>& args);

// What one service's records are narrowed to.
struct DurationQuery {
  std::string service;  // "" = every service
  std::optional<RecordKind> kind;
  std::string workflow;  // "" = any
  std::string model;     // "" = any
  TimePoint since{};     // at >= since
  size_t limit = 1000;   // newest first
};

enum class CompareBy { version, args };
const char* to_string(CompareBy b);
std::optional<CompareBy> compare_by_from(std::string_view s);

// One subject (a workflow, or a model when the records have none) on one variant (a version or
// an argument set), in the order the variants were first seen.
struct DurationGroup {
  RecordKind kind = RecordKind::request;
  std::string subject;  // the workflow fingerprint, else the model
  std::string model;    // the subject's latest model (a prompt's checkpoint)
  std::string variant;  // the version ("" = unknown) or the args fingerprint
  size_t count = 0;     // successful runs (prompts that succeeded, requests answered 2xx)
  size_t failed = 0;
  double p50 = 0, p95 = 0;  // seconds, of the successful runs
  std::optional<double> wait_p50;
  std::optional<double> tokens_per_s_p50;
  // p50 against the previous variant of the same subject: +12.5 = 12.5 % slower.
  std::optional<double> change_pct;
  TimePoint first{}, last{};
};

// Groups `records` (any order) by subject and by `by`, each subject's variants by first seen.
std::vector<DurationGroup> compare_durations(const std::vector<DurationRecord>& records,
                                             CompareBy by);

// The nearest-rank percentile (0 < p <= 100) of `v`, which it sorts; 0 for none.
double percentile(std::vector<double>& v, double p);

// What changed from `from` to `to`: "+--disable-async-offload", "-A=1", "--steps 20 → 24"
// (added, removed; in order). Empty when the same.
std::vector<std::string> args_diff(const std::vector<std::string>& from,
                                   const std::vector<std::string>& to);

}  // namespace vramd
