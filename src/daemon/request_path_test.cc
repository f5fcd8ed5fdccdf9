// The request path's shell side alone: in-flight counts to the core (at once on 0 <-> 1, one
// event per loop turn in between), a held request's wake asked of the core and its answer,
// progress and abandon, stop, and the proxy opened from the config.
#include "daemon/request_path.h"

#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>

namespace vramd {
namespace request_path_test {

namespace asio = boost::asio;

struct Core {
  std::vector<Event> fed;
  std::set<std::string> ready;  // "service/model" the core calls ready
  bool wakeable = true;

  std::vector<std::pair<std::string, std::vector<std::string>>> served = {{"ollama", {"llama3"}}};
  RequestPath::Hooks hooks() {
    return {
        [this](const Event& e) { fed.push_back(e); },
        [this](const std::string& s, const std::string& m) { return ready.count(s + "/" + m) > 0; },
        [this](const std::string&) { return wakeable; },
        [this](const RequestPath::Hooks::EachModels& each) {
          for (const auto& [service, models] : served)
            each(service, service.rfind("ollama", 0) == 0, models);
        }};
  }
  template <typename T>
  std::vector<T> all() const {
    std::vector<T> out;
    for (const auto& e : fed)
      if (const T* t = std::get_if<T>(&e)) out.push_back(*t);
    return out;
  }
};

// Runs the handlers posted so far (one turn's worth and what they post).
void drain(asio::io_context& io) {
  io.restart();
  io.poll();
}

TEST(RequestPathTest, TheFirstAndLastRequestReachTheCoreAtOnceTheCountsBetweenOncePerTurn) {
  asio::io_context io;
  Core core;
  RequestPath path(io, core.hooks());
  path.request_started("comfyui");  // 0 -> 1: at once
  ASSERT_EQ(core.all<RequestsInFlight>().size(), 1u);
  EXPECT_EQ(core.all<RequestsInFlight>()[0].in_flight, 1);
  for (int i = 0; i < 5; ++i) path.request_started("comfyui");  // 2..6: one event, later
  path.request_started("ollama");
  EXPECT_EQ(core.all<RequestsInFlight>().size(), 2u);  // ollama's 0 -> 1 only
  EXPECT_EQ(path.in_flight("comfyui"), 6);
  drain(io);
  auto fed = core.all<RequestsInFlight>();
  ASSERT_EQ(fed.size(), 3u);
  EXPECT_EQ(fed[2].service, "comfyui");
  EXPECT_EQ(fed[2].in_flight, 6);
  for (int i = 0; i < 6; ++i) path.request_ended("comfyui");
  drain(io);
  fed = core.all<RequestsInFlight>();
  // 5 (flushed), ..., 1 and 0 at once: the last one's end is never held back.
  EXPECT_EQ(fed.back().service, "comfyui");
  EXPECT_EQ(fed.back().in_flight, 0);
  EXPECT_EQ(path.in_flight("comfyui"), 0);
  path.request_ended("comfyui");  // more ends than starts: stays 0
  EXPECT_EQ(path.in_flight("comfyui"), 0);
}

// The proxy keeps its route table while the list is the same pointer: the list stays the same
// while the services' models do, and is another one as soon as any changes.
TEST(RequestPathTest, TheModelListIsKeptUntilAServicesModelsChange) {
  asio::io_context io;
  Core core;
  core.served = {{"ollama", {"llama3", "qwen"}}, {"vllm", {"mistral"}}};
  RequestPath path(io, core.hooks());
  ModelList first = path.models();
  ASSERT_EQ(first->size(), 3u);
  EXPECT_EQ((*first)[1].model, "qwen");
  EXPECT_EQ((*first)[2].service, "vllm");
  EXPECT_TRUE((*first)[0].ollama_api);  // /api/tags lists only these
  EXPECT_FALSE((*first)[2].ollama_api);
  EXPECT_EQ(path.models(), first);  // nothing changed: the same list

  core.served[0].second.pop_back();  // ollama unloaded qwen
  ModelList second = path.models();
  EXPECT_NE(second, first);
  ASSERT_EQ(second->size(), 2u);
  EXPECT_EQ((*second)[1].model, "mistral");
  EXPECT_EQ(first->size(), 3u);  // a request routing by the old list still has it whole

  core.served[1].first = "vllm-2";  // the same model, another service
  EXPECT_NE(path.models(), second);
  EXPECT_EQ(path.models()->back().service, "vllm-2");

  core.served.clear();
  EXPECT_TRUE(path.models()->empty());
  EXPECT_EQ(path.models(), path.models());
}

TEST(RequestPathTest, AHeldRequestsWakeIsTheCoresItsProgressAndAnswerReachTheRequest) {
  asio::io_context io;
  Core core;
  core.ready.insert("ollama/llama3");
  RequestPath path(io, core.hooks());
  EXPECT_TRUE(path.is_ready("ollama", "llama3"));
  EXPECT_FALSE(path.is_ready("ollama", "qwen"));
  EXPECT_EQ(path.models()->size(), 1u);

  std::vector<std::string> heard;
  std::optional<WakeResult> first, second;
  asio::co_spawn(io, [&]() -> asio::awaitable<void> {
    auto op = path.ensure_ready("ollama", "qwen", [&](const std::string& t) { heard.push_back(t); });
    first = co_await std::move(op);
  }, asio::detached);
  asio::co_spawn(io, [&]() -> asio::awaitable<void> {
    auto op = path.ensure_ready("comfyui", "", {});
    second = co_await std::move(op);
  }, asio::detached);
  drain(io);
  auto asked = core.all<WakeRequested>();
  ASSERT_EQ(asked.size(), 2u);
  EXPECT_EQ(asked[0].service, "ollama");
  EXPECT_EQ(asked[0].model, "qwen");
  EXPECT_TRUE(asked[0].can_wake);
  EXPECT_NE(asked[0].id, asked[1].id);
  EXPECT_FALSE(first || second);  // nothing until the core answers

  path.wake_progressed({asked[0].id, "unloading comfyui (16.0 GiB)"});
  path.wake_progressed({asked[1].id, "no one listens"});  // no progress callback: ignored
  EXPECT_EQ(heard, std::vector<std::string>{"unloading comfyui (16.0 GiB)"});

  WakeFinished no;
  no.id = asked[1].id;
  no.outcome = WakeOutcome::refused;
  no.message = "needs 12.0 GiB, ollama holds 16.0 GiB and is busy";
  no.holder = "ollama";
  path.wake_finished(no);
  path.wake_finished({asked[0].id});  // ready
  path.wake_finished({999});          // an id no one waits for
  drain(io);
  ASSERT_TRUE(first && second);
  EXPECT_TRUE(first->ok);
  EXPECT_FALSE(second->ok);
  EXPECT_EQ(second->reason, no.message);
  EXPECT_EQ(second->holder, "ollama");
}

TEST(RequestPathTest, AnAbandonedWakeIsCancelledOnlyForItsServiceAndModel) {
  asio::io_context io;
  Core core;
  core.wakeable = false;
  RequestPath path(io, core.hooks());
  std::optional<WakeResult> a, b, c;
  for (auto [out, service, model] : {std::tuple{&a, "ollama", "qwen"}, std::tuple{&b, "ollama", "llama3"},
                                     std::tuple{&c, "vllm", "qwen"}})
    asio::co_spawn(io, [&path, out = out, s = std::string(service), m = std::string(model)]()
                           -> asio::awaitable<void> {
      auto op = path.ensure_ready(s, m, {});
      *out = co_await std::move(op);
    }, asio::detached);
  drain(io);
  auto asked = core.all<WakeRequested>();
  ASSERT_EQ(asked.size(), 3u);
  EXPECT_FALSE(asked[0].can_wake);
  path.abandon_wake("ollama", "qwen");
  auto cancelled = core.all<WakeCancelled>();
  ASSERT_EQ(cancelled.size(), 1u);
  EXPECT_EQ(cancelled[0].id, asked[0].id);
}

TEST(RequestPathTest, StopAnswersEveryHeldRequestAndSendsNoMoreCounts) {
  asio::io_context io;
  Core core;
  RequestPath path(io, core.hooks());
  std::optional<WakeResult> held;
  asio::co_spawn(io, [&]() -> asio::awaitable<void> {
    auto op = path.ensure_ready("ollama", "qwen", {});
    held = co_await std::move(op);
  }, asio::detached);
  drain(io);
  path.request_started("ollama");
  path.request_started("ollama");  // 2: flushed on the next turn, which comes after stop
  size_t before = core.all<RequestsInFlight>().size();
  path.stop();
  drain(io);
  ASSERT_TRUE(held);
  EXPECT_FALSE(held->ok);
  EXPECT_EQ(held->reason, "vramd is stopping");
  EXPECT_EQ(core.all<RequestsInFlight>().size(), before);
  std::optional<WakeResult> late;
  asio::co_spawn(io, [&]() -> asio::awaitable<void> {
    auto op = path.ensure_ready("ollama", "qwen", {});
    late = co_await std::move(op);
  }, asio::detached);
  drain(io);
  ASSERT_TRUE(late);
  EXPECT_EQ(late->reason, "vramd is stopping");
  EXPECT_EQ(core.all<WakeRequested>().size(), 1u);  // the late one was not asked of the core
}

TEST(RequestPathTest, TheProxyOpensOnlyWhenTheConfigAsksAndDescribesItself) {
  asio::io_context io;
  Core core;
  Config none;
  RequestPath off(io, core.hooks());
  ASSERT_TRUE(off.start(none, nullptr));
  EXPECT_EQ(off.front_door_port(), 0);
  EXPECT_EQ(off.describe(none), nlohmann::json({{"enabled", false}}));
  EXPECT_EQ(off.metrics_text(), "");

  Config cfg;
  cfg.proxy.listen = "127.0.0.1:0";
  ServiceConfig svc;
  svc.name = "ollama";
  svc.kind = "ollama";
  svc.url = "http://127.0.0.1:1";
  cfg.services.push_back(svc);
  ServiceConfig found = svc;  // a discovered service is routed too (never managed)
  found.name = "found";
  found.discovered = true;
  cfg.services.push_back(found);
  EXPECT_TRUE(wants_proxy(cfg));
  EXPECT_TRUE(proxied(cfg.services[0]));
  EXPECT_TRUE(proxied(cfg.services[1]));
  RequestPath on(io, core.hooks());
  ASSERT_TRUE(on.start(cfg, nullptr));
  EXPECT_GT(on.front_door_port(), 0);
  on.request_started("ollama");
  nlohmann::json d = on.describe(cfg);
  EXPECT_EQ(d["enabled"], true);
  EXPECT_EQ(d["front_door"]["url"],
            "http://127.0.0.1:" + std::to_string(on.front_door_port()) + "/v1");
  ASSERT_EQ(d["services"].size(), 2u);  // the discovered one too
  EXPECT_EQ(d["services"][0]["name"], "ollama");
  EXPECT_EQ(d["services"][0]["in_flight"], 1);
  on.close();

  Config bad = cfg;
  bad.proxy.api_keys_file = "/nonexistent/vramd-keys";
  RequestPath refused(io, core.hooks());
  auto s = refused.start(bad, nullptr);
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().find("/nonexistent/vramd-keys"), std::string::npos) << s.error();
}

}  // namespace request_path_test
}  // namespace vramd
