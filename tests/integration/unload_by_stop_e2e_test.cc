// Issue 46 through the real daemon, with plain llama-servers (fake-gpu-server --kind llamacpp
// without --router: no unload call): one vramd runs is freed by its stop (`vramd free` says
// freed and exits 0, no backoff, and a lease that needs its room stops it again and is granted);
// one vramd neither runs nor can stop is no eviction candidate, and a lease's reason says so.
// And a start is used as soon as the server answers: a wake through the front door of a server
// ready at once costs well under a second (it was one second and more).
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
// Named, not anonymous: its helpers share a unity batch with other tests' (cmake/unity.cmake).
namespace unload_by_stop_e2e_test {

using nlohmann::json;
using testing::Child;
using testing::DaemonFixture;
using testing::events_of;
using testing::eventually;
using testing::FakeService;
using testing::get;
using testing::run_cli;
using testing::slurp;
using namespace std::chrono_literals;

// "sup": a plain llama-server that vramd runs, holding 3 GiB once up, serving model "m".
std::string supervised_llama(const DaemonFixture& f, int port, const std::string& extra = "") {
  return fmt::format(
      "[services.sup]\nkind = \"llamacpp\"\nurl = \"http://127.0.0.1:{0}\"\nmin_idle = \"1s\"\n"
      "stop_timeout = \"3s\"\nstart = [\"{1}/fake-gpu-server\", \"--kind\", \"llamacpp\", "
      "\"--port\", \"{0}\", \"--state\", \"{2}\", \"--model-bytes\", \"3GiB\", \"--model\", "
      "\"m\"]\n{3}\n",
      port, testing::build_dir(), f.state, extra);
}

Bytes bytes_of(const DaemonFixture& f, const std::string& name) {
  return get(f, "/v1/services/" + name).value("bytes", Bytes{0});
}

unsigned post_status(const DaemonFixture& f, const std::string& target) {
  auto r = http_request({f.url}, "POST", target, "", 60000);
  return r ? r->status : 0;
}

TEST(UnloadByStopE2E, APlainLlamaServerVramdRunsIsFreedByItsStopAndALeaseStopsItAgain) {
  DaemonFixture f;
  int port = testing::free_port();
  f.start(supervised_llama(f, port));
  ASSERT_EQ(post_status(f, "/v1/services/sup/start?wait=true"), 200u) << f.log();
  ASSERT_TRUE(eventually([&] { return bytes_of(f, "sup") == 3 * GiB; })) << f.log();

  // `vramd free`: its stop is its unload, judged by the GPU's bytes.
  auto r = run_cli({"free", "sup", "--url", f.url}, {}, f.dir);
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("freed: 3.0 GiB → 0 B"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("stopped instead"), std::string::npos) << r.out;
  json s = get(f, "/v1/services/sup");
  EXPECT_EQ(s["last_unload"]["outcome"], "freed") << s.dump(2);
  EXPECT_TRUE(s["backoff_until"].is_null()) << s.dump(2);
  EXPECT_EQ(s["process"]["state"], "stopped") << s.dump(2);
  EXPECT_TRUE(events_of(f, "unload.failed").empty()) << get(f, "/v1/events").dump(2);

  // Up again, idle: `vramd run --vram 16GiB` needs its room, stops it, and runs.
  ASSERT_EQ(post_status(f, "/v1/services/sup/start?wait=true"), 200u) << f.log();
  ASSERT_TRUE(eventually([&] {
    json st = get(f, "/v1/services/sup");
    return st.value("bytes", Bytes{0}) == 3 * GiB && !st["idle_since"].is_null();
  })) << f.log();
  std::this_thread::sleep_for(1100ms);  // idle past min_idle
  Child run({testing::vramd_bin(), "run", "--url", "unix:" + f.dir.file("vramd.sock"), "--vram",
             "22GiB", "--timeout", "30s", "--", "true"},
            {}, f.dir.file("run.log"));
  int status = run.wait_exit(40s);
  ASSERT_TRUE(WIFEXITED(status)) << slurp(f.dir.file("run.log"));
  EXPECT_EQ(WEXITSTATUS(status), 0) << slurp(f.dir.file("run.log")) << f.log();
  ASSERT_TRUE(eventually([&] { return events_of(f, "unload.freed").size() == 2; }))
      << get(f, "/v1/events").dump(2);
  EXPECT_EQ(events_of(f, "unload.freed")[1]["data"]["reason"], "eviction")
      << events_of(f, "unload.freed")[1].dump(2);
  EXPECT_TRUE(events_of(f, "unload.failed").empty());
}

TEST(UnloadByStopE2E, APlainLlamaServerVramdCannotStopIsNoCandidateAndTheReasonSaysSo) {
  DaemonFixture f;
  FakeService llama(f, "llamacpp", {"--model-bytes", "3GiB"});
  f.start(fmt::format("[services.llama]\nkind = \"llamacpp\"\nurl = \"{}\"\nmin_idle = \"1s\"\n",
                      llama.url()));
  ASSERT_TRUE(eventually([&] {
    json st = get(f, "/v1/services/llama");
    return st.value("bytes", Bytes{0}) == 3 * GiB && !st["idle_since"].is_null();
  })) << f.log();
  std::this_thread::sleep_for(1100ms);  // idle past min_idle
  Child holder({"sleep", "3600"});
  auto posted =
      http_request({f.url}, "POST", "/v1/leases",
                   json{{"vram", "22GiB"}, {"gpu", 0}, {"pid", holder.pid()}}.dump(), 10000);
  ASSERT_TRUE(posted.ok());
  ASSERT_EQ(posted->status, 201u) << posted->body;
  uint64_t id = json::parse(posted->body)["id"];
  json lease;
  ASSERT_TRUE(eventually([&] {
    lease = get(f, fmt::format("/v1/leases/{}", id));
    return lease.value("reason", json::object()).value("text", "").find("vramd cannot free it") !=
           std::string::npos;
  })) << lease.dump(2)
      << get(f, "/v1/events").dump(2);
  EXPECT_EQ(lease["state"], "queued");
  EXPECT_NE(lease["reason"]["text"].get<std::string>().find("llama holds 3.0 GiB"),
            std::string::npos)
      << lease.dump(2);
  // Asked once at most (router mode is assumed until its answer), and never again.
  std::this_thread::sleep_for(2s);
  EXPECT_LE(events_of(f, "unload.failed").size(), 1u) << get(f, "/v1/events").dump(2);
  EXPECT_LE(llama.state().value("unload_calls", 0), 1);
  EXPECT_EQ(bytes_of(f, "llama"), 3 * GiB);
  // By hand: refused, saying why.
  auto r = run_cli({"free", "llama", "--url", f.url}, {}, f.dir);
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("vramd cannot free llama"), std::string::npos) << r.out << r.err;
}

// A wake through the front door starts the server; it is ready at once, and is used as soon as
// its health check answers, which comes within tens of milliseconds of its start.
// A plain server's model, never configured, stays routed while it is stopped, so a request
// starts it again: also after a start and a stop in a row. (On a real llama-server b4748 a stop
// right after a start forgot the model, 404 model_not_found; the fake's probe comes sooner and
// this test passes without the fix too: it guards the behaviour, it does not reproduce that.)
TEST(UnloadByStopE2E, AStoppedServersModelStillStartsItWithoutConfiguredModels) {
  DaemonFixture f;
  int door = testing::free_port();
  int port = testing::free_port();
  f.start(fmt::format("[proxy]\nlisten = \"127.0.0.1:{}\"\n\n{}", door, supervised_llama(f, port)));
  std::string front = fmt::format("http://127.0.0.1:{}", door);
  ASSERT_EQ(post_status(f, "/v1/services/sup/start?wait=true"), 200u) << f.log();
  ASSERT_TRUE(eventually([&] { return get(f, "/v1/services/sup")["models"] == json::array({"m"}); }))
      << get(f, "/v1/services/sup").dump(2);
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ(post_status(f, "/v1/services/sup/stop?wait=true"), 200u) << f.log();
    if (i == 1) {  // a start and a stop at once: no probe in between
      ASSERT_EQ(post_status(f, "/v1/services/sup/start?wait=true"), 200u) << f.log();
      ASSERT_EQ(post_status(f, "/v1/services/sup/stop?wait=true"), 200u) << f.log();
    }
    auto listed = http_request({front}, "GET", "/v1/models", "", 5000);
    ASSERT_TRUE(listed.ok());
    EXPECT_NE(listed->body.find("\"m\""), std::string::npos) << listed->body;
    auto r = http_request({front}, "POST", "/v1/chat/completions",
                          R"({"model":"m","messages":[{"role":"user","content":"hi"}]})", 20000);
    ASSERT_TRUE(r.ok()) << r.error();
    EXPECT_EQ(r->status, 200u) << r->body << f.log();
  }
}

TEST(UnloadByStopE2E, AWakeOfAServerReadyAtOnceTakesWellUnderASecond) {
  DaemonFixture f;
  int door = testing::free_port();
  int port = testing::free_port();
  f.start(fmt::format("[proxy]\nlisten = \"127.0.0.1:{}\"\n\n{}", door,
                      supervised_llama(f, port, "models = [\"m\"]")));
  const std::string chat = R"({"model":"m","messages":[{"role":"user","content":"hi"}]})";
  std::vector<double> took;
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(get(f, "/v1/services/sup")["process"]["state"], "stopped");
    auto t0 = std::chrono::steady_clock::now();
    auto r = http_request({fmt::format("http://127.0.0.1:{}", door)}, "POST",
                          "/v1/chat/completions", chat, 20000);
    took.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    ASSERT_TRUE(r.ok()) << r.error() << f.log();
    ASSERT_EQ(r->status, 200u) << r->body << f.log();
    ASSERT_EQ(post_status(f, "/v1/services/sup/stop?wait=true"), 200u) << f.log();
  }
  // A second and more before (the first check came a second after the start); a behavioural
  // bound, not a benchmark: the fastest of three.
  EXPECT_LT(*std::min_element(took.begin(), took.end()), 0.5)
      << fmt::format("{:.3f} {:.3f} {:.3f} s", took[0], took[1], took[2]);
}

}  // namespace unload_by_stop_e2e_test
}  // namespace vramd
