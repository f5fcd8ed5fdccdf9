#include "services/parsers.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include "test_paths.h"

namespace vramd {
namespace {

using nlohmann::json;

json fixture(const std::string& name) {
  std::ifstream in(vramd::test_paths::source_dir() + "/tests/fixtures/services/" + name);
  std::stringstream ss;
  ss << in.rdbuf();
  return json::parse(ss.str());
}

TEST(ComfyUiParse, QueueBusyAndIdle) {
  Result<ComfyQueue> busy = parse_comfyui_queue(fixture("comfyui-queue-busy.json"));
  ASSERT_TRUE(busy.ok()) << busy.error();
  EXPECT_EQ(busy->running, 1);
  EXPECT_EQ(busy->pending, 2);
  Result<ComfyQueue> idle = parse_comfyui_queue(fixture("comfyui-queue-idle.json"));
  ASSERT_TRUE(idle.ok());
  EXPECT_EQ(idle->running + idle->pending, 0);
  EXPECT_FALSE(parse_comfyui_queue(json{{"queue_running", 3}}).ok());
  EXPECT_FALSE(parse_comfyui_queue(json::array()).ok());
}

TEST(ComfyUiParse, SystemStatsOldMiddleNew) {
  Result<ComfyStats> old_format =
      parse_comfyui_system_stats(fixture("comfyui-system-stats-old.json"));
  ASSERT_TRUE(old_format.ok()) << old_format.error();
  EXPECT_EQ(old_format->torch_vram_total, Bytes{104857600});
  EXPECT_EQ(old_format->ram_total, std::nullopt);
  EXPECT_EQ(old_format->version, "");

  Result<ComfyStats> middle =
      parse_comfyui_system_stats(fixture("comfyui-system-stats-middle.json"));
  ASSERT_TRUE(middle.ok());
  EXPECT_EQ(middle->torch_vram_total, Bytes{67108864});
  EXPECT_EQ(middle->ram_total, Bytes{67108864000});
  EXPECT_EQ(middle->version, "v0.3.10-12-gabcdef0");

  Result<ComfyStats> now = parse_comfyui_system_stats(fixture("comfyui-system-stats-new.json"));
  ASSERT_TRUE(now.ok());
  EXPECT_EQ(now->torch_vram_total, Bytes{0});  // before any model loads, and under cudaMallocAsync
  EXPECT_EQ(now->version, "0.3.66");

  EXPECT_FALSE(parse_comfyui_system_stats(json{{"devices", json::array()}}).ok());
}

TEST(OllamaParse, PsWithOffsetsAndNanoseconds) {
  Result<std::vector<OllamaModel>> ps = parse_ollama_ps(fixture("ollama-ps-two.json"));
  ASSERT_TRUE(ps.ok()) << ps.error();
  ASSERT_EQ(ps->size(), 2u);
  EXPECT_EQ((*ps)[0].name, "qwen2.5:7b");
  EXPECT_EQ((*ps)[0].size, Bytes{6000000000});
  EXPECT_EQ((*ps)[0].size_vram, Bytes{4000000000});  // partly on CPU
  ASSERT_TRUE((*ps)[0].expires_at.has_value());
  // 10:05:00.123456789+01:00 is 09:05:00.123Z.
  EXPECT_EQ(format_rfc3339(*(*ps)[0].expires_at), "2025-03-01T09:05:00.123Z");
  ASSERT_TRUE((*ps)[1].expires_at.has_value());
  EXPECT_EQ(format_rfc3339(*(*ps)[1].expires_at), "2025-03-01T09:00:00.500Z");
  Result<std::vector<OllamaModel>> empty = parse_ollama_ps(fixture("ollama-ps-empty.json"));
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
  EXPECT_TRUE(parse_ollama_ps(json{{"models", nullptr}}).ok());
  EXPECT_FALSE(parse_ollama_ps(json{{"model", "x"}}).ok());
}

TEST(A1111Parse, ProgressJobCount) {
  EXPECT_EQ(parse_a1111_progress(fixture("a1111-progress-busy.json")).value(), true);
  EXPECT_EQ(parse_a1111_progress(fixture("a1111-progress-idle.json")).value(), false);
  EXPECT_FALSE(parse_a1111_progress(json{{"progress", 0}}).ok());
}

TEST(A1111Parse, MemoryReservedAndRss) {
  Result<A1111Memory> m = parse_a1111_memory(fixture("a1111-memory.json"));
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->cuda_reserved, Bytes{8000000000});
  EXPECT_EQ(m->ram_used, Bytes{9000000000});
}

TEST(TextgenParse, ModelInfo) {
  EXPECT_EQ(parse_textgen_model_info(fixture("textgen-model-info.json")).value(),
            std::optional<std::string>("Qwen2.5-7B-Instruct-exl2"));
  EXPECT_EQ(parse_textgen_model_info(fixture("textgen-model-info-none.json")).value(),
            std::nullopt);
}

TEST(TabbyParse, ModelAndHealth) {
  EXPECT_EQ(parse_tabby_model(fixture("tabbyapi-model.json")).value(),
            std::optional<std::string>("Qwen2.5-7B-Instruct-exl2"));
  auto h = parse_tabby_health(fixture("tabbyapi-health-unhealthy.json"));
  ASSERT_TRUE(h.ok());
  EXPECT_FALSE(h->first);
  EXPECT_NE(h->second.find("CUDA error"), std::string::npos);
  EXPECT_TRUE(parse_tabby_health(json{{"status", "healthy"}}).value().first);
}

TEST(LlamaCppParse, SlotsAndHealth) {
  EXPECT_EQ(parse_llamacpp_slots(fixture("llamacpp-slots.json")).value(), true);
  EXPECT_EQ(parse_llamacpp_slots(json::parse(R"([{"id":0,"is_processing":false}])")).value(),
            false);
  EXPECT_EQ(parse_llamacpp_slots(json::parse(R"([{"id":0,"state":1}])")).value(), true);
  EXPECT_FALSE(parse_llamacpp_slots(json::object()).ok());
  EXPECT_EQ(llamacpp_error_message(fixture("llamacpp-health-loading.json").dump()),
            "Loading model");
  EXPECT_EQ(llamacpp_error_message(fixture("llamacpp-health-ok.json").dump()), "");
}

TEST(LlamaCppParse, RouterModels) {
  json router = json::parse(R"({"data":[{"id":"a","status":{"value":"loaded"}},
                                        {"id":"b","status":{"value":"unloaded"}}]})");
  EXPECT_EQ(parse_llamacpp_models(router).value(), std::vector<std::string>{"a"});
  json plain = json::parse(R"({"object":"list","data":[{"id":"m.gguf","object":"model"}]})");
  EXPECT_EQ(parse_llamacpp_models(plain).value(), std::vector<std::string>{"m.gguf"});
}

TEST(TritonParse, IndexReadyOnly) {
  EXPECT_EQ(parse_triton_index(fixture("triton-index.json")).value(),
            std::vector<std::string>{"densenet_onnx"});
}

TEST(LocalAiParse, Monitor) {
  Result<LocalAiMonitor> m = parse_localai_monitor(fixture("localai-monitor-busy.json"));
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->state, 1);
  EXPECT_EQ(m->memory_total, Bytes{5000000000});
}

// Found by fuzz_service_parsers: a byte count past 2^64 was cast to Bytes anyway (UB).
TEST(ComfyUiParse, ASizePast64BitsIsNoSize) {
  auto j = json::parse(R"({"system":{"ram_total":3.3e73},"devices":[]})");
  auto s = parse_comfyui_system_stats(j);
  ASSERT_TRUE(s.ok());
  EXPECT_FALSE(s->ram_total.has_value());
}

// Found by fuzz_service_parsers: a state too large for int was converted anyway (UB).
TEST(LocalAiParse, AStateOutsideIntIsAShapeErrorNotUndefinedBehaviour) {
  EXPECT_FALSE(parse_localai_monitor(json::parse(R"({"state": 8.8e78})")).ok());
  EXPECT_FALSE(parse_localai_monitor(json::parse(R"({"state": 4294967296})")).ok());
  EXPECT_FALSE(parse_localai_monitor(json::parse(R"({"state": 1.5})")).ok());
  EXPECT_EQ(parse_localai_monitor(json::parse(R"({"state": -1})")).value().state, -1);
  EXPECT_EQ(parse_localai_monitor(json::parse(R"({"state": 2.0})")).value().state, 2);
  EXPECT_EQ(parse_llamacpp_slots(json::parse(R"([{"id":0,"state":8.8e78}])")).value(), true);
}

TEST(SpeachesParse, Ps) {
  EXPECT_EQ(parse_speaches_ps(fixture("speaches-ps.json")).value(),
            (std::vector<std::string>{"Systran/faster-whisper-small",
                                      "speaches-ai/Kokoro-82M-v1.0-ONNX"}));
}

TEST(GenericParse, BusyAtPointer) {
  json j = json::parse(R"({"q":{"running":[1],"pending":[],"n":0,"m":2,"b":true,"s":""}})");
  EXPECT_EQ(busy_at_pointer(j, "/q/running").value(), true);
  EXPECT_EQ(busy_at_pointer(j, "/q/pending").value(), false);
  EXPECT_EQ(busy_at_pointer(j, "/q/n").value(), false);
  EXPECT_EQ(busy_at_pointer(j, "/q/m").value(), true);
  EXPECT_EQ(busy_at_pointer(j, "/q/b").value(), true);
  EXPECT_EQ(busy_at_pointer(j, "/q/s").value(), false);
  EXPECT_FALSE(busy_at_pointer(j, "/q/absent").ok());
  EXPECT_FALSE(busy_at_pointer(j, "no-slash").ok());
  // Found by fuzz_service_parsers: nlohmann's contains() throws on an array index that is no
  // number ("" here, "/01"); the server's answer is then "nothing there", not an exception.
  EXPECT_FALSE(busy_at_pointer(json::array(), "/").ok());
  EXPECT_FALSE(busy_at_pointer(json::parse("[[1]]"), "/01").ok());
  EXPECT_EQ(busy_at_pointer(json::parse("[[1]]"), "/0").value(), true);
}

}  // namespace
}  // namespace vramd
