// The simulator is the daemon's core (issue 13 item 6): one short story told twice, as a trace
// through `vramd sim`'s vramd policy and as the real daemon on the test GPU with fake servers,
// from the same config, gives the same unloads, grants and wakes in the same order.
#include <fstream>
#include <thread>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/client.h"
#include "core/config.h"
#include "integration/daemon_fixture.h"
#include "sim/sim.h"

namespace vramd {
namespace {

using nlohmann::json;
using testing::DaemonFixture;
using testing::eventually;
using testing::FakeService;
using testing::get;
using namespace std::chrono_literals;

// A 24 GiB GPU with 400 MiB of its own; "big" (16 GiB) and "small" (4 GiB) loaded and idle.
// j1 (12 GiB) needs big gone (small alone frees too little); j2 (6 GiB) then fits beside j1 and
// small; after j1 ends, j3 (14 GiB) needs small gone.
const char* kTrace = R"({"t":0,"type":"gpu","index":0,"total":"24GiB","baseline":"400MiB"}
{"t":0,"type":"service","name":"big","gpu":0,"model_bytes":"16GiB","load_seconds":1,"unload_seconds":1.5}
{"t":0,"type":"service","name":"small","gpu":0,"model_bytes":"4GiB","load_seconds":1,"unload_seconds":1.5}
{"t":0,"type":"request","service":"big","duration":0.1}
{"t":0,"type":"request","service":"small","duration":0.1}
{"t":10,"type":"job","name":"j1","gpu":0,"bytes":"12GiB","duration":20}
{"t":12,"type":"job","name":"j2","gpu":0,"bytes":"6GiB","duration":100}
{"t":40,"type":"job","name":"j3","gpu":0,"bytes":"14GiB","duration":10}
{"t":120,"type":"end"}
)";

std::string services_toml(const std::string& big_url, const std::string& small_url) {
  // The first line lands in the fixture's [gpu] table.
  return fmt::format(
      "baseline = \"400MiB\"\n"
      "[services.big]\nkind = \"comfyui\"\nurl = \"{}\"\nmin_idle = \"1s\"\n"
      "[services.small]\nkind = \"comfyui\"\nurl = \"{}\"\nmin_idle = \"1s\"\n",
      big_url, small_url);
}

std::vector<std::string> sim_story(const Config& config) {
  auto trace = sim::parse_trace(kTrace, "story.jsonl");
  EXPECT_TRUE(trace.ok()) << trace.error();
  auto policy = sim::make_policy("vramd", config, true);
  EXPECT_TRUE(policy.ok());
  std::vector<std::string> out;
  for (const auto& d : sim::run_policy(*trace, **policy).decisions)
    if (d.what.rfind("unload ", 0) == 0 || d.what.rfind("grant ", 0) == 0) out.push_back(d.what);
  return out;
}

uint64_t lease(const DaemonFixture& f, const std::string& label, const std::string& vram) {
  auto r = http_request({f.url}, "POST", "/v1/leases",
                        json{{"vram", vram}, {"label", label}}.dump(), 10000);
  EXPECT_TRUE(r.ok() && r->status == 201) << (r.ok() ? r->body : r.error());
  uint64_t id = r.ok() ? json::parse(r->body, nullptr, false).value("id", uint64_t{0}) : 0;
  EXPECT_TRUE(eventually([&] {
    return get(f, fmt::format("/v1/leases/{}", id)).value("state", "") == "granted";
  })) << get(f, "/v1/leases").dump(2);
  return id;
}

std::vector<std::string> daemon_story(DaemonFixture& f) {
  uint64_t j1 = lease(f, "j1", "12GiB");
  lease(f, "j2", "6GiB");
  auto r = http_request({f.url}, "DELETE", fmt::format("/v1/leases/{}", j1), "", 5000);
  EXPECT_TRUE(r.ok());
  lease(f, "j3", "14GiB");
  std::vector<std::string> out;
  for (const auto& e : get(f, "/v1/events?limit=1000").value("events", json::array())) {
    std::string type = e.value("type", ""), subject = e.value("subject", "");
    if (type == "unload.started") out.push_back("unload " + subject);
    if (type == "lease.granted") out.push_back("grant " + subject.substr(0, subject.find('#')));
  }
  return out;
}

TEST(SimE2E, AShortTraceGivesTheSameUnloadsAndGrantsInTheSameOrderAsTheDaemon) {
  DaemonFixture f;
  FakeService big(f, "comfyui", {"--model-bytes", "16GiB", "--unload-delay", "1500ms"});
  FakeService small(f, "comfyui", {"--model-bytes", "4GiB", "--unload-delay", "1500ms"});
  std::string toml = services_toml(big.url(), small.url());
  f.start(toml);
  ASSERT_TRUE(eventually([&] {
    json b = get(f, "/v1/services/big"), s = get(f, "/v1/services/small");
    return b.value("bytes", Bytes{0}) == 16 * GiB && s.value("bytes", Bytes{0}) == 4 * GiB &&
           !b["idle_since"].is_null() && !s["idle_since"].is_null();
  })) << f.log();
  std::this_thread::sleep_for(1100ms);  // idle past min_idle, as in the trace by 10 s

  auto config = parse_config("[gpu]\n" + toml, "vramd.toml");
  ASSERT_TRUE(config.ok()) << config.error();
  std::vector<std::string> expected = {"unload big", "grant j1", "grant j2", "unload small",
                                       "grant j3"};
  EXPECT_EQ(sim_story(*config), expected);
  EXPECT_EQ(daemon_story(f), expected) << f.log();
}

// The same with a wake in it (core/wakes.h): j1 evicts big; j2 fits; once j1 ended, a request
// for big's model is held while the core wakes big, evicting small for it; j3 then needs big
// gone again. The daemon's servers are fake vLLMs (they keep a CUDA context asleep, as real ones
// do); the sim's are its generic servers with a wake call. The sim's "load" is the daemon's wake.
const char* kWakeTrace = R"({"t":0,"type":"gpu","index":0,"total":"24GiB","baseline":"400MiB"}
{"t":0,"type":"service","name":"big","gpu":0,"model_bytes":"16GiB","load_seconds":1,"unload_seconds":1.5}
{"t":0,"type":"service","name":"small","gpu":0,"model_bytes":"4GiB","load_seconds":1,"unload_seconds":1.5}
{"t":0,"type":"request","service":"big","duration":0.1}
{"t":0,"type":"request","service":"small","duration":0.1}
{"t":10,"type":"job","name":"j1","gpu":0,"bytes":"12GiB","duration":20}
{"t":12,"type":"job","name":"j2","gpu":0,"bytes":"6GiB","duration":100}
{"t":35,"type":"request","service":"big","duration":0.1}
{"t":40,"type":"job","name":"j3","gpu":0,"bytes":"14GiB","duration":10}
{"t":120,"type":"end"}
)";

TEST(SimE2E, AShortTraceWithAWakeGivesTheSameWakesUnloadsAndGrantsAsTheDaemon) {
  DaemonFixture f;
  FakeService big(f, "vllm", {"--model-bytes", "16GiB", "--model", "big", "--unload-delay", "1500ms"});
  FakeService small(f, "vllm", {"--model-bytes", "4GiB", "--model", "small", "--unload-delay", "1500ms"});
  int door = testing::free_port();
  // The first line lands in the fixture's [gpu] table. Level 2 on both sides: the sim's servers
  // keep nothing in host RAM.
  std::string toml = fmt::format(
      "baseline = \"400MiB\"\n"
      "[proxy]\nlisten = \"127.0.0.1:{}\"\n"
      "[services.big]\nkind = \"vllm\"\nurl = \"{}\"\nmin_idle = \"1s\"\nsleep_level = 2\n"
      "[services.small]\nkind = \"vllm\"\nurl = \"{}\"\nmin_idle = \"1s\"\nsleep_level = 2\n",
      door, big.url(), small.url());
  f.start(toml);
  ASSERT_TRUE(eventually([&] {
    json b = get(f, "/v1/services/big"), s = get(f, "/v1/services/small");
    return b.value("bytes", Bytes{0}) == 16 * GiB && s.value("bytes", Bytes{0}) == 4 * GiB &&
           !b["idle_since"].is_null() && !s["idle_since"].is_null();
  })) << f.log();
  std::this_thread::sleep_for(1100ms);  // idle past min_idle, as in the trace by 10 s

  auto config = parse_config("[gpu]\n" + toml, "vramd.toml");
  ASSERT_TRUE(config.ok()) << config.error();
  auto trace = sim::parse_trace(kWakeTrace, "story.jsonl");
  ASSERT_TRUE(trace.ok()) << trace.error();
  auto policy = sim::make_policy("vramd", *config, true);
  ASSERT_TRUE(policy.ok());
  std::vector<std::string> simulated;
  for (const auto& d : sim::run_policy(*trace, **policy).decisions)
    if (d.what.rfind("unload ", 0) == 0 || d.what.rfind("grant ", 0) == 0 ||
        (d.what.rfind("load ", 0) == 0 && d.t > 0))
      simulated.push_back(d.what);
  std::vector<std::string> expected = {"unload big",   "grant j1",   "grant j2", "unload small",
                                       "load big",     "unload big", "grant j3"};
  EXPECT_EQ(simulated, expected);

  uint64_t j1 = lease(f, "j1", "12GiB");
  lease(f, "j2", "6GiB");
  auto r = http_request({f.url}, "DELETE", fmt::format("/v1/leases/{}", j1), "", 5000);
  EXPECT_TRUE(r.ok());
  auto chat = http_request({fmt::format("http://127.0.0.1:{}", door)}, "POST",
                           "/v1/chat/completions",
                           R"({"model":"big","messages":[{"role":"user","content":"hi"}]})", 30000);
  ASSERT_TRUE(chat.ok()) << chat.error();
  EXPECT_EQ(chat->status, 200u) << chat->body << f.log();
  std::this_thread::sleep_for(1100ms);  // idle past min_idle again, as in the trace by 5 s
  lease(f, "j3", "14GiB");
  std::vector<std::string> told;
  for (const auto& e : get(f, "/v1/events?limit=1000").value("events", json::array())) {
    std::string type = e.value("type", ""), subject = e.value("subject", "");
    if (type == "unload.started") told.push_back("unload " + subject);
    if (type == "service.woken") told.push_back("load " + subject);
    // The wake's own claim is the core's, not a job: the sim's world has no grant for it.
    if (type == "lease.granted" && subject.rfind("wake ", 0) != 0)
      told.push_back("grant " + subject.substr(0, subject.find('#')));
  }
  EXPECT_EQ(told, expected) << f.log();
}

TEST(SimCli, WrongArgumentsAreUsageErrorsAndJsonCarriesTheIssuesKeys) {
  testing::TempDir dir;
  std::string trace = testing::source_dir() + "/bench/traces/homelab-day.jsonl";
  EXPECT_EQ(testing::run_cli({"sim"}, {}, dir).code, 2);
  auto bad = testing::run_cli({"sim", trace, "--policy", "lru"}, {}, dir);
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find("unknown policy 'lru'"), std::string::npos) << bad.err;
  std::ofstream(dir.file("broken.jsonl")) << "{\"t\":0,\"type\":\"gpu\",\"index\":0}\n";
  auto broken = testing::run_cli({"sim", dir.file("broken.jsonl")}, {}, dir);
  EXPECT_EQ(broken.code, 1);
  EXPECT_EQ(broken.err,
            dir.file("broken.jsonl") + ":1:30: missing 'total' (a size, e.g. \"16GiB\")\n");

  auto ok = testing::run_cli({"sim", trace, "--policy", "never", "--policy", "vramd", "--json",
                              "--plot", dir.file("t.svg")},
                             {}, dir);
  ASSERT_EQ(ok.code, 0) << ok.err;
  json out = json::parse(ok.out);
  ASSERT_EQ(out["policies"].size(), 2u);
  for (const char* key :
       {"policy", "job_wait_p50_s", "job_wait_p95_s", "job_wait_max_s", "blocked_by_idle_job_s",
        "reloads", "reload_s", "request_latency_p50_s", "request_latency_p95_s", "idle_gib_h",
        "unload_calls", "unload_ineffective", "jobs_never_admitted"})
    EXPECT_TRUE(out["policies"][1].contains(key)) << key;
  EXPECT_EQ(out["policies"][1]["policy"], "vramd");
  EXPECT_NE(testing::slurp(dir.file("t.svg")).find("<svg"), std::string::npos);
}

}  // namespace
}  // namespace vramd
