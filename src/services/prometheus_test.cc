#include "services/prometheus.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include "services/parsers.h"
#include "test_paths.h"

namespace vramd {
// Named, not anonymous: its helpers share a unity batch with other tests' (cmake/unity.cmake).
namespace prometheus_test {

std::string fixture(const std::string& name) {
  std::ifstream in(vramd::test_paths::source_dir() + "/tests/fixtures/services/" + name);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(Prometheus, SampleWithLabelsValueAndTimestamp) {
  PromExposition e = parse_prometheus(
      "# HELP x_total Things.\n# TYPE x_total counter\n"
      "x_total{a=\"1\",b=\"q\\\"u\\\\o\\nte\",} 3 1700000000000\n");
  ASSERT_EQ(e.samples.size(), 1u);
  const PromSample& s = e.samples[0];
  EXPECT_EQ(s.name, "x_total");
  ASSERT_EQ(s.labels.size(), 2u);
  EXPECT_EQ(s.labels[1].second, "q\"u\\o\nte");
  EXPECT_EQ(s.value, 3);
  EXPECT_EQ(s.timestamp_ms, 1700000000000);
  EXPECT_EQ(e.help.at("x_total"), "Things.");
  EXPECT_EQ(e.type.at("x_total"), "counter");
  EXPECT_EQ(e.skipped_lines, 0);
}

TEST(Prometheus, ScientificNaNAndInf) {
  PromExposition e = parse_prometheus("a 1.5e+09\nb NaN\nc +Inf\nd -Inf\ne 2E-3\nf +7\n");
  ASSERT_EQ(e.samples.size(), 6u);
  EXPECT_DOUBLE_EQ(e.samples[0].value, 1.5e9);
  EXPECT_TRUE(std::isnan(e.samples[1].value));
  EXPECT_TRUE(std::isinf(e.samples[2].value) && e.samples[2].value > 0);
  EXPECT_TRUE(std::isinf(e.samples[3].value) && e.samples[3].value < 0);
  EXPECT_DOUBLE_EQ(e.samples[4].value, 0.002);
  EXPECT_DOUBLE_EQ(e.samples[5].value, 7);
}

TEST(Prometheus, GarbageLinesSkippedAndCounted) {
  PromExposition e = parse_prometheus(
      "<html>oops</html>\nok 1\nbad{a=\"unterminated} 1\nnovalue\nx 1 notatime\n\n  \r\n"
      "# just a comment\n#HELP\n");
  ASSERT_EQ(e.samples.size(), 1u);
  EXPECT_EQ(e.samples[0].name, "ok");
  EXPECT_EQ(e.skipped_lines, 4);
}

TEST(Prometheus, SumOverLabelSetsSkipsNaN) {
  PromExposition e = parse_prometheus("m{x=\"1\"} 2\nm{x=\"2\"} 3\nm{x=\"3\"} NaN\nn 1\n");
  EXPECT_EQ(e.sum("m"), 5.0);
  EXPECT_EQ(e.sum("absent"), std::nullopt);
}

TEST(Prometheus, VllmV0ModelNameLabel) {
  PromExposition e = parse_prometheus(fixture("vllm-metrics-v0.prom"));
  EXPECT_EQ(e.skipped_lines, 0);
  EXPECT_EQ(e.sum("vllm:num_requests_running"), 0.0);
  EXPECT_EQ(e.sum("vllm:num_requests_waiting"), 2.0);
  EXPECT_EQ(busy_from_metrics(e, {"vllm:num_requests_running", "vllm:num_requests_waiting"}), true);
  EXPECT_DOUBLE_EQ(*e.sum("process_max_fds"), 1048576);
}

TEST(Prometheus, VllmV1EngineLabelsSummedAcrossEngines) {
  PromExposition e = parse_prometheus(fixture("vllm-metrics-v1-engines.prom"));
  EXPECT_EQ(e.sum("vllm:num_requests_running"), 5.0);
  EXPECT_EQ(e.sum("vllm:num_requests_waiting"), 3.0);
  EXPECT_EQ(sum_metrics(e, {"vllm:num_requests_running", "vllm:num_requests_waiting"}), 8.0);
}

TEST(Prometheus, HelpAndTypeWithoutSamplesIsUnknownNotIdle) {
  PromExposition e = parse_prometheus(fixture("vllm-metrics-help-only.prom"));
  EXPECT_TRUE(e.samples.empty());
  EXPECT_TRUE(e.declared("vllm:num_requests_running"));
  EXPECT_EQ(e.sum("vllm:num_requests_running"), std::nullopt);
  EXPECT_EQ(busy_from_metrics(e, {"vllm:num_requests_running", "vllm:num_requests_waiting"}),
            std::nullopt);
}

TEST(Prometheus, TritonPendingCount) {
  PromExposition e = parse_prometheus(fixture("triton-metrics.prom"));
  EXPECT_EQ(e.sum("nv_inference_pending_request_count"), 2.0);
  EXPECT_DOUBLE_EQ(*e.sum("nv_gpu_memory_used_bytes"), 4.096e9);
}

TEST(Prometheus, CrLfLineEndings) {
  PromExposition e = parse_prometheus("# TYPE a gauge\r\na 1\r\nb{l=\"v\"} 2\r\n");
  EXPECT_EQ(e.samples.size(), 2u);
  EXPECT_EQ(e.skipped_lines, 0);
  EXPECT_EQ(e.type.at("a"), "gauge");
}

}  // namespace prometheus_test
}  // namespace vramd
