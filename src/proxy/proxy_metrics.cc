#include "proxy/proxy_metrics.h"

#include <fmt/format.h>

namespace vramd {

namespace {
std::string label(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}
}  // namespace

void ProxyMetrics::held(const std::string& service, double seconds) {
  Histogram& h = held_[service];
  for (size_t i = 0; i < kBuckets.size(); ++i)
    if (seconds <= kBuckets[i]) ++h.counts[i];
  ++h.count;
  h.sum += seconds;
}

std::uint64_t ProxyMetrics::requests(const std::string& service, const std::string& model,
                                     unsigned status) const {
  auto it = requests_.find({service, model, status});
  return it == requests_.end() ? 0 : it->second;
}
int ProxyMetrics::in_flight(const std::string& service) const {
  auto it = in_flight_.find(service);
  return it == in_flight_.end() ? 0 : it->second;
}
std::uint64_t ProxyMetrics::upstream_errors(const std::string& service) const {
  auto it = upstream_errors_.find(service);
  return it == upstream_errors_.end() ? 0 : it->second;
}
std::uint64_t ProxyMetrics::requests_total(const std::string& service) const {
  std::uint64_t n = 0;
  for (const auto& [key, count] : requests_)
    if (std::get<0>(key) == service) n += count;
  return n;
}
std::uint64_t ProxyMetrics::server_errors_total(const std::string& service) const {
  std::uint64_t n = 0;
  for (const auto& [key, count] : requests_)
    if (std::get<0>(key) == service && std::get<2>(key) >= 500) n += count;
  return n;
}
std::uint64_t ProxyMetrics::held_count(const std::string& service) const {
  auto it = held_.find(service);
  return it == held_.end() ? 0 : it->second.count;
}

std::string ProxyMetrics::render() const {
  std::string out;
  out += "# HELP vramd_proxy_requests_total Requests through the proxy, by answer status.\n";
  out += "# TYPE vramd_proxy_requests_total counter\n";
  for (const auto& [k, n] : requests_) {
    const auto& [service, model, status] = k;
    out +=
        fmt::format("vramd_proxy_requests_total{{service=\"{}\",model=\"{}\",status=\"{}\"}} {}\n",
                    label(service), label(model), status, n);
  }
  out += "# HELP vramd_proxy_in_flight Requests in flight through the proxy.\n";
  out += "# TYPE vramd_proxy_in_flight gauge\n";
  for (const auto& [service, n] : in_flight_)
    out += fmt::format("vramd_proxy_in_flight{{service=\"{}\"}} {}\n", label(service), n);
  out += "# HELP vramd_proxy_upstream_errors_total Requests the service did not answer.\n";
  out += "# TYPE vramd_proxy_upstream_errors_total counter\n";
  for (const auto& [service, n] : upstream_errors_)
    out +=
        fmt::format("vramd_proxy_upstream_errors_total{{service=\"{}\"}} {}\n", label(service), n);
  out += "# HELP vramd_proxy_held_seconds How long requests were held for a wake.\n";
  out += "# TYPE vramd_proxy_held_seconds histogram\n";
  for (const auto& [service, h] : held_) {
    std::string s = label(service);
    for (size_t i = 0; i < kBuckets.size(); ++i)
      out += fmt::format("vramd_proxy_held_seconds_bucket{{service=\"{}\",le=\"{}\"}} {}\n", s,
                         kBuckets[i], h.counts[i]);
    out += fmt::format("vramd_proxy_held_seconds_bucket{{service=\"{}\",le=\"+Inf\"}} {}\n", s,
                       h.count);
    out += fmt::format("vramd_proxy_held_seconds_sum{{service=\"{}\"}} {}\n", s, h.sum);
    out += fmt::format("vramd_proxy_held_seconds_count{{service=\"{}\"}} {}\n", s, h.count);
  }
  return out;
}

}  // namespace vramd
