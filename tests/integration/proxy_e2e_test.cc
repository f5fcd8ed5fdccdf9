// The request path through the real daemon: the front door routes by model to a fake vLLM, a
// request in flight makes the service busy in vramd's eyes, and a request for an unloaded
// (asleep) vLLM wakes it first, admitted for what it was measured to take.
#include <set>
#include <thread>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/client.h"
#include "core/units.h"
#include "integration/daemon_fixture.h"
#include "integration/test_util.h"

namespace vramd {
namespace {

using nlohmann::json;
using testing::DaemonFixture;
using testing::eventually;
using testing::FakeService;
using testing::get;
using namespace std::chrono_literals;

struct FrontDoor {
  explicit FrontDoor(DaemonFixture& f, const FakeService& vllm, const std::string& extra = "")
      : port(testing::free_port()), url(fmt::format("http://127.0.0.1:{}", port)) {
    f.start(fmt::format(
        "[proxy]\nlisten = \"127.0.0.1:{}\"\n\n[services.vllm]\nkind = \"vllm\"\nurl = \"{}\"\n"
        "models = [\"llama-fake\"]\n{}\n",
        port, vllm.url(), extra));
  }
  int port;
  std::string url;
};

json service(const DaemonFixture& f) { return get(f, "/v1/services/vllm"); }

TEST(ProxyE2E, TheFrontDoorRoutesByModelAndARequestInFlightMakesTheServiceBusy) {
  DaemonFixture f;
  FakeService vllm(f, "vllm", {"--model-bytes", "8GiB", "--slow", "1500ms"});
  FrontDoor door(f, vllm);
  auto models = http_request({door.url}, "GET", "/v1/models", "", 5000);
  ASSERT_TRUE(models.ok()) << models.error() << f.log();
  ASSERT_EQ(models->status, 200u) << models->body;
  json m = json::parse(models->body);
  bool listed = false;
  for (const auto& e : m["data"]) listed |= e["id"] == "llama-fake" && e["owned_by"] == "vllm";
  EXPECT_TRUE(listed) << m.dump();

  // Unknown model: 404 naming the known ones.
  auto unknown = http_request({door.url}, "POST", "/v1/chat/completions",
                              R"({"model":"nope","messages":[]})", 5000);
  ASSERT_TRUE(unknown.ok());
  EXPECT_EQ(unknown->status, 404u);
  EXPECT_NE(unknown->body.find("llama-fake"), std::string::npos) << unknown->body;

  ASSERT_TRUE(eventually([&] { return service(f).value("state", "") == "up"; })) << f.log();
  // A request the server answers after 1.5 s: busy while it is in flight.
  std::optional<unsigned> status;
  std::thread client([&] {
    auto r = http_request({door.url}, "POST", "/v1/chat/completions",
                          R"({"model":"llama-fake","messages":[{"role":"user","content":"hi"}]})",
                          10000);
    if (r) status = r->status;
  });
  bool busy = eventually(
      [&] {
        json s = service(f);
        return s.value("requests_in_flight", 0) == 1 && s.value("busy", false) == true;
      },
      1200ms);
  client.join();
  EXPECT_TRUE(busy) << service(f).dump(2);
  EXPECT_EQ(status, 200u);
  EXPECT_TRUE(eventually([&] { return service(f).value("requests_in_flight", -1) == 0; }))
      << service(f).dump(2);
  // GET /v1/proxy (the dashboard's Request path panel): the front door, its models, the counts.
  json view = get(f, "/v1/proxy");
  EXPECT_EQ(view.value("enabled", false), true) << view.dump();
  EXPECT_EQ(view["front_door"].value("url", ""), door.url + "/v1") << view.dump();
  ASSERT_EQ(view["services"].size(), 1u) << view.dump();
  EXPECT_EQ(view["services"][0].value("requests_total", 0), 1) << view.dump();
  bool routed = false;  // the configured model, beside the one the probe reports
  for (const auto& m : view["models"]) routed |= m["model"] == "llama-fake" && m["service"] == "vllm";
  EXPECT_TRUE(routed) << view.dump();
  // The request path's counters are part of vramd's /metrics.
  auto metrics = http_request({f.url}, "GET", "/metrics", "", 5000);
  ASSERT_TRUE(metrics.ok());
  EXPECT_NE(
      metrics->body.find(
          "vramd_proxy_requests_total{service=\"vllm\",model=\"llama-fake\",status=\"200\"} 1"),
      std::string::npos)
      << metrics->body.substr(metrics->body.find("vramd_proxy"), 600);
}

// Issue 46: a plain llama-server (default flags: no /slots, no /metrics, no `models` in the
// config) is known by its own /v1/models: the front door lists and routes its model, `vramd
// services` shows it, and Ollama's /api/tags lists only what an Ollama serves.
TEST(ProxyE2E, APlainLlamaServersModelIsListedAndRoutedWithoutConfiguredModels) {
  DaemonFixture f;
  FakeService llama(f, "llamacpp", {"--model-bytes", "2GiB", "--model", "/models/tiny.gguf"});
  // Ollama's default keep_alive unloads a model after 5 min: its installed ones still route.
  FakeService ollama(f, "ollama", {"--model-bytes", "2GiB", "--model", "qwen2.5:7b", "--unloaded"});
  int port = testing::free_port();
  std::string door = fmt::format("http://127.0.0.1:{}", port);
  f.start(
      fmt::format("[proxy]\nlisten = \"127.0.0.1:{}\"\n\n[services.llama]\nkind = "
                  "\"llamacpp\"\nurl = \"{}\"\n\n[services.ollama]\nkind = \"ollama\"\n"
                  "url = \"{}\"\nmodels = [\"phi3:mini\"]\n",
                  port, llama.url(), ollama.url()));
  json listed;
  ASSERT_TRUE(eventually([&] {
    auto r = http_request({door}, "GET", "/v1/models", "", 5000);
    if (!r || r->status != 200) return false;
    listed = json::parse(r->body, nullptr, false);
    for (const auto& e : listed["data"])
      if (e["id"] == "/models/tiny.gguf" && e["owned_by"] == "llama") return true;
    return false;
  })) << listed.dump()
      << get(f, "/v1/services/llama").dump(2) << f.log();
  auto chat = http_request(
      {door}, "POST", "/v1/chat/completions",
      R"({"model":"/models/tiny.gguf","messages":[{"role":"user","content":"hi"}]})", 10000);
  ASSERT_TRUE(chat.ok()) << chat.error();
  EXPECT_EQ(chat->status, 200u) << chat->body;
  EXPECT_EQ(json::parse(chat->body, nullptr, false)["choices"].size(), 1u) << chat->body;
  // Its busy is unknown without --slots/--metrics, and that is no probe error.
  json svc = get(f, "/v1/services/llama");
  EXPECT_TRUE(svc["probe_error"].is_null()) << svc.dump(2);
  EXPECT_TRUE(svc["models"].is_array() && svc["models"].size() == 1u) << svc.dump(2);
  // `vramd services`: the probed model, and a configured one beside what the probe lists.
  auto table = testing::run_cli({"services", "--url", f.url}, f.env(), f.dir);
  EXPECT_NE(table.out.find("/models/tiny.gguf"), std::string::npos) << table.out << table.err;
  EXPECT_NE(table.out.find("phi3:mini"), std::string::npos) << table.out;
  // Ollama's /api/tags: Ollama's models only (llama-server has no /api/chat), its installed
  // one too.
  json t;
  std::set<std::string> names;
  EXPECT_TRUE(eventually([&] {
    auto tags = http_request({door}, "GET", "/api/tags", "", 5000);
    if (!tags || tags->status != 200) return false;
    t = json::parse(tags->body, nullptr, false);
    names.clear();
    for (const auto& m : t["models"]) names.insert(m.value("name", ""));
    return names.count("qwen2.5:7b") == 1;
  })) << t.dump();
  EXPECT_EQ(names.count("/models/tiny.gguf"), 0u) << t.dump();
  EXPECT_EQ(names.count("phi3:mini"), 1u) << t.dump();
  auto all = http_request({door}, "GET", "/v1/models", "", 5000);
  ASSERT_TRUE(all.ok());
  EXPECT_NE(all->body.find("qwen2.5:7b"), std::string::npos) << all->body;
}

TEST(ProxyE2E, ARequestForAnUnloadedVllmIsHeldWhileVramdWakesIt) {
  DaemonFixture f;
  FakeService vllm(f, "vllm", {"--model-bytes", "8GiB"});
  FrontDoor door(f, vllm);
  ASSERT_TRUE(eventually([&] { return service(f).value("bytes", Bytes{0}) == 8 * GiB; }))
      << service(f).dump(2) << f.log();
  // Put it to sleep through vramd: verified freed.
  auto unload = http_request({f.url}, "POST", "/v1/services/vllm/unload", "", 40000);
  ASSERT_TRUE(unload.ok());
  ASSERT_EQ(json::parse(unload->body).value("outcome", ""), "freed") << unload->body;

  auto r =
      http_request({door.url}, "POST", "/v1/chat/completions",
                   R"({"model":"llama-fake","messages":[{"role":"user","content":"hi"}]})", 20000);
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(r->status, 200u) << r->body;
  auto woken = testing::events_of(f, "service.woken");
  ASSERT_EQ(woken.size(), 1u) << get(f, "/v1/events?limit=100").dump(2);
  EXPECT_NE(woken[0]["message"].get<std::string>().find("wake_up"), std::string::npos)
      << woken[0].dump();
  EXPECT_TRUE(eventually([&] { return service(f).value("bytes", Bytes{0}) == 8 * GiB; }))
      << "its memory came back";
}

// The wake is admitted for what vLLM was measured to take (no vram_estimate anywhere), evicts
// the idle ComfyUI that stands in the way, says so in its event, and the peak outlives a restart.
TEST(ProxyE2E, AWakeIsAdmittedForTheMeasuredPeakAndEvictsTheIdleHolderInTheWay) {
  DaemonFixture f;
  FakeService vllm(f, "vllm", {"--model-bytes", "8GiB", "--model", "llama-fake"});
  FakeService comfy(f, "comfyui", {"--model-bytes", "17GiB", "--unloaded"});
  std::string comfy_toml = fmt::format(
      "[services.comfyui]\nkind = \"comfyui\"\nurl = \"{}\"\nmin_idle = \"1s\"\n", comfy.url());
  FrontDoor door(f, vllm, comfy_toml);
  ASSERT_TRUE(eventually([&] {
    return service(f)["load_peaks"].value("llama-fake", Bytes{0}) == 8 * GiB;
  })) << service(f).dump(2) << f.log();
  auto unload = http_request({f.url}, "POST", "/v1/services/vllm/unload", "", 40000);
  ASSERT_TRUE(unload.ok());
  ASSERT_EQ(json::parse(unload->body).value("outcome", ""), "freed") << unload->body;
  // ComfyUI loads 17 GiB: the 8 GiB vLLM needs back no longer fit in the 24 GiB card.
  auto prompt = http_request({comfy.url()}, "POST", "/prompt", R"({"prompt":{}})", 5000);
  ASSERT_TRUE(prompt.ok() && prompt->status == 200) << (prompt ? prompt->body : prompt.error());
  ASSERT_TRUE(eventually([&] {
    return get(f, "/v1/services/comfyui").value("bytes", Bytes{0}) == 17 * GiB;
  })) << f.log();

  auto r =
      http_request({door.url}, "POST", "/v1/chat/completions",
                   R"({"model":"llama-fake","messages":[{"role":"user","content":"hi"}]})", 30000);
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(r->status, 200u) << r->body << f.log();
  auto woken = testing::events_of(f, "service.woken");
  ASSERT_EQ(woken.size(), 1u) << get(f, "/v1/events?limit=100").dump(2);
  std::string msg = woken[0]["message"].get<std::string>();
  EXPECT_NE(msg.find("room for 8.0 GiB (the measured peak of llama-fake in its past loads)"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("evicted comfyui"), std::string::npos) << msg;
  EXPECT_EQ(comfy.state().value("loaded", true), false) << "comfyui was unloaded for the wake";
  EXPECT_TRUE(eventually([&] { return service(f).value("bytes", Bytes{0}) == 8 * GiB; }));

  // The learned peak is in the store: a restarted vramd knows it before it sees a load.
  f.daemon.reset();
  f.start(fmt::format("[services.vllm]\nkind = \"vllm\"\nurl = \"{}\"\n", vllm.url()));
  EXPECT_EQ(service(f)["load_peaks"].value("llama-fake", Bytes{0}), 8 * GiB) << service(f).dump(2);
}

// Ollama unloaded its model by itself (keep_alive): nothing to wake, but the load a request for
// that model is about to make is admitted first, for its measured peak, and the idle ComfyUI in
// the way is evicted for it rather than the load failing for memory.
TEST(ProxyE2E, ALoadOnTheRequestItselfIsAdmittedFirstWhenItsSizeIsKnown) {
  DaemonFixture f;
  FakeService ollama(f, "ollama", {"--model-bytes", "8GiB", "--model", "llama3.1:8b"});
  FakeService comfy(f, "comfyui", {"--model-bytes", "17GiB", "--unloaded"});
  int port = testing::free_port();
  f.start(fmt::format(
      "[proxy]\nlisten = \"127.0.0.1:{}\"\n\n[services.ollama]\nkind = \"ollama\"\nurl = \"{}\"\n\n"
      "[services.comfyui]\nkind = \"comfyui\"\nurl = \"{}\"\nmin_idle = \"1s\"\n",
      port, ollama.url(), comfy.url()));
  ASSERT_TRUE(eventually([&] {
    return get(f, "/v1/services/ollama")["load_peaks"].value("llama3.1:8b", Bytes{0}) == 8 * GiB;
  })) << get(f, "/v1/services/ollama").dump(2) << f.log();
  // Ollama's own keep-alive ends: the model goes, behind vramd's back.
  auto bye = http_request({ollama.url()}, "POST", "/api/generate",
                          R"({"model":"llama3.1:8b","keep_alive":0})", 5000);
  ASSERT_TRUE(bye.ok() && bye->status == 200);
  auto prompt = http_request({comfy.url()}, "POST", "/prompt", R"({"prompt":{}})", 5000);
  ASSERT_TRUE(prompt.ok() && prompt->status == 200);
  ASSERT_TRUE(eventually([&] {
    return get(f, "/v1/services/comfyui").value("bytes", Bytes{0}) == 17 * GiB &&
           get(f, "/v1/services/ollama").value("bytes", Bytes{1}) == 0;
  })) << f.log();

  auto r = http_request({fmt::format("http://127.0.0.1:{}", port)}, "POST", "/api/chat",
                        R"({"model":"llama3.1:8b","messages":[{"role":"user","content":"hi"}],"stream":false})",
                        30000);
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(r->status, 200u) << r->body << f.log();
  auto admitted = testing::events_of(f, "service.load_admitted");
  ASSERT_EQ(admitted.size(), 1u) << get(f, "/v1/events?limit=100").dump(2);
  std::string msg = admitted[0]["message"].get<std::string>();
  EXPECT_NE(msg.find("room for 8.0 GiB (the measured peak of llama3.1:8b in its past loads)"),
            std::string::npos) << msg;
  EXPECT_NE(msg.find("evicted comfyui"), std::string::npos) << msg;
  EXPECT_EQ(comfy.state().value("loaded", true), false);
  EXPECT_TRUE(eventually([&] { return get(f, "/v1/services/ollama").value("bytes", Bytes{0}) == 8 * GiB; }));
  // The load's lease ends once the load shows: nothing stays promised twice.
  EXPECT_TRUE(eventually([&] {
    for (const auto& l : get(f, "/v1/leases").value("leases", json::array()))
      if (l.value("label", "") == "load ollama" && l.value("state", "") == "granted") return false;
    return true;
  })) << get(f, "/v1/leases").dump(2);
}

}  // namespace
}  // namespace vramd
