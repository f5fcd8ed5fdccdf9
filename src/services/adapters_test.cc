// The adapters against real HTTP: each kind's fake server (tests/fakes/, build/fake-gpu-server)
// answering the paths and shapes of the real one, holding "GPU memory" in the fake GPU state.
#include <utility>

#include <gtest/gtest.h>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>

#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "integration/test_util.h"
#include "services/adapter.h"
#include "services/fingerprint.h"
#include "services/http_client.h"
#include "testgpu/fake_gpu_state.h"

namespace vramd {
namespace {

namespace asio = boost::asio;
using nlohmann::json;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

// The fake server binary: in this build directory, else a sibling build directory's.
std::string fake_server_binary() {
  if (const char* env = std::getenv("VRAMD_FAKE_GPU_SERVER")) return env;
  std::filesystem::path own = std::filesystem::path(testing::build_dir()) / "fake-gpu-server";
  if (std::filesystem::exists(own)) return own;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(testing::source_dir(), ec)) {
    std::filesystem::path p = entry.path() / "fake-gpu-server";
    if (entry.path().filename().string().rfind("build", 0) == 0 && std::filesystem::exists(p)) {
      return p;
    }
  }
  return {};
}

// Runs one awaitable to completion on a fresh io_context.
template <typename T>
T run_sync(std::function<asio::awaitable<T>(asio::io_context&)> f) {
  asio::io_context io;
  std::optional<T> out;
  asio::co_spawn(
      io, [&]() -> asio::awaitable<void> { out = co_await f(io); }, asio::detached);
  io.run();
  return std::move(*out);
}

class FakeServer {
 public:
  FakeServer(const std::string& kind, std::vector<std::string> extra = {}) : kind_(kind) {
    state_ = dir_.file("gpu.json");
    (void)write_fake_gpu_state(state_,
                               make_fake_gpu_state({{"NVIDIA GeForce RTX 3090", 24 * GiB}}));
    port_ = testing::free_port();
    std::vector<std::string> argv = {
        fake_server_binary(), "--kind", kind, "--port", std::to_string(port_), "--state", state_,
        "--model-bytes",      "4GiB"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    child_ = std::make_unique<testing::Child>(argv, std::vector<std::string>{}, dir_.file("log"));
    ready_ = testing::eventually([&] {
      std::ifstream in(dir_.file("log"));
      std::stringstream ss;
      ss << in.rdbuf();
      return ss.str().find("ready") != std::string::npos;
    });
  }
  bool ready() const { return ready_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  const std::string& state_path() const { return state_; }

  Result<HttpReply> http(std::string_view method, const std::string& path, std::string body = {}) {
    std::string u = url() + path;
    std::string m(method);
    return run_sync<Result<HttpReply>>(
        [&](asio::io_context& io) { return http_call(io.get_executor(), m, u, body); });
  }
  json fake_state() {
    Result<HttpReply> r = http("GET", "/fake/state");
    if (!r) return json::object();
    return json::parse(r->body, nullptr, false);
  }
  // Bytes of the GPU the fake state file says are used.
  Bytes gpu_used() {
    Result<json> s = read_fake_gpu_state(state_);
    if (!s) return ~Bytes{0};
    return (*s)["gpus"][0]["used"].get<Bytes>();
  }

 private:
  std::string kind_;
  testing::TempDir dir_;
  std::string state_;
  int port_ = 0;
  std::unique_ptr<testing::Child> child_;
  bool ready_ = false;
};

ServiceConfig config_for(const std::string& kind, const std::string& url) {
  ServiceConfig c;
  c.name = kind;
  c.kind = kind;
  c.url = url;
  c.probe_timeout = 2s;
  if (kind == "localai") c.models = {"gpt-4"};
  if (kind == "generic_http") {
    c.busy_url = "/busy";
    c.busy_json_pointer = "/busy";
    c.unload_url = "/unload";
    c.health_url = "/health";
  }
  return c;
}

std::unique_ptr<Adapter> adapter_for(const ServiceConfig& c, asio::io_context& io) {
  Result<std::unique_ptr<Adapter>> a = make_adapter(c, io.get_executor());
  EXPECT_TRUE(a.ok()) << (a.ok() ? "" : a.error());
  return a.ok() ? std::move(*a) : nullptr;
}

ServiceProbe probe_once(const ServiceConfig& c) {
  return run_sync<ServiceProbe>([&](asio::io_context& io) -> asio::awaitable<ServiceProbe> {
    std::unique_ptr<Adapter> a = adapter_for(c, io);
    co_return co_await a->probe();
  });
}
UnloadCall unload_once(const ServiceConfig& c) {
  return run_sync<UnloadCall>([&](asio::io_context& io) -> asio::awaitable<UnloadCall> {
    std::unique_ptr<Adapter> a = adapter_for(c, io);
    co_return co_await a->unload(SleepDepth::sleep2);
  });
}
HealthCheck health_once(const ServiceConfig& c) {
  return run_sync<HealthCheck>([&](asio::io_context& io) -> asio::awaitable<HealthCheck> {
    std::unique_ptr<Adapter> a = adapter_for(c, io);
    co_return co_await a->health();
  });
}

#define SKIP_WITHOUT_FAKE() \
  if (fake_server_binary().empty()) GTEST_SKIP() << "build/fake-gpu-server not built"

const std::vector<std::string> kHttpKinds = {
    "comfyui",  "ollama",   "vllm",   "sglang",  "a1111",    "forge",       "textgen",
    "tabbyapi", "llamacpp", "triton", "localai", "speaches", "generic_http"};
// Kinds whose server says busy or idle; the others have no busy call (busy stays unknown).
bool has_busy_call(const std::string& k) {
  return k != "ollama" && k != "textgen" && k != "tabbyapi" && k != "speaches";
}

class AdapterKind : public ::testing::TestWithParam<std::string> {};

TEST_P(AdapterKind, ProbeIdleThenBusyAfterWork) {
  SKIP_WITHOUT_FAKE();
  const std::string kind = GetParam();
  // llama-server says busy only with --slots (or --metrics); without, see LlamaCppDefaultFlags*.
  FakeServer fake(
      kind, kind == "llamacpp" ? std::vector<std::string>{"--slots"} : std::vector<std::string>{});
  ASSERT_TRUE(fake.ready());
  ServiceConfig c = config_for(kind, fake.url());
  ServiceProbe idle = probe_once(c);
  EXPECT_TRUE(idle.reachable) << idle.error;
  EXPECT_EQ(idle.error, "");
  if (has_busy_call(kind)) {
    EXPECT_EQ(idle.busy, false);
  } else {
    EXPECT_EQ(idle.busy, std::nullopt);
  }
  ASSERT_TRUE(fake.http("POST", "/fake/busy?for=5s").ok());
  ServiceProbe busy = probe_once(c);
  EXPECT_TRUE(busy.reachable) << busy.error;
  if (has_busy_call(kind)) {
    EXPECT_EQ(busy.busy, true) << busy.error;
  }
  HealthCheck h = health_once(c);
  EXPECT_TRUE(h.healthy) << h.message;
}

TEST_P(AdapterKind, UnloadFreesTheFakesMemory) {
  SKIP_WITHOUT_FAKE();
  const std::string kind = GetParam();
  FakeServer fake(
      kind, kind == "llamacpp" ? std::vector<std::string>{"--router"} : std::vector<std::string>{});
  ASSERT_TRUE(fake.ready());
  ServiceConfig c = config_for(kind, fake.url());
  EXPECT_EQ(fake.gpu_used(), 4 * GiB);
  UnloadCall u = unload_once(c);
  EXPECT_EQ(u.result, UnloadCall::Result::requested) << u.message;
  EXPECT_TRUE(testing::eventually([&] { return fake.fake_state().value("unload_calls", 0) == 1; }))
      << fake.fake_state().dump();
  // A sleeping vLLM keeps its CUDA context, as a real one does (tests/fakes/README.md).
  Bytes kept = kind == "vllm" ? 500 * MiB : 0;
  EXPECT_TRUE(testing::eventually([&] { return fake.gpu_used() == kept; })) << fake.gpu_used();
  EXPECT_EQ(fake.fake_state().value("bytes_on_gpu", Bytes{1}), kept);
}

TEST_P(AdapterKind, Http500IsAnErrorNotIdle) {
  SKIP_WITHOUT_FAKE();
  const std::string kind = GetParam();
  FakeServer fake(kind, {"--http-500"});
  ASSERT_TRUE(fake.ready());
  ServiceConfig c = config_for(kind, fake.url());
  ServiceProbe p = probe_once(c);
  EXPECT_TRUE(p.reachable);
  EXPECT_NE(p.error, "");
  EXPECT_EQ(p.busy, std::nullopt);
  UnloadCall u = unload_once(c);
  EXPECT_NE(u.result, UnloadCall::Result::requested) << u.message;
  EXPECT_FALSE(health_once(c).healthy);
}

TEST_P(AdapterKind, GarbageIsAnErrorNotIdle) {
  SKIP_WITHOUT_FAKE();
  const std::string kind = GetParam();
  FakeServer fake(kind, {"--garbage"});
  ASSERT_TRUE(fake.ready());
  ServiceProbe p = probe_once(config_for(kind, fake.url()));
  EXPECT_TRUE(p.reachable);
  EXPECT_EQ(p.busy, std::nullopt) << p.error;
  EXPECT_NE(p.error, "");
}

TEST_P(AdapterKind, HungServerTimesOutWithoutDelayingAnother) {
  SKIP_WITHOUT_FAKE();
  const std::string kind = GetParam();
  FakeServer hung(kind, {"--hang"});
  FakeServer fine(kind);
  ASSERT_TRUE(hung.ready() && fine.ready());
  ServiceConfig hc = config_for(kind, hung.url());
  hc.probe_timeout = 300ms;
  ServiceConfig fc = config_for(kind, fine.url());
  asio::io_context io;
  std::unique_ptr<Adapter> ha = adapter_for(hc, io);
  std::unique_ptr<Adapter> fa = adapter_for(fc, io);
  std::optional<ServiceProbe> hp, fp;
  Clock::duration hung_took{}, fine_took{};
  Clock::time_point start = Clock::now();
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        hp = co_await ha->probe();
        hung_took = Clock::now() - start;
      },
      asio::detached);
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        fp = co_await fa->probe();
        fine_took = Clock::now() - start;
      },
      asio::detached);
  io.run();
  ASSERT_TRUE(hp && fp);
  EXPECT_FALSE(hp->reachable);
  EXPECT_NE(hp->error.find("timed out"), std::string::npos) << hp->error;
  EXPECT_LT(hung_took, 700ms);
  EXPECT_TRUE(fp->reachable) << fp->error;
  EXPECT_LT(fine_took, 250ms);
}

INSTANTIATE_TEST_SUITE_P(Kinds, AdapterKind, ::testing::ValuesIn(kHttpKinds),
                         [](const auto& info) { return info.param; });

TEST(Adapters, OllamaListsModelsAndSelfReport) {
  SKIP_WITHOUT_FAKE();
  FakeServer fake("ollama", {"--model", "qwen2.5:7b"});
  ASSERT_TRUE(fake.ready());
  ServiceProbe p = probe_once(config_for("ollama", fake.url()));
  EXPECT_EQ(p.models, std::vector<std::string>{"qwen2.5:7b"});
  EXPECT_EQ(p.self_reported_vram, 4 * GiB);
  ASSERT_TRUE(fake.http("POST", "/api/generate", R"({"model":"qwen2.5:7b","prompt":"hi"})").ok());
  UnloadCall u = unload_once(config_for("ollama", fake.url()));
  EXPECT_EQ(u.result, UnloadCall::Result::requested) << u.message;
  json state = fake.fake_state();
  json body = state["last_unload_body"];
  if (body.is_string()) body = json::parse(body.get<std::string>(), nullptr, false);
  ASSERT_TRUE(body.is_object()) << state.dump();
  EXPECT_EQ(body.value("model", ""), "qwen2.5:7b");
  EXPECT_EQ(body.value("keep_alive", -1), 0);
}

// Issue 46: Ollama unloads an idle model (keep_alive, 5 min by default); /api/tags still names
// it, and a request loads it again.
TEST(Adapters, OllamaNamesItsInstalledModelsUnloadedToo) {
  SKIP_WITHOUT_FAKE();
  FakeServer fake("ollama", {"--model", "qwen2.5:7b", "--unloaded"});
  ASSERT_TRUE(fake.ready());
  ServiceProbe p = probe_once(config_for("ollama", fake.url()));
  EXPECT_EQ(p.error, "");
  EXPECT_TRUE(p.models.empty());
  EXPECT_EQ(p.installed, std::vector<std::string>{"qwen2.5:7b"});
}

TEST(Adapters, ComfyUiBusyAfterPromptAndSelfReportIsEvidence) {
  SKIP_WITHOUT_FAKE();
  FakeServer fake("comfyui", {"--self-report", "100MiB"});
  ASSERT_TRUE(fake.ready());
  ASSERT_TRUE(fake.http("POST", "/prompt", R"({"prompt":{},"client_id":"t"})").ok());
  ServiceProbe p = probe_once(config_for("comfyui", fake.url()));
  EXPECT_EQ(p.busy, true);
  EXPECT_GE(p.queue_depth.value_or(0), 1);
  EXPECT_EQ(p.self_reported_vram, 100 * MiB);
  EXPECT_TRUE(p.models.empty());
}

TEST(Adapters, VllmSleepLevelAndWake) {
  SKIP_WITHOUT_FAKE();
  FakeServer fake("vllm");
  ASSERT_TRUE(fake.ready());
  ServiceConfig c = config_for("vllm", fake.url());
  asio::io_context io;
  std::unique_ptr<Adapter> a = adapter_for(c, io);
  std::optional<UnloadCall> u, w;
  std::optional<ServiceProbe> asleep;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        u = co_await a->unload(SleepDepth::sleep2);
        asleep = co_await a->probe();
        w = co_await a->wake(SleepDepth::sleep2);
      },
      asio::detached);
  io.run();
  EXPECT_EQ(u->result, UnloadCall::Result::requested) << u->message;
  EXPECT_NE(u->message.find("/sleep?level=2"), std::string::npos);
  // Asleep, it still serves its model's name.
  EXPECT_EQ(asleep->models, std::vector<std::string>{"Qwen/Qwen2.5-7B-Instruct"});
  EXPECT_TRUE(a->can_wake());
  // Level 2's wake: the weights' memory, reload_weights, the KV cache, the prefix cache.
  EXPECT_EQ(w->result, UnloadCall::Result::requested) << w->message;
  EXPECT_NE(w->message.find("/collective_rpc"), std::string::npos) << w->message;
  EXPECT_NE(w->message.find("/reset_prefix_cache"), std::string::npos) << w->message;
  nlohmann::json st = fake.fake_state();
  EXPECT_TRUE(st.value("loaded", false));
  EXPECT_EQ(st.value("reload_weights_calls", 0), 1);
  EXPECT_FALSE(st.value("needs_reload_weights", true));
}

TEST(Adapters, LlamaCppPlainHasNoUnload) {
  SKIP_WITHOUT_FAKE();
  FakeServer fake("llamacpp");
  ASSERT_TRUE(fake.ready());
  UnloadCall u = unload_once(config_for("llamacpp", fake.url()));
  EXPECT_EQ(u.result, UnloadCall::Result::not_supported) << u.message;
  EXPECT_EQ(fake.fake_state().value("unload_calls", -1), 0);
}

// Issue 46: a llama-server started with its default flags (b4747: /slots and /metrics answer
// 501) lists its one model in /v1/models; busy is unknown, which is no error, and the calls that
// said 501 are not asked again at every probe.
TEST(Adapters, LlamaCppDefaultFlagsListItsModelAndLeaveBusyUnknownQuietly) {
  SKIP_WITHOUT_FAKE();
  FakeServer fake("llamacpp", {"--model", "/srv/models/tiny.gguf", "--version", "b4748-abc"});
  ASSERT_TRUE(fake.ready());
  ServiceConfig c = config_for("llamacpp", fake.url());
  asio::io_context io;
  std::unique_ptr<Adapter> a = adapter_for(c, io);
  std::optional<ServiceProbe> first, second;
  int after_first = 0;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        first = co_await a->probe();
        after_first = fake.fake_state().value("requests", 0);
        second = co_await a->probe();
      },
      asio::detached);
  io.run();
  ASSERT_TRUE(first && second);
  EXPECT_TRUE(first->reachable);
  EXPECT_EQ(first->error, "");
  EXPECT_EQ(first->busy, std::nullopt);
  EXPECT_EQ(first->models, std::vector<std::string>{"/srv/models/tiny.gguf"});
  EXPECT_EQ(first->version, "b4748-abc");
  EXPECT_EQ(second->error, "");
  EXPECT_EQ(second->models, first->models);
  // The second probe asks /v1/models and /props only: not /slots, not /metrics.
  EXPECT_EQ(fake.fake_state().value("requests", 0) - after_first, 2) << fake.fake_state().dump();
  // No unload for a plain server: stopping it frees its memory.
  EXPECT_EQ(unload_once(c).result, UnloadCall::Result::not_supported);
}

TEST(Adapters, LlamaCppBusyFromMetricsWhenSlotsAreOff) {
  SKIP_WITHOUT_FAKE();
  FakeServer fake("llamacpp", {"--metrics"});
  ASSERT_TRUE(fake.ready());
  ServiceConfig c = config_for("llamacpp", fake.url());
  ServiceProbe idle = probe_once(c);
  EXPECT_EQ(idle.error, "");
  EXPECT_EQ(idle.busy, false);
  ASSERT_TRUE(fake.http("POST", "/fake/busy?for=5s").ok());
  EXPECT_EQ(probe_once(c).busy, true);
}

// `vramd discover`'s fingerprint over real HTTP: the answers of a llama-server with its
// default flags, as cli/discover.cc asks them.
TEST(Adapters, FingerprintKnowsAPlainLlamaServerByItsPropsAndModels) {
  SKIP_WITHOUT_FAKE();
  FakeServer fake("llamacpp");
  ASSERT_TRUE(fake.ready());
  std::map<std::string, ProbeAnswer> answers;
  for (const auto& path : fingerprint_paths()) {
    Result<HttpReply> r = fake.http("GET", path);
    ASSERT_TRUE(r.ok()) << path << ": " << r.error();
    answers[path] = ProbeAnswer{r->status, r->body};
  }
  EXPECT_EQ(answers["/slots"].status, 501u) << answers["/slots"].body;
  EXPECT_EQ(answers["/metrics"].status, 501u);
  std::optional<Fingerprint> fp = identify_server(answers);
  ASSERT_TRUE(fp);
  EXPECT_EQ(fp->kind, "llamacpp");
  EXPECT_NE(fp->evidence.find("/props"), std::string::npos) << fp->evidence;
  // Only /v1/models left (an older or stripped build): still llama.cpp.
  std::map<std::string, ProbeAnswer> models_only = {{"/v1/models", answers["/v1/models"]}};
  EXPECT_EQ(identify_server(models_only).value_or(Fingerprint{}).kind, "llamacpp");
}

TEST(Adapters, LlamaCppHealthLoading) {
  SKIP_WITHOUT_FAKE();
  FakeServer fake("llamacpp", {"--unloaded"});
  ASSERT_TRUE(fake.ready());
  HealthCheck h = health_once(config_for("llamacpp", fake.url()));
  EXPECT_FALSE(h.healthy);
  EXPECT_EQ(h.message, "GET /health → 503 Loading model");
}

TEST(Adapters, SglangRefusesUnloadWhileBusy) {
  SKIP_WITHOUT_FAKE();
  FakeServer fake("sglang");
  ASSERT_TRUE(fake.ready());
  ASSERT_TRUE(fake.http("POST", "/fake/busy?for=5s").ok());
  UnloadCall u = unload_once(config_for("sglang", fake.url()));
  EXPECT_EQ(u.result, UnloadCall::Result::failed);
  EXPECT_EQ(u.message.rfind("busy", 0), 0u) << u.message;
  EXPECT_EQ(fake.fake_state().value("unload_calls", -1), 0);
}

TEST(Adapters, ProcessKindHasNoApi) {
  ServiceConfig c;
  c.name = "asr";
  c.kind = "process";
  ServiceProbe p = probe_once(c);
  EXPECT_TRUE(p.reachable);
  EXPECT_EQ(p.busy, std::nullopt);
  UnloadCall u = unload_once(c);
  EXPECT_EQ(u.result, UnloadCall::Result::not_supported);
  EXPECT_EQ(u.message, "no API: stopping the process frees its memory");
  HealthCheck h = health_once(c);
  EXPECT_TRUE(h.healthy);
  EXPECT_EQ(h.message, "no health check");
}

TEST(Adapters, ApiKeyEnvMissingNamesTheVariableOnly) {
  asio::io_context io;
  ServiceConfig c = config_for("ollama", "http://127.0.0.1:1");
  c.api_key_env = "VRAMD_TEST_SURELY_UNSET_KEY";
  Result<std::unique_ptr<Adapter>> a = make_adapter(c, io.get_executor());
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.error(),
            "service ollama: api_key_env: environment variable VRAMD_TEST_SURELY_UNSET_KEY is not "
            "set");
}

TEST(Adapters, HttpsRefused) {
  asio::io_context io;
  Result<std::unique_ptr<Adapter>> a =
      make_adapter(config_for("vllm", "https://127.0.0.1:8000"), io.get_executor());
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.error().find("https is not supported"), std::string::npos);
}

TEST(Adapters, ConnectionRefusedIsUnreachable) {
  ServiceProbe p =
      probe_once(config_for("comfyui", "http://127.0.0.1:" + std::to_string(testing::free_port())));
  EXPECT_FALSE(p.reachable);
  EXPECT_NE(p.error.find("GET /queue: connect: "), std::string::npos) << p.error;
}

}  // namespace
}  // namespace vramd
