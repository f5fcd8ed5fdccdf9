// The Prometheus text exposition format (version 0.0.4), as vLLM, SGLang, Triton and llama.cpp
// serve it on /metrics: "name{label="value",...} value [timestamp]", "# HELP", "# TYPE".
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace vramd {

struct PromSample {
  std::string name;
  std::vector<std::pair<std::string, std::string>> labels;  // in the order written, unescaped
  double value = 0;                                         // may be NaN or ±Inf
  std::optional<std::int64_t> timestamp_ms;
};

struct PromExposition {
  std::vector<PromSample> samples;          // in the order written
  std::map<std::string, std::string> help;  // metric name → HELP text
  std::map<std::string, std::string> type;  // metric name → "gauge", "counter", ...
  int skipped_lines = 0;                    // lines that were neither comments nor samples

  // True when `name` has a HELP or TYPE line or at least one sample.
  bool declared(std::string_view name) const;
  // The sum of `name`'s values over all its label sets, NaN values left out; nullopt when it
  // has no sample (even if HELP/TYPE name it: a declared metric without samples is unknown).
  std::optional<double> sum(std::string_view name) const;
};

// Never fails: lines that do not parse are skipped and counted.
PromExposition parse_prometheus(std::string_view text);

}  // namespace vramd
