// Each kind's fingerprint against answers shaped like the real servers' (and the fakes').
#include "services/fingerprint.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "services/parsers.h"
#include "test_paths.h"

namespace vramd {
namespace {

using Answers = std::map<std::string, ProbeAnswer>;

// A captured answer of the real llama-server b4748 (tests/fixtures/llamacpp-b4748/README.md):
// its status and body.
ProbeAnswer b4748(const std::string& name) {
  std::ifstream in(vramd::test_paths::source_dir() + "/tests/fixtures/llamacpp-b4748/" + name,
                   std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string raw = ss.str();
  size_t body = raw.find("\r\n\r\n");
  if (raw.rfind("HTTP/1.1 ", 0) != 0 || body == std::string::npos) return {};
  return {static_cast<unsigned>(std::stoul(raw.substr(9, 3))), raw.substr(body + 4)};
}

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

// Issue 46: llama-server b4747 with its default flags, as it answers (examples/server/server.cpp:
// handle_slots and handle_metrics without --slots/--metrics, handle_props, handle_models).
TEST(Fingerprint, APlainLlamaServerWithDefaultFlags) {
  const std::string slots_off =
      R"({"error":{"code":501,"message":"This server does not support slots endpoint. Start it with `--slots`","type":"not_supported_error"}})";
  const std::string metrics_off =
      R"({"error":{"code":501,"message":"This server does not support metrics endpoint. Start it with `--metrics`","type":"not_supported_error"}})";
  const std::string not_found =
      R"({"error":{"code":404,"message":"File Not Found","type":"not_found_error"}})";
  const std::string props =
      R"({"default_generation_settings":{"id":0,"id_task":-1,"n_ctx":4096,"is_processing":false},)"
      R"("total_slots":1,"model_path":"/m/tiny.gguf","chat_template":"","bos_token":"<s>",)"
      R"("eos_token":"</s>","build_info":"b4748-a8b1f8a"})";
  const std::string models =
      R"({"object":"list","data":[{"id":"/m/tiny.gguf","object":"model","created":1740000000,)"
      R"("owned_by":"llamacpp","meta":{"vocab_type":2,"n_vocab":32000,"n_ctx_train":2048,)"
      R"("n_embd":64,"n_params":4620000,"size":9310000}}]})";
  Answers a = {{"/system_stats", {404, not_found}},
               {"/", {200, "<!DOCTYPE html><html>"}},
               {"/metrics", {501, metrics_off}},
               {"/slots", {501, slots_off}},
               {"/props", {200, props}},
               {"/health", {200, R"({"status":"ok"})"}},
               {"/v1/models", {200, models}},
               {"/readyz", {404, not_found}}};
  auto f = identify_server(a);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->kind, "llamacpp");
  EXPECT_EQ(f->evidence, "GET /props: default_generation_settings, total_slots");
  a.erase("/props");  // /v1/models alone tells it too
  EXPECT_EQ(kind(a), "llamacpp");
  // While its model loads, every path answers 503 "Loading model".
  const std::string loading =
      R"({"error":{"code":503,"message":"Loading model","type":"unavailable_error"}})";
  Answers l;
  for (const auto& p : fingerprint_paths()) l[p] = {503, loading};
  EXPECT_EQ(kind(l), "llamacpp");
  // A 503 health of another shape is not llama.cpp; nor are models owned by someone else.
  EXPECT_EQ(kind({{"/health", {503, R"({"error":"starting"})"}}}), "");
  EXPECT_EQ(kind({{"/v1/models", {200, R"({"data":[{"id":"m","owned_by":"vllm"}]})"}}}), "");
  EXPECT_EQ(kind({{"/v1/models", {200, R"({"data":[{"id":"m","owned_by":7}]})"}}}), "");
}

// The same against what a real llama-server b4748 with default flags sent (its bytes kept in
// tests/fixtures/llamacpp-b4748), and what its adapter reads from them.
TEST(Fingerprint, TheRealLlamaServerB4748WithDefaultFlags) {
  Answers a = {{"/system_stats", b4748("not-found.http")},
               {"/", b4748("root-no-gzip.http")},
               {"/metrics", b4748("metrics-disabled.http")},
               {"/slots", b4748("slots-disabled.http")},
               {"/props", b4748("props.http")},
               {"/health", b4748("health.http")},
               {"/v1/models", b4748("v1-models.http")},
               {"/readyz", b4748("not-found.http")}};
  ASSERT_EQ(a["/slots"].status, 501u) << "fixture not read";
  ASSERT_EQ(a["/props"].status, 200u);
  auto f = identify_server(a);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->kind, "llamacpp");
  EXPECT_EQ(f->evidence, "GET /props: default_generation_settings, total_slots");
  Answers loading;
  for (const auto& p : fingerprint_paths()) loading[p] = b4748("health-loading.http");
  EXPECT_EQ(kind(loading), "llamacpp");
  // What the adapter reads: its one model (the -m path), its build, the 503's message, and
  // busy from /slots where --slots is given.
  auto models = parse_llamacpp_models(nlohmann::json::parse(a["/v1/models"].body));
  ASSERT_TRUE(models.ok()) << models.error();
  EXPECT_EQ(*models, std::vector<std::string>{"/tmp/llama-models/tiny.gguf"});
  EXPECT_EQ(llamacpp_error_message(b4748("health-loading.http").body), "Loading model");
  Result<bool> idle = parse_llamacpp_slots(nlohmann::json::parse(b4748("slots.http").body));
  Result<bool> busy = parse_llamacpp_slots(nlohmann::json::parse(b4748("slots-busy.http").body));
  ASSERT_TRUE(idle.ok() && busy.ok());
  EXPECT_FALSE(idle.value());
  EXPECT_TRUE(busy.value());
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
