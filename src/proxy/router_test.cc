#include "proxy/router.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace vramd {
namespace {

ModelTable table() {
  return ModelTable({{"llama3.1:8b", "ollama"}, {"qwen", "vllm"}, {"qwen", "sglang"}},
                    {{"gpt-4o-mini", "llama3.1:8b"}, {"dangling", "nothing"}});
}

TEST(ModelTable, FindsExactAliasAndOllamaLatest) {
  ModelTable t =
      ModelTable({{"llama3.1:8b", "ollama"}, {"phi3:latest", "ollama"}, {"qwen", "vllm"}},
                 {{"gpt-4o-mini", "llama3.1:8b"}});
  EXPECT_EQ(t.find("qwen")->service, "vllm");
  EXPECT_EQ(t.find("gpt-4o-mini")->model, "llama3.1:8b");
  EXPECT_EQ(t.find("phi3")->model, "phi3:latest");
  EXPECT_EQ(t.find("qwen:latest")->model, "qwen");
  EXPECT_FALSE(t.find("llama3.1"));
  EXPECT_FALSE(t.find(""));
}

TEST(ModelTable, TheFirstServiceOfAModelWins) { EXPECT_EQ(table().find("qwen")->service, "vllm"); }

TEST(ModelTable, KnownSkipsAliasesToNothing) {
  EXPECT_EQ(table().known(), (std::vector<std::string>{"gpt-4o-mini", "llama3.1:8b", "qwen"}));
}

TEST(ModelTable, OpenAiListNamesTheOwner) {
  auto j = nlohmann::json::parse(table().openai_list());
  EXPECT_EQ(j["object"], "list");
  ASSERT_EQ(j["data"].size(), 3u);
  EXPECT_EQ(j["data"][1]["id"], "qwen");
  EXPECT_EQ(j["data"][1]["owned_by"], "vllm");
  EXPECT_EQ(j["data"][2]["id"], "gpt-4o-mini");
  EXPECT_EQ(j["data"][2]["owned_by"], "ollama");
}

// Issue 46: /api/tags listed llama.cpp's and vLLM's models, whose servers answer /api/chat 404.
TEST(ModelTable, OllamasPathsListAndReachOnlyServicesThatServeOllamasApi) {
  ModelTable t({{"llama3.1:8b", "ollama", true}, {"qwen", "vllm"}, {"/m/tiny.gguf", "llamacpp"}},
               {{"gpt-4o-mini", "llama3.1:8b"}, {"tiny", "/m/tiny.gguf"}});
  auto tags = nlohmann::json::parse(t.ollama_tags());
  ASSERT_EQ(tags["models"].size(), 1u) << tags.dump();
  EXPECT_EQ(tags["models"][0]["name"], "llama3.1:8b");
  EXPECT_EQ(t.find_for("/api/chat", "llama3.1:8b").value_or(Route{}).service, "ollama");
  EXPECT_EQ(t.find_for("/api/chat", "gpt-4o-mini")->model, "llama3.1:8b");
  EXPECT_FALSE(t.find_for("/api/chat", "qwen"));
  EXPECT_FALSE(t.find_for("/api/generate", "tiny"));
  // The OpenAI paths reach every service, Ollama's too.
  EXPECT_EQ(t.find_for("/v1/chat/completions", "qwen")->service, "vllm");
  EXPECT_EQ(t.find_for("/v1/chat/completions", "tiny")->model, "/m/tiny.gguf");
  EXPECT_EQ(t.find_for("/v1/completions", "llama3.1:8b")->service, "ollama");
  EXPECT_EQ(nlohmann::json::parse(t.openai_list())["data"].size(), 5u);
}

TEST(RequestModel, JsonAndMultipart) {
  EXPECT_EQ(request_model("application/json", R"({"model":"m","x":1})"), "m");
  EXPECT_FALSE(request_model("application/json", R"({"model":3})"));
  EXPECT_FALSE(request_model("application/json", "not json"));
  EXPECT_FALSE(request_model("application/json", "[]"));
  std::string form =
      "--b1\r\nContent-Disposition: form-data; name=\"file\"; filename=\"x\"\r\n\r\n"
      "model=nope\r\n--b1\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\n"
      "whisper-1\r\n--b1--\r\n";
  EXPECT_EQ(request_model("multipart/form-data; boundary=b1", form), "whisper-1");
  EXPECT_EQ(request_model("Multipart/Form-Data; boundary=\"b1\"", form), "whisper-1");
  EXPECT_FALSE(request_model("multipart/form-data; boundary=zz", form));
  EXPECT_FALSE(request_model("multipart/form-data", form));
}

TEST(RequestModel, StreamFlag) {
  EXPECT_TRUE(body_wants_stream("application/json", R"({"stream":true})"));
  EXPECT_FALSE(body_wants_stream("application/json", R"({"stream":"yes"})"));
  EXPECT_FALSE(body_wants_stream("application/json", R"({})"));
}

TEST(RoutedPaths, TheOpenAiAndOllamaOnes) {
  EXPECT_TRUE(is_routed_path("/v1/chat/completions"));
  EXPECT_TRUE(is_routed_path("/api/embed"));
  EXPECT_FALSE(is_routed_path("/v1/status"));
  EXPECT_FALSE(is_routed_path("/v1/models"));
}

}  // namespace
}  // namespace vramd
