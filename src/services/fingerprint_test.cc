// Each kind's fingerprint against answers shaped like the real servers' (and the fakes').
#include "services/fingerprint.h"

#include <gtest/gtest.h>

namespace vramd {
namespace {

using Answers = std::map<std::string, ProbeAnswer>;

std::string kind(const Answers& a) {
  auto f = identify_server(a);
  return f ? f->kind : "";
}

TEST(Fingerprint, EachKindByItsOwnAnswer) {
  EXPECT_EQ(kind({{"/system_stats", {200, R"({"system":{"os":"posix"},"devices":[]})"}}}), "comfyui");
  EXPECT_EQ(kind({{"/", {200, "Ollama is running"}}, {"/api/ps", {200, R"({"models":[]})"}}}),
            "ollama");
  EXPECT_EQ(kind({{"/sdapi/v1/options", {200, R"({"sd_model_checkpoint":null})"}}}), "a1111");
  EXPECT_EQ(kind({{"/v1/internal/model/info", {200, R"({"model_name":"None","lora_names":[]})"}}}),
            "textgen");
  EXPECT_EQ(kind({{"/get_model_info", {200, R"({"model_path":"Qwen/Qwen2.5-7B"})"}}}), "sglang");
  EXPECT_EQ(kind({{"/metrics", {200, "# HELP vllm:num_requests_running Number\nvllm:num_requests_running{model_name=\"m\"} 0.0\n"}}}),
            "vllm");
  EXPECT_EQ(kind({{"/metrics", {200, "llamacpp:requests_processing 0\n"}}}), "llamacpp");
  EXPECT_EQ(kind({{"/slots", {200, R"([{"id":0,"is_processing":false}])"}}}), "llamacpp");
  EXPECT_EQ(kind({{"/v2", {200, R"({"name":"triton","version":"2.41.0"})"}}}), "triton");
  EXPECT_EQ(kind({{"/metrics", {200, "nv_inference_pending_request_count{model=\"m\"} 0\n"}}}), "triton");
  EXPECT_EQ(kind({{"/health", {200, R"({"status":"healthy","issues":[]})"}}}), "tabbyapi");
  EXPECT_EQ(kind({{"/health", {200, "OK"}}, {"/api/ps", {200, R"({"models":["Systran/faster-whisper-small"]})"}}}),
            "speaches");
  EXPECT_EQ(kind({{"/readyz", {200, "OK"}}, {"/v1/models", {200, R"({"object":"list","data":[]})"}}}),
            "localai");
}

TEST(Fingerprint, LookalikesAndGarbageAreNotServers) {
  EXPECT_EQ(kind({}), "");
  // A plain web server: 200 everywhere with HTML.
  Answers html;
  for (const auto& p : fingerprint_paths()) html[p] = {200, "<html>hello</html>"};
  EXPECT_EQ(kind(html), "");
  // The right path but an error status, or the wrong shape.
  EXPECT_EQ(kind({{"/system_stats", {404, R"({"system":{},"devices":[]})"}}}), "");
  EXPECT_EQ(kind({{"/system_stats", {200, R"({"system":{}})"}}}), "");
  EXPECT_EQ(kind({{"/metrics", {200, "my_vllm:thing 1\n"}}}), "") << "a family name starts a line";
  EXPECT_EQ(kind({{"/health", {200, R"({"status":"ok"})"}}}), "") << "generic health is no tabbyapi";
  // Ollama answers /api/ps too: "/" tells it from speaches.
  EXPECT_EQ(kind({{"/", {200, "Ollama is running"}}, {"/api/ps", {200, R"({"models":[]})"}}}), "ollama");
}

}  // namespace
}  // namespace vramd
