// The proxy's counters, rendered in the Prometheus text format for /metrics.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <tuple>

namespace vramd {

class ProxyMetrics {
 public:
  void request_done(const std::string& service, const std::string& model, unsigned status) {
    ++requests_[{service, model, status}];
  }
  void in_flight(const std::string& service, int delta) { in_flight_[service] += delta; }
  void upstream_error(const std::string& service) { ++upstream_errors_[service]; }
  void held(const std::string& service, double seconds);

  std::uint64_t requests(const std::string& service, const std::string& model,
                         unsigned status) const;
  int in_flight(const std::string& service) const;
  std::uint64_t upstream_errors(const std::string& service) const;
  std::uint64_t held_count(const std::string& service) const;
  // Every request answered for `service`, and those answered 5xx (the proxy's or upstream's).
  std::uint64_t requests_total(const std::string& service) const;
  std::uint64_t server_errors_total(const std::string& service) const;

  // vramd_proxy_requests_total{service,model,status}, vramd_proxy_in_flight{service},
  // vramd_proxy_upstream_errors_total{service}, vramd_proxy_held_seconds{service} (histogram).
  std::string render() const;

 private:
  static constexpr std::array<double, 9> kBuckets = {0.01, 0.1, 0.5, 1, 5, 10, 30, 60, 300};
  struct Histogram {
    std::array<std::uint64_t, kBuckets.size()> counts{};
    std::uint64_t count = 0;
    double sum = 0;
  };
  std::map<std::tuple<std::string, std::string, unsigned>, std::uint64_t> requests_;
  std::map<std::string, int> in_flight_;
  std::map<std::string, std::uint64_t> upstream_errors_;
  std::map<std::string, Histogram> held_;
};

}  // namespace vramd
