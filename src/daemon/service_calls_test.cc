// The services' HTTP side alone, with an adapter of the test's own: a probe loop's answers, the
// core's unload, wake and health calls answered through the hooks, an unknown service's calls
// answered as failures, a probe moved by the core, and nothing fed once stopped.
#include "daemon/service_calls.h"

#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>

namespace vramd {
namespace {

namespace asio = boost::asio;
using namespace std::chrono_literals;

struct Counts {
  int probes = 0, unloads = 0, wakes = 0, health = 0;
  SleepDepth last_depth = SleepDepth::sleep1;
};

class TestAdapter : public Adapter {
 public:
  explicit TestAdapter(Counts& c) : c_(c) {}
  std::string kind() const override { return "test"; }
  asio::awaitable<ServiceProbe> probe() override {
    ServiceProbe p;
    p.reachable = true;
    p.models = {"model-" + std::to_string(++c_.probes)};
    co_return p;
  }
  asio::awaitable<UnloadCall> unload(SleepDepth depth) override {
    ++c_.unloads;
    c_.last_depth = depth;
    co_return UnloadCall{UnloadCall::Result::requested, "POST /free -> 200"};
  }
  bool can_wake() const override { return true; }
  asio::awaitable<UnloadCall> wake(SleepDepth depth) override {
    ++c_.wakes;
    c_.last_depth = depth;
    co_return UnloadCall{UnloadCall::Result::requested, "POST /wake_up -> 200"};
  }
  asio::awaitable<HealthCheck> health() override {
    ++c_.health;
    co_return HealthCheck{false, "GET /health -> 503"};
  }

 private:
  Counts& c_;
};

struct Fixture {
  asio::io_context io;
  Counts counts;
  std::vector<Event> fed;
  int unload_returned = 0;
  ServiceCalls calls{io,
                     {[this](const Event& e) { fed.push_back(e); }, [this] { ++unload_returned; }},
                     [this](const ServiceConfig& svc) -> Result<std::unique_ptr<Adapter>> {
                       if (svc.kind != "test") return make_error("unknown kind '" + svc.kind + "'");
                       return std::unique_ptr<Adapter>(std::make_unique<TestAdapter>(counts));
                     }};
  template <typename T>
  std::vector<T> all() const {
    std::vector<T> out;
    for (const auto& e : fed)
      if (const T* t = std::get_if<T>(&e)) out.push_back(*t);
    return out;
  }
  bool run_until(const std::function<bool()>& done, Duration limit = 5s) {
    auto until = std::chrono::steady_clock::now() + limit;
    while (!done() && std::chrono::steady_clock::now() < until) {
      io.restart();
      io.run_for(5ms);
    }
    return done();
  }
};

ServiceConfig service(std::string name, std::string kind = "test") {
  ServiceConfig s;
  s.name = std::move(name);
  s.kind = std::move(kind);
  return s;
}

TEST(ServiceCallsTest, TheCoresCallsAreAnsweredThroughTheHooks) {
  Fixture f;
  ASSERT_TRUE(f.calls.add(service("vllm")).ok());
  EXPECT_TRUE(f.calls.add(service("vllm")).ok());  // known: nothing changes
  auto bad = f.calls.add(service("odd", "nope"));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error(), "unknown kind 'nope'");
  EXPECT_TRUE(f.calls.has("vllm"));
  EXPECT_FALSE(f.calls.has("odd"));
  EXPECT_TRUE(f.calls.can_wake("vllm"));
  EXPECT_FALSE(f.calls.can_wake("odd"));

  f.calls.unload(CallUnload{"vllm", 7, SleepDepth::sleep2});
  f.calls.wake(CallWake{"vllm", 9, SleepDepth::sleep1});
  f.calls.check_health("vllm");
  f.calls.unload(CallUnload{"odd", 8, SleepDepth::sleep2});
  ASSERT_TRUE(f.run_until([&] {
    return f.all<UnloadCallDone>().size() == 2 && f.all<WakeCallDone>().size() == 1 &&
           f.all<HealthChecked>().size() == 1;
  }));
  auto unloads = f.all<UnloadCallDone>();
  EXPECT_EQ(unloads[0].service, "vllm");
  EXPECT_EQ(unloads[0].unload_id, 7u);
  EXPECT_EQ(unloads[0].call.result, UnloadCall::Result::requested);
  EXPECT_EQ(unloads[1].service, "odd");
  EXPECT_EQ(unloads[1].call.result, UnloadCall::Result::failed);
  EXPECT_EQ(unloads[1].call.message, "no adapter");
  EXPECT_EQ(f.unload_returned, 2);
  EXPECT_EQ(f.counts.unloads, 1);
  EXPECT_EQ(f.all<WakeCallDone>()[0].wake_id, 9u);
  EXPECT_EQ(f.counts.last_depth, SleepDepth::sleep1);
  EXPECT_FALSE(f.all<HealthChecked>()[0].ok);
  EXPECT_EQ(f.all<HealthChecked>()[0].message, "GET /health -> 503");
}

TEST(ServiceCallsTest, AProbeLoopAnswersAndTheCoreMovesItsNextProbe) {
  Fixture f;
  ASSERT_TRUE(f.calls.add(service("vllm")).ok());
  f.calls.watch("vllm", 1h);  // only the first probe unless moved
  ASSERT_TRUE(f.run_until([&] { return f.all<ProbeDone>().size() == 1; }));
  EXPECT_EQ(f.all<ProbeDone>()[0].probe.models, std::vector<std::string>{"model-1"});
  EXPECT_TRUE(f.all<ProbeDone>()[0].probe.can_wake);  // the adapter's fact, filled in here
  f.calls.schedule("vllm", 10ms);
  ASSERT_TRUE(f.run_until([&] { return f.all<ProbeDone>().size() == 2; }));

  f.calls.stop();
  f.calls.unload(CallUnload{"vllm", 1, SleepDepth::sleep2});
  f.calls.schedule("vllm", 1ms);
  f.run_until([] { return false; }, 100ms);
  EXPECT_EQ(f.all<ProbeDone>().size(), 2u);
  EXPECT_TRUE(f.all<UnloadCallDone>().empty());  // answered to no one
}

}  // namespace
}  // namespace vramd
