// The request path through the real daemon: the front door routes by model to a fake vLLM, a
// request in flight makes the service busy in vramd's eyes, and a request for an unloaded
// (asleep) vLLM wakes it first.
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
  // The request path's counters are part of vramd's /metrics.
  auto metrics = http_request({f.url}, "GET", "/metrics", "", 5000);
  ASSERT_TRUE(metrics.ok());
  EXPECT_NE(
      metrics->body.find(
          "vramd_proxy_requests_total{service=\"vllm\",model=\"llama-fake\",status=\"200\"} 1"),
      std::string::npos)
      << metrics->body.substr(metrics->body.find("vramd_proxy"), 600);
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

}  // namespace
}  // namespace vramd
