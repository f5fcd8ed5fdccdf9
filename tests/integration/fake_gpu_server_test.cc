// The fake GPU servers (tests/fakes): each holds its bytes in the test GPU's state file and frees
// them through its kind's own unload call, with the faults tests need.
#include <fstream>
#include <optional>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/client.h"
#include "integration/test_util.h"
#include "testgpu/fake_gpu_state.h"

namespace vramd {
namespace {

using nlohmann::json;
using testing::Child;
using testing::eventually;
using testing::TempDir;

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// One fake-gpu-server process on a 24 GiB test GPU of its own.
class FakeServer {
 public:
  FakeServer(const std::string& kind, std::vector<std::string> extra = {}) {
    state_ = dir_.file("state.json");
    EXPECT_TRUE(write_fake_gpu_state(state_, make_fake_gpu_state({{"NVIDIA GeForce RTX 3090",
                                                                    24 * GiB}})));
    port_ = testing::free_port();
    std::vector<std::string> argv = {testing::build_dir() + "/fake-gpu-server", "--kind", kind,
                                     "--port", std::to_string(port_), "--state", state_};
    argv.insert(argv.end(), extra.begin(), extra.end());
    log_ = dir_.file("out.log");
    child_ = std::make_unique<Child>(argv, std::vector<std::string>{}, log_);
  }

  bool wait_ready() {
    return eventually([&] { return read_text(log_).find("ready " + std::to_string(port_)) !=
                                   std::string::npos; });
  }
  Result<DaemonReply> call(const std::string& method, const std::string& target,
                         const std::string& body = "", int timeout_ms = 3000) {
    return http_request({"http://127.0.0.1:" + std::to_string(port_)}, method, target, body,
                        timeout_ms);
  }
  json get_json(const std::string& target) {
    auto r = call("GET", target);
    if (!r) return json();
    return json::parse(r->body, nullptr, false);
  }
  // The bytes the state file lists for this server's pid; nullopt when it is not listed,
  // json null (N/A) as -1.
  std::optional<long long> listed_bytes() {
    auto state = read_fake_gpu_state(state_);
    if (!state) return std::nullopt;
    for (const auto& p : (*state)["gpus"][0]["processes"]) {
      if (p.value("pid", -1) != child_->pid()) continue;
      if (p["used"].is_null()) return -1;
      return p["used"].get<long long>();
    }
    return std::nullopt;
  }
  Bytes card_used() {
    auto state = read_fake_gpu_state(state_);
    return state ? (*state)["gpus"][0].value("used", Bytes{0}) : 0;
  }

  Child& child() { return *child_; }
  const std::string& log() const { return log_; }

 private:
  TempDir dir_;
  std::string state_;
  std::string log_;
  int port_ = 0;
  std::unique_ptr<Child> child_;
};

TEST(FakeGpuServer, ComfyuiHoldsItsBytesAndFreeReleasesThem) {
  FakeServer s("comfyui", {"--model-bytes", "4GiB"});
  ASSERT_TRUE(s.wait_ready()) << read_text(s.log());
  EXPECT_EQ(s.listed_bytes(), static_cast<long long>(4 * GiB));
  EXPECT_EQ(s.card_used(), 4 * GiB);

  json stats = s.get_json("/system_stats");
  ASSERT_TRUE(stats.contains("devices")) << stats.dump();
  const auto& dev = stats["devices"][0];
  EXPECT_EQ(dev["vram_total"].get<Bytes>(), 24 * GiB);
  EXPECT_EQ(dev["vram_free"].get<Bytes>(), 20 * GiB);
  EXPECT_LT(dev["torch_vram_total"].get<Bytes>(), 200 * MiB);  // cudaMallocAsync: near 0.1 GB
  EXPECT_EQ(s.get_json("/api/system_stats")["devices"][0]["vram_total"], dev["vram_total"]);

  auto r = s.call("POST", "/free", R"({"unload_models":true,"free_memory":true})");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200u);
  EXPECT_EQ(r->body, "");
  EXPECT_EQ(s.listed_bytes(), std::nullopt);
  EXPECT_EQ(s.card_used(), 0u);
  json fake = s.get_json("/fake/state");
  EXPECT_EQ(fake["loaded"], false);
  EXPECT_EQ(fake["unload_calls"], 1);
  EXPECT_EQ(fake["last_unload_body"]["unload_models"], true);

  // A prompt brings the model back and keeps the queue running for --busy-for.
  auto r1 = s.call("POST", "/prompt", R"({"prompt":{"3":{"class_type":"KSampler"}}})");
  ASSERT_TRUE(r1);
  EXPECT_EQ(r1->status, 200u);
  EXPECT_TRUE(json::parse(r1->body).contains("prompt_id"));
  EXPECT_EQ(s.listed_bytes(), static_cast<long long>(4 * GiB));
  EXPECT_EQ(s.get_json("/queue")["queue_running"].size(), 1u);
  EXPECT_EQ(s.get_json("/prompt")["exec_info"]["queue_remaining"], 1);
  EXPECT_EQ(s.call("GET", "/nope")->status, 404u);
}

TEST(FakeGpuServer, ComfyuiQueueEmptiesAfterBusyFor) {
  FakeServer s("comfyui", {"--busy-for", "300ms"});
  ASSERT_TRUE(s.wait_ready());
  EXPECT_EQ(s.get_json("/queue")["queue_running"].size(), 0u);
  ASSERT_TRUE(s.call("POST", "/fake/busy?for=300ms"));
  EXPECT_EQ(s.get_json("/queue")["queue_running"].size(), 1u);
  EXPECT_TRUE(eventually([&] { return s.get_json("/queue")["queue_running"].empty(); },
                         std::chrono::seconds(3)));
}

TEST(FakeGpuServer, OllamaKeepAliveZeroUnloadsAfterTheDelay) {
  FakeServer s("ollama", {"--model-bytes", "2GiB", "--unload-delay", "400ms"});
  ASSERT_TRUE(s.wait_ready());
  json ps = s.get_json("/api/ps");
  ASSERT_EQ(ps["models"].size(), 1u) << ps.dump();
  EXPECT_EQ(ps["models"][0]["name"], "llama3.2:latest");
  EXPECT_EQ(ps["models"][0]["size_vram"].get<Bytes>(), 2 * GiB);

  auto r = s.call("POST", "/api/generate", R"({"model":"llama3.2:latest","keep_alive":0})");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200u);
  json body = json::parse(r->body);
  EXPECT_EQ(body["done_reason"], "unload");
  EXPECT_EQ(body["done"], true);
  EXPECT_EQ(body["response"], "");
  // The answer comes before the memory leaves.
  EXPECT_EQ(s.listed_bytes(), static_cast<long long>(2 * GiB));
  EXPECT_TRUE(eventually([&] { return !s.listed_bytes().has_value(); }, std::chrono::seconds(3)));
  EXPECT_TRUE(s.get_json("/api/ps")["models"].empty());

  // Unloading again answers the same and changes nothing; a prompt loads it back.
  auto r2 = s.call("POST", "/api/chat", R"({"model":"llama3.2","messages":[],"keep_alive":0})");
  ASSERT_TRUE(r2);
  EXPECT_EQ(json::parse(r2->body)["done_reason"], "unload");
  auto r3 = s.call("POST", "/api/generate", R"({"model":"llama3.2","prompt":"hi","stream":false})");
  ASSERT_TRUE(r3);
  EXPECT_EQ(json::parse(r3->body)["done"], true);
  EXPECT_EQ(s.listed_bytes(), static_cast<long long>(2 * GiB));
  EXPECT_EQ(s.get_json("/fake/state")["busy"], true);
  EXPECT_EQ(s.call("GET", "/")->body, "Ollama is running");
}

TEST(FakeGpuServer, VllmSleepWithPartialLeavesHalf) {
  FakeServer s("vllm", {"--model-bytes", "8GiB", "--partial", "50"});
  ASSERT_TRUE(s.wait_ready());
  auto metrics = s.call("GET", "/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("vllm:num_requests_running{engine=\"0\",model_name=\"Qwen/Qwen2.5-7B-Instruct\"} 0.0"),
            std::string::npos)
      << metrics->body;
  auto r = s.call("POST", "/sleep?level=1");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200u);
  EXPECT_EQ(s.listed_bytes(), static_cast<long long>(4 * GiB));
  EXPECT_EQ(s.get_json("/is_sleeping")["is_sleeping"], true);
  ASSERT_TRUE(s.call("POST", "/wake_up"));
  EXPECT_EQ(s.listed_bytes(), static_cast<long long>(8 * GiB));
  EXPECT_EQ(s.get_json("/fake/state")["reload_calls"], 1);
  ASSERT_TRUE(s.call("POST", "/v1/completions", R"({"model":"x","prompt":"hi"})"));
  EXPECT_NE(s.call("GET", "/metrics")->body.find("} 1.0"), std::string::npos);
}

TEST(FakeGpuServer, IgnoreUnloadAnswersAndFreesNothing) {
  FakeServer s("vllm", {"--model-bytes", "8GiB", "--ignore-unload"});
  ASSERT_TRUE(s.wait_ready());
  auto r = s.call("POST", "/sleep?level=2");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200u);
  EXPECT_EQ(s.listed_bytes(), static_cast<long long>(8 * GiB));
  EXPECT_EQ(s.get_json("/fake/state")["unload_calls"], 1);
}

TEST(FakeGpuServer, NaProcessStillFillsTheCard) {
  FakeServer s("comfyui", {"--model-bytes", "3GiB", "--na"});
  ASSERT_TRUE(s.wait_ready());
  EXPECT_EQ(s.listed_bytes(), -1);
  EXPECT_EQ(s.card_used(), 3 * GiB);
  ASSERT_TRUE(s.call("POST", "/free", R"({"unload_models":true})"));
  EXPECT_EQ(s.card_used(), 0u);
}

TEST(FakeGpuServer, HangAnswersNothingAtAll) {
  FakeServer s("comfyui", {"--hang"});
  ASSERT_TRUE(s.wait_ready());
  EXPECT_FALSE(s.call("GET", "/queue", "", 300));
  EXPECT_FALSE(s.call("GET", "/fake/state", "", 300));
  EXPECT_EQ(s.child().wait_exit(std::chrono::milliseconds(50)), -1);  // still alive
}

TEST(FakeGpuServer, CrashOnUnloadExitsAndTheDriverFreesItsMemory) {
  FakeServer s("ollama", {"--crash-on-unload"});
  ASSERT_TRUE(s.wait_ready());
  ASSERT_TRUE(s.listed_bytes().has_value());
  EXPECT_FALSE(s.call("POST", "/api/generate", R"({"model":"llama3.2","keep_alive":0})"));
  int status = s.child().wait_exit(std::chrono::seconds(3));
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 1);
  EXPECT_EQ(s.card_used(), 0u);
}

TEST(FakeGpuServer, SigtermTakesItsProcessOffTheState) {
  FakeServer s("sglang");
  ASSERT_TRUE(s.wait_ready());
  EXPECT_EQ(s.card_used(), 16 * GiB);
  int status = s.child().kill(SIGTERM);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_EQ(s.card_used(), 0u);
}

TEST(FakeGpuServer, Http500AndGarbageSpareTheControlPaths) {
  FakeServer a("vllm", {"--http-500"});
  FakeServer b("vllm", {"--garbage"});
  ASSERT_TRUE(a.wait_ready());
  ASSERT_TRUE(b.wait_ready());
  EXPECT_EQ(a.call("GET", "/health")->status, 500u);
  EXPECT_EQ(a.get_json("/fake/state")["kind"], "vllm");
  auto r = b.call("GET", "/is_sleeping");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200u);
  EXPECT_TRUE(json::parse(r->body, nullptr, false).is_discarded());
  EXPECT_EQ(b.get_json("/fake/state")["requests"], 1);
}

TEST(FakeGpuServer, UnloadedStartHoldsNothingUntilLoaded) {
  FakeServer s("speaches", {"--unloaded", "--model-bytes", "1GiB"});
  ASSERT_TRUE(s.wait_ready());
  EXPECT_EQ(s.listed_bytes(), std::nullopt);
  EXPECT_EQ(s.call("DELETE", "/api/ps/Systran/faster-whisper-small")->status, 404u);
  EXPECT_EQ(s.call("POST", "/api/ps/Systran/faster-whisper-small")->status, 201u);
  EXPECT_EQ(s.listed_bytes(), static_cast<long long>(GiB));
  EXPECT_EQ(s.get_json("/api/ps")["models"][0], "Systran/faster-whisper-small");
  EXPECT_EQ(s.call("DELETE", "/api/ps/Systran/faster-whisper-small")->status, 204u);
  EXPECT_EQ(s.listed_bytes(), std::nullopt);
}

}  // namespace
}  // namespace vramd
