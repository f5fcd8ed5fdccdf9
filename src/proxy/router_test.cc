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
