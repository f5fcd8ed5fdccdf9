// Verified unloads end to end: the real daemon on the test GPU, fake model servers speaking their
// kinds' APIs, the API and the CLI. The Arbiter's rules are tested in core/arbiter_test.cc; these
// tests prove the whole path: probe -> unload call -> GPU samples -> verdict -> event.
#include <algorithm>
#include <chrono>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/client.h"
#include "core/units.h"
#include "integration/daemon_fixture.h"
#include "integration/test_util.h"
#include "testgpu/fake_gpu_state.h"

namespace vramd {
namespace {

using nlohmann::json;
using testing::DaemonFixture;
using testing::eventually;
using testing::get;
using testing::events_of;
using testing::FakeService;
using testing::run_cli;
using namespace std::chrono_literals;

// The service's bytes as the daemon attributes them.
Bytes service_bytes(const DaemonFixture& f, const std::string& name) {
  json s = get(f, "/v1/services/" + name);
  return s.contains("bytes") ? s["bytes"].get<Bytes>() : 0;
}

std::string service_toml(const std::string& name, const std::string& kind, const std::string& url,
                         const std::string& extra = "") {
  return fmt::format("[services.{}]\nkind = \"{}\"\nurl = \"{}\"\n{}\n", name, kind, url, extra);
}

TEST(UnloadE2E, AReleaseThatTakesTwoSecondsIsFreedAndTheAnswerCarriesTheFigures) {
  DaemonFixture f;
  FakeService comfy(f, "comfyui", {"--model-bytes", "16GiB", "--unload-delay", "2s"});
  f.start(service_toml("comfyui", "comfyui", comfy.url()));
  ASSERT_TRUE(eventually([&] { return service_bytes(f, "comfyui") == 16 * GiB; }))
      << get(f, "/v1/services").dump(2) << f.log();

  auto start = std::chrono::steady_clock::now();
  auto r = http_request({f.url}, "POST", "/v1/services/comfyui/unload", "", 40000);
  auto took = std::chrono::steady_clock::now() - start;
  ASSERT_TRUE(r.ok()) << r.error();
  ASSERT_EQ(r->status, 200u) << r->body;
  json v = json::parse(r->body);
  EXPECT_EQ(v["service"], "comfyui");
  EXPECT_EQ(v["outcome"], "freed") << v.dump(2);
  EXPECT_EQ(v["before_bytes"].get<Bytes>(), 16 * GiB);
  EXPECT_EQ(v["after_bytes"].get<Bytes>(), 0u);
  EXPECT_TRUE(v["escalation"].is_null());
  // The verdict waits for the memory (2 s) and for it to hold still, not for the 30 s timeout.
  EXPECT_GE(v["duration_ms"].get<int64_t>(), 2000);
  EXPECT_LT(took, 20s);
  EXPECT_EQ(comfy.state()["unload_calls"], 1);

  // Recorded as an event with the same figures, and shown by the services listing.
  auto freed = events_of(f, "unload.freed");
  ASSERT_EQ(freed.size(), 1u) << get(f, "/v1/events").dump(2);
  EXPECT_EQ(freed[0]["data"]["before_bytes"].get<Bytes>(), 16 * GiB);
  json s = get(f, "/v1/services/comfyui");
  EXPECT_EQ(s["last_unload"]["outcome"], "freed") << s.dump(2);
  EXPECT_EQ(s["bytes"].get<Bytes>(), 0u);
}

TEST(UnloadE2E, CliFreeSaysWhatWasFreed) {
  DaemonFixture f;
  FakeService ollama(f, "ollama", {"--model-bytes", "5GiB"});
  f.start(service_toml("ollama", "ollama", ollama.url()));
  ASSERT_TRUE(eventually([&] { return service_bytes(f, "ollama") == 5 * GiB; })) << f.log();
  auto r = run_cli({"free", "ollama", "--url", f.url}, {}, f.dir);
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("freed"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("5.0 GiB"), std::string::npos) << r.out;
  // An unknown service is an error that names it, exit 1.
  r = run_cli({"free", "nosuch", "--url", f.url}, {}, f.dir);
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_NE(r.err.find("nosuch"), std::string::npos) << r.err;
}

TEST(UnloadE2E, AnsweredButNothingFreedIsIneffectiveReportedAndNotCalledAgainInTheBackoff) {
  DaemonFixture f;
  FakeService comfy(f, "comfyui", {"--model-bytes", "12GiB", "--ignore-unload"});
  f.start(service_toml("comfyui", "comfyui", comfy.url(),
                       "unload_timeout = \"2s\"\non_ineffective_unload = \"restart\"\n"
                       "unload_backoff = \"10m\"\n"));
  ASSERT_TRUE(eventually([&] { return service_bytes(f, "comfyui") == 12 * GiB; })) << f.log();

  auto r = http_request({f.url}, "POST", "/v1/services/comfyui/unload", "", 40000);
  ASSERT_TRUE(r.ok()) << r.error();
  ASSERT_EQ(r->status, 200u) << r->body;
  json v = json::parse(r->body);
  EXPECT_EQ(v["outcome"], "ineffective") << v.dump(2);
  EXPECT_EQ(v["after_bytes"].get<Bytes>(), 12 * GiB);
  // Restart was asked for, but vramd has no means to restart this one: it reports, and says why.
  EXPECT_EQ(v["escalation"], "report") << v.dump(2);
  EXPECT_NE(v["message"].get<std::string>().find("restart"), std::string::npos) << v.dump(2);
  EXPECT_EQ(comfy.state()["unload_calls"], 1);

  // Inside the backoff a second request is refused (409, JSON error) and calls nothing.
  r = http_request({f.url}, "POST", "/v1/services/comfyui/unload", "", 10000);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status, 409u) << r->body;
  EXPECT_EQ(json::parse(r->body)["error"]["code"], "refused");
  EXPECT_EQ(comfy.state()["unload_calls"], 1);
  json s = get(f, "/v1/services/comfyui");
  EXPECT_FALSE(s["backoff_until"].is_null()) << s.dump(2);

  // --force goes through the backoff.
  r = http_request({f.url}, "POST", "/v1/services/comfyui/unload?force=true", "", 40000);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status, 200u) << r->body;
  EXPECT_EQ(comfy.state()["unload_calls"], 2);
  EXPECT_EQ(events_of(f, "unload.ineffective").size(), 2u);
}

TEST(UnloadE2E, HungBrokenAndGarbageServersBecomeEventsAndStatusKeepsAnsweringFast) {
  DaemonFixture f;
  FakeService hung(f, "comfyui", {"--hang", "--model-bytes", "4GiB"});
  FakeService broken(f, "ollama", {"--http-500", "--model-bytes", "3GiB"});
  FakeService garbage(f, "vllm", {"--garbage", "--model-bytes", "2GiB"});
  // The unload call is bounded by unload_timeout (an Ollama unload answers only once done).
  const std::string fast = "probe_timeout = \"1500ms\"\nunload_timeout = \"3s\"\n";
  f.start(service_toml("hung", "comfyui", hung.url(), fast) +
          service_toml("broken", "ollama", broken.url(), fast) +
          service_toml("garbage", "vllm", garbage.url(), fast));

  // Each fault is an event naming the service.
  ASSERT_TRUE(eventually([&] {
    return !events_of(f, "service.unreachable").empty() && !events_of(f, "service.error").empty() &&
           events_of(f, "service.error").size() >= 2;
  }, 15s)) << get(f, "/v1/events").dump(2);
  auto unreachable = events_of(f, "service.unreachable");
  ASSERT_EQ(unreachable.size(), 1u) << get(f, "/v1/events").dump(2);
  EXPECT_EQ(unreachable[0]["subject"], "hung");
  std::vector<std::string> broken_subjects;
  for (const auto& e : events_of(f, "service.error")) broken_subjects.push_back(e["subject"]);
  std::sort(broken_subjects.begin(), broken_subjects.end());
  EXPECT_EQ(broken_subjects, (std::vector<std::string>{"broken", "garbage"}));
  json s = get(f, "/v1/services/hung");
  EXPECT_EQ(s["state"], "unreachable") << s.dump(2);
  EXPECT_TRUE(get(f, "/v1/services/broken")["busy"].is_null());

  // Meanwhile /v1/status answers: 60 requests while the hung probes keep timing out. A status
  // held up by a probe would take up to the 1.5 s probe timeout.
  std::vector<double> ms;
  for (int i = 0; i < 60; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    auto r = http_request({f.url}, "GET", "/v1/status", "", 5000);
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    ASSERT_TRUE(r.ok() && r->status == 200u);
    std::this_thread::sleep_for(50ms);
  }
  std::sort(ms.begin(), ms.end());
  double p90 = ms[ms.size() * 9 / 10];
  RecordProperty("status_p90_ms", std::to_string(p90));
  RecordProperty("status_max_ms", std::to_string(ms.back()));
  EXPECT_LT(p90, 50.0) << "max " << ms.back();
  EXPECT_LT(ms.back(), 500.0);

  // Unloading the hung one is a verdict, not a stuck request: the call times out (3 s) -> failed.
  auto r = http_request({f.url}, "POST", "/v1/services/hung/unload?force=true", "", 60000);
  ASSERT_TRUE(r.ok()) << r.error();
  json v = json::parse(r->body);
  EXPECT_EQ(v["outcome"], "failed") << v.dump(2);
  EXPECT_EQ(v["after_bytes"].get<Bytes>(), 4 * GiB);
  // The 500 one too: the call failed, nothing was freed.
  r = http_request({f.url}, "POST", "/v1/services/broken/unload?force=true", "", 60000);
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(json::parse(r->body)["outcome"], "failed") << r->body;
}

// The field case: ComfyUI on WSL, where NVML lists the process without a figure and ComfyUI's
// torch_vram_total says 0.1 GB. Its 15.4 GiB is named by residual, unloaded, and measured.
TEST(UnloadE2E, WslComfyuiNamedByResidualUnloadedAndMeasured) {
  DaemonFixture f;
  const Bytes held = 15 * GiB + 410 * MiB;  // 15.4 GiB
  FakeService comfy(f, "comfyui",
                    {"--na", "--model-bytes", std::to_string(held) + "B", "--self-report", "100MiB"});
  f.start(service_toml("comfyui", "comfyui", comfy.url()));
  json st;
  ASSERT_TRUE(eventually([&] {
    st = get(f, "/v1/status");
    const json* h = testing::holding(st, "comfyui");
    return h && (*h)["bytes"].get<Bytes>() >= held - 256 * MiB;
  })) << st.dump(2) << f.log();
  const json* h = testing::holding(st, "comfyui");
  EXPECT_EQ((*h)["source"], "residual") << st.dump(2);
  EXPECT_FALSE(st["gpus"][0]["per_process_available"].get<bool>());

  auto r = http_request({f.url}, "POST", "/v1/services/comfyui/unload", "", 40000);
  ASSERT_TRUE(r.ok()) << r.error();
  json v = json::parse(r->body);
  EXPECT_EQ(v["outcome"], "freed") << v.dump(2);
  EXPECT_GE(v["before_bytes"].get<Bytes>(), held - 256 * MiB);
  EXPECT_LT(v["after_bytes"].get<Bytes>(), 256 * MiB);
}

TEST(UnloadE2E, IdleTtlUnloadsAfterTheTtlAndNeverWhileBusy) {
  DaemonFixture f;
  FakeService idle(f, "comfyui", {"--model-bytes", "6GiB"});
  FakeService busy(f, "comfyui", {"--model-bytes", "3GiB", "--busy-for", "60s"});
  // The busy one is working for the whole test.
  ASSERT_TRUE(http_request({busy.url()}, "POST", "/fake/busy?for=60s", "", 2000).ok());
  const std::string ttl = "unload_after_idle = \"3s\"\nprobe_timeout = \"1s\"\n";
  auto t0 = std::chrono::steady_clock::now();
  f.start(service_toml("idle", "comfyui", idle.url(), ttl) +
          service_toml("busy", "comfyui", busy.url(), ttl));
  ASSERT_TRUE(eventually([&] { return service_bytes(f, "idle") == 6 * GiB; })) << f.log();
  ASSERT_TRUE(eventually([&] { return !events_of(f, "unload.freed").empty(); }, 20s))
      << get(f, "/v1/events").dump(2);
  // Not before the TTL: idle counts from the first probe, after the daemon started.
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 3s);
  auto freed = events_of(f, "unload.freed");
  ASSERT_EQ(freed.size(), 1u);
  EXPECT_EQ(freed[0]["subject"], "idle");
  EXPECT_EQ(freed[0]["data"]["reason"], "idle");
  EXPECT_EQ(idle.state()["unload_calls"], 1);
  EXPECT_EQ(busy.state()["unload_calls"], 0);
  EXPECT_EQ(service_bytes(f, "busy"), 3 * GiB);
}

}  // namespace
}  // namespace vramd
