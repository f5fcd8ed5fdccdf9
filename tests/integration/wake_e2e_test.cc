// Sleep depths and the wake through the real daemon (core/wakes.h, docs/proxy.md "Wake"): a fake
// vLLM that, like a real one, keeps its CUDA context on the GPU asleep, lists its model, answers
// 503 to a chat while asleep, holds its weights in real host RAM at level 1 and needs
// reload_weights after a level-2 wake. The level follows the host RAM that is free; the wake's
// failure paths each end in an answer and an event.
#include <csignal>
#include <thread>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/client.h"
#include "core/units.h"
#include "integration/daemon_fixture.h"
#include "integration/test_util.h"

namespace vramd {
// Named, not anonymous: its helpers share a unity batch with other tests' (cmake/unity.cmake).
namespace wake_e2e_test {

using nlohmann::json;
using testing::DaemonFixture;
using testing::eventually;
using testing::FakeService;
using testing::get;
using namespace std::chrono_literals;

constexpr const char* kChat = R"({"model":"Qwen/Qwen2.5-7B-Instruct","messages":[{"role":"user","content":"hi"}]})";

// The front door, and a vLLM with no `models` list: its route comes from its probes alone.
struct FrontDoor {
  FrontDoor(DaemonFixture& f, const FakeService& vllm, const std::string& extra = "")
      : port(testing::free_port()), url(fmt::format("http://127.0.0.1:{}", port)) {
    toml = fmt::format(
        "[proxy]\nlisten = \"127.0.0.1:{}\"\n\n[services.vllm]\nkind = \"vllm\"\nurl = \"{}\"\n"
        "{}\n",
        port, vllm.url(), extra);
    f.start(toml);
  }
  int port;
  std::string url;
  std::string toml;
};

json vllm_status(const DaemonFixture& f) { return get(f, "/v1/services/vllm"); }

Result<DaemonReply> chat(const FrontDoor& s, int timeout_ms = 20000) {
  return http_request({s.url}, "POST", "/v1/chat/completions", kChat, timeout_ms);
}

json unload(const DaemonFixture& f) {
  auto r = http_request({f.url}, "POST", "/v1/services/vllm/unload", "", 40000);
  if (!r) return json{{"error", r.error()}};
  return json::parse(r->body, nullptr, false);
}

// Loaded, and its load's size learned (what its wake is admitted for).
bool loaded_once(const DaemonFixture& f) {
  return eventually([&] {
    json st = vllm_status(f);
    return st.value("bytes", Bytes{0}) == 2 * GiB &&
           st["load_peaks"].value("Qwen/Qwen2.5-7B-Instruct", Bytes{0}) == 2 * GiB;
  });
}

TEST(WakeE2E, ASleeperKeepsItsContextAndItsModelAndIsWokenAtLevelOneWhenRamAllows) {
  DaemonFixture f;
  FakeService vllm(f, "vllm", {"--model-bytes", "2GiB"});
  FrontDoor s(f, vllm, "[host]\nram_reserve = \"0%\"\n");
  ASSERT_TRUE(loaded_once(f)) << vllm_status(f).dump(2) << f.log();

  json verdict = unload(f);
  ASSERT_EQ(verdict.value("outcome", ""), "freed") << verdict.dump(2);
  EXPECT_EQ(verdict.value("depth", ""), "sleep1") << verdict.dump(2);
  EXPECT_EQ(vllm.state().value("sleep_level", 0), 1);
  // 256 MiB of weights really moved into the fake's host RAM, and vramd measured it.
  Bytes kept = verdict.value("host_ram_kept_bytes", Bytes{0});
  EXPECT_GT(kept, 200 * MiB) << verdict.dump(2);
  EXPECT_LT(kept, 400 * MiB) << verdict.dump(2);
  // Asleep with its CUDA context (500 MiB) on the GPU: asleep all the same, and its model is
  // still routed to it after more probes (the issue: a sleeper's route was lost).
  std::this_thread::sleep_for(3s);
  json st = vllm_status(f);
  EXPECT_EQ(st.value("bytes", Bytes{0}), 500 * MiB) << st.dump(2);
  ASSERT_TRUE(st["asleep"].is_object()) << st.dump(2);
  EXPECT_EQ(st["asleep"]["label"], "level 1");
  auto models = http_request({s.url}, "GET", "/v1/models", "", 5000);
  ASSERT_TRUE(models.ok());
  EXPECT_NE(models->body.find("Qwen/Qwen2.5-7B-Instruct"), std::string::npos) << models->body;
  // The server itself would answer 503 asleep; through the front door the request is held
  // while vramd wakes it.
  auto direct = http_request({vllm.url()}, "POST", "/v1/chat/completions", kChat, 5000);
  ASSERT_TRUE(direct.ok());
  EXPECT_EQ(direct->status, 503u) << direct->body;
  auto r = chat(s);
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(r->status, 200u) << r->body << f.log();
  auto woken = testing::events_of(f, "service.woken");
  ASSERT_EQ(woken.size(), 1u) << get(f, "/v1/events?limit=100").dump(2);
  EXPECT_NE(woken[0]["message"].get<std::string>().find("woke vllm from level 1"),
            std::string::npos)
      << woken[0].dump();
  EXPECT_EQ(vllm.state().value("reload_weights_calls", -1), 0);
  // Its wake time is learned and shown.
  EXPECT_TRUE(eventually([&] {
    return vllm_status(f)["wake_seconds"]["sleep1"].value("measured", false);
  })) << vllm_status(f).dump(2);
  EXPECT_TRUE(vllm_status(f)["asleep"].is_null());
}

TEST(WakeE2E, HostRamShortGivesLevelTwoAndItsWakeReloadsTheWeights) {
  DaemonFixture f;
  FakeService vllm(f, "vllm", {"--model-bytes", "2GiB"});
  // A reserve of 90% of the host's RAM: no sleeper may keep any of it.
  FrontDoor s(f, vllm, "[host]\nram_reserve = \"90%\"\n");
  ASSERT_TRUE(loaded_once(f)) << f.log();
  json verdict = unload(f);
  ASSERT_EQ(verdict.value("outcome", ""), "freed") << verdict.dump(2);
  EXPECT_EQ(verdict.value("depth", ""), "sleep2") << verdict.dump(2);
  EXPECT_EQ(vllm.state().value("sleep_level", 0), 2);
  EXPECT_EQ(vllm.state().value("host_weights_bytes", Bytes{1}), 0u);
  auto r = chat(s);
  ASSERT_TRUE(r.ok()) << r.error();
  // The fake answers 500 to a chat after a level-2 wake without reload_weights.
  EXPECT_EQ(r->status, 200u) << r->body << f.log();
  EXPECT_EQ(vllm.state().value("reload_weights_calls", 0), 1);
  EXPECT_EQ(vllm.state().value("reset_prefix_cache_calls", 0), 1);
  auto woken = testing::events_of(f, "service.woken");
  ASSERT_EQ(woken.size(), 1u);
  EXPECT_NE(woken[0]["message"].get<std::string>().find("woke vllm from level 2"),
            std::string::npos)
      << woken[0].dump();
}

TEST(WakeE2E, ARestartedVramdWakesTheSleeperItFindsAsTheServerSaysItSleeps) {
  DaemonFixture f;
  FakeService vllm(f, "vllm", {"--model-bytes", "2GiB"});
  FrontDoor s(f, vllm, "[host]\nram_reserve = \"0%\"\n");
  ASSERT_TRUE(loaded_once(f)) << f.log();
  ASSERT_EQ(unload(f).value("outcome", ""), "freed");
  f.daemon.reset();
  f.start(s.toml);
  // Its depth is not known to the new vramd: it wakes it as from level 2 (reloading the weights
  // is right after either level; a plain wake_up after level 2 would serve garbage).
  ASSERT_TRUE(eventually([&] { return vllm_status(f)["asleep"].is_object(); }))
      << vllm_status(f).dump(2) << f.log();
  EXPECT_EQ(testing::events_of(f, "service.asleep").size(), 1u);
  auto r = chat(s);
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(r->status, 200u) << r->body << f.log();
  EXPECT_EQ(vllm.state().value("reload_weights_calls", 0), 1);
}

TEST(WakeE2E, AWakeTheServerCannotAnswerEndsIn503AndAnEvent) {
  DaemonFixture f;
  FakeService vllm(f, "vllm", {"--model-bytes", "2GiB"});
  FrontDoor s(f, vllm, "[host]\nram_reserve = \"0%\"\n");
  ASSERT_TRUE(loaded_once(f)) << f.log();
  ASSERT_EQ(unload(f).value("outcome", ""), "freed");
  // The server dies asleep: its wake call is refused.
  ::kill(vllm.pid(), SIGKILL);
  auto r = chat(s);
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(r->status, 503u) << r->body;
  EXPECT_NE(r->body.find("wake vllm failed"), std::string::npos) << r->body;
  EXPECT_EQ(testing::events_of(f, "service.wake_failed").size(), 1u)
      << get(f, "/v1/events?limit=100").dump(2);
  // Its claim did not outlive the wake.
  EXPECT_TRUE(eventually([&] {
    json leases = get(f, "/v1/leases");  // named: a range-for keeps no temporary alive
    for (const auto& l : leases["leases"])
      if (l.value("label", "") == "wake vllm") return false;
    return true;
  })) << get(f, "/v1/leases").dump(2);
}

// vLLM asleep, and a pinned ComfyUI holding 23 GiB of the 24: a wake's room never comes.
struct Blocked {
  Blocked(DaemonFixture& f, const std::string& wake_timeout)
      : vllm(f, "vllm", {"--model-bytes", "2GiB"}),
        comfy(f, "comfyui", {"--model-bytes", "23GiB", "--unloaded"}),
        s(f, vllm,
          fmt::format("wake_timeout = \"{}\"\n[host]\nram_reserve = \"0%\"\n\n"
                      "[services.comfyui]\nkind = \"comfyui\"\nurl = \"{}\"\npinned = true\n",
                      wake_timeout, comfy.url())) {
    EXPECT_TRUE(loaded_once(f)) << f.log();
    EXPECT_EQ(unload(f).value("outcome", ""), "freed");
    auto prompt = http_request({comfy.url()}, "POST", "/prompt", R"({"prompt":{}})", 5000);
    EXPECT_TRUE(prompt.ok() && prompt->status == 200);
    EXPECT_TRUE(eventually([&] {
      return get(f, "/v1/services/comfyui").value("bytes", Bytes{0}) == 23 * GiB;
    })) << f.log();
  }
  FakeService vllm, comfy;
  FrontDoor s;
};

TEST(WakeE2E, AWakeWithNoRoomTimesOutNamingTheHolder) {
  DaemonFixture f;
  Blocked b(f, "3s");
  auto r = chat(b.s);
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(r->status, 503u) << r->body;
  json body = json::parse(r->body, nullptr, false);
  EXPECT_NE(body["error"].value("message", "").find("did not become ready within 3s"),
            std::string::npos)
      << r->body;
  EXPECT_EQ(body["error"].value("holder", ""), "comfyui") << r->body;
  EXPECT_EQ(testing::events_of(f, "service.wake_timed_out").size(), 1u);
  EXPECT_TRUE(vllm_status(f)["asleep"].is_object()) << "still asleep, nothing half-woken";
  EXPECT_EQ(b.vllm.state().value("asleep", false), true);
}

TEST(WakeE2E, AStreamingClientThatLeavesMidWakeCancelsItAndItsClaim) {
  DaemonFixture f;
  Blocked b(f, "60s");
  // A streaming client that gives up after a second: the proxy finds it gone at its next SSE
  // keep-alive; the wake is cancelled, its claim with it.
  auto gone = http_request(
      {b.s.url}, "POST", "/v1/chat/completions",
      R"({"model":"Qwen/Qwen2.5-7B-Instruct","stream":true,"messages":[{"role":"user","content":"hi"}]})",
      1000);
  EXPECT_FALSE(gone.ok() && gone->status == 200 && gone->body.find("[DONE]") != std::string::npos);
  EXPECT_TRUE(eventually(
      [&] { return testing::events_of(f, "service.wake_cancelled").size() == 1; }, 20s))
      << get(f, "/v1/events?limit=100").dump(2);
  EXPECT_TRUE(eventually([&] {
    for (const auto& e : testing::events_of(f, "lease.cancelled"))
      if (e["message"].get<std::string>().find("wake vllm") != std::string::npos) return true;
    return false;
  })) << get(f, "/v1/events?limit=100").dump(2);
  EXPECT_TRUE(vllm_status(f)["asleep"].is_object());
}

TEST(WakeE2E, AClientThatIsNotStreamingAndLeavesMidWakeCancelsItAtTheNextHeartbeat) {
  DaemonFixture f;
  Blocked b(f, "60s");
  // It hears nothing while held; it gives up after a second and closes its socket. The proxy
  // reads the close at its next heartbeat (5 s), long before wake_timeout (60 s).
  auto t0 = std::chrono::steady_clock::now();
  auto gone = chat(b.s, 1000);
  EXPECT_FALSE(gone.ok() && gone->status == 200);
  EXPECT_TRUE(eventually(
      [&] { return testing::events_of(f, "service.wake_cancelled").size() == 1; }, 20s))
      << get(f, "/v1/events?limit=100").dump(2);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 30s);
  EXPECT_TRUE(vllm_status(f)["asleep"].is_object());
}

// Prewarm (docs/proxy.md "Prewarm"): a vLLM asked once, evicted for a lease, is woken by vramd
// when the lease gives the room back, before anyone asks again; the next chat finds it awake and
// the prewarm is counted used.
TEST(WakeE2E, AnEvictedSleeperIsPrewarmedWhenTheRoomComesBack) {
  DaemonFixture f;
  FakeService vllm(f, "vllm", {"--model-bytes", "2GiB"});
  FrontDoor s(f, vllm, "prewarm = true\nmin_idle = \"1s\"\n[host]\nram_reserve = \"0%\"\n");
  ASSERT_TRUE(loaded_once(f)) << vllm_status(f).dump(2) << f.log();
  auto first = chat(s);
  ASSERT_TRUE(first.ok() && first->status == 200u) << (first ? first->body : first.error());
  std::this_thread::sleep_for(1500ms);  // idle past min_idle

  // A lease for 1 GiB more than is free: vllm (idle) is evicted for it.
  json st = get(f, "/v1/status");
  Bytes free = st["gpus"][0].value("free_bytes", Bytes{0});
  auto l = http_request({f.url}, "POST", "/v1/leases",
                        json{{"vram", fmt::format("{}MiB", (free + 1 * GiB) / MiB)}, {"holder", "train"}}.dump(),
                        5000);
  ASSERT_TRUE(l.ok() && l->status == 201u) << (l ? l->body : l.error());
  uint64_t id = json::parse(l->body).value("id", uint64_t{0});
  ASSERT_TRUE(eventually([&] {
    return get(f, fmt::format("/v1/leases/{}", id)).value("state", "") == "granted" &&
           vllm_status(f)["asleep"].is_object();
  })) << get(f, fmt::format("/v1/leases/{}", id)).dump(2) << f.log();
  EXPECT_EQ(vllm_status(f)["asleep"].value("reason", ""), "eviction") << vllm_status(f).dump(2);
  EXPECT_EQ(vllm.state().value("asleep", false), true);
  auto d = http_request({f.url}, "DELETE", fmt::format("/v1/leases/{}", id), "", 5000);
  ASSERT_TRUE(d.ok() && d->status == 200u) << (d ? d->body : d.error());

  // Nobody asks; vramd wakes it within its prewarm look (every 10 s).
  ASSERT_TRUE(eventually([&] { return vllm.state().value("asleep", true) == false; }, 20s))
      << get(f, "/v1/events?limit=100").dump(2);
  auto prewarmed = testing::events_of(f, "service.prewarmed");
  ASSERT_EQ(prewarmed.size(), 1u) << get(f, "/v1/events?limit=100").dump(2);
  EXPECT_NE(prewarmed[0]["message"].get<std::string>().find("for a prewarm ("), std::string::npos)
      << prewarmed[0].dump();
  EXPECT_TRUE(eventually([&] { return vllm_status(f)["asleep"].is_null(); }));
  // The next chat is answered without a wake, and the prewarm counts as used.
  auto r = chat(s);
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(r->status, 200u) << r->body;
  EXPECT_TRUE(testing::events_of(f, "service.woken").empty());
  EXPECT_TRUE(eventually([&] { return testing::events_of(f, "service.prewarm_used").size() == 1; }))
      << get(f, "/v1/events?limit=100").dump(2);
}

}  // namespace wake_e2e_test
}  // namespace vramd
