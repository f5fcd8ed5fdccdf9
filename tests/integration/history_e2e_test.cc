// The durations history through the real daemon (docs/history.md): a fake ComfyUI's /history
// read by the probe, its version changed by a restart (0.27.0 → 0.28.0) and then its arguments
// (--disable-async-offload), compared by version and by arguments through the API and the CLI;
// crashes split by the argument set they ran on, the suggested fix shown applied.
#include <sys/stat.h>

#include <sys/wait.h>

#include <cstdlib>
#include <fstream>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/client.h"
#include "integration/daemon_fixture.h"
#include "integration/test_util.h"

namespace vramd {
namespace history_e2e_test {

using namespace std::chrono_literals;
using nlohmann::json;
using testing::DaemonFixture;

// A ComfyUI graph: a checkpoint loader, two prompts, a sampler. Seeds and texts vary per run.
json workflow(int seed, int steps = 24) {
  return {{"4", {{"class_type", "CheckpointLoaderSimple"},
                 {"inputs", {{"ckpt_name", "flux1-dev-Q8_0.safetensors"}}}}},
          {"6", {{"class_type", "CLIPTextEncode"},
                 {"inputs", {{"text", fmt::format("a lighthouse at dusk, take {}", seed)},
                             {"clip", json::array({"4", 1})}}}}},
          {"3", {{"class_type", "KSampler"},
                 {"inputs", {{"seed", seed},
                             {"steps", steps},
                             {"cfg", 3.5},
                             {"sampler_name", "euler"},
                             {"scheduler", "simple"},
                             {"denoise", 1.0},
                             {"model", json::array({"4", 0})},
                             {"positive", json::array({"6", 0})}}}}}};
}

// A fake ComfyUI on a port of the test's choosing, so that a restart keeps its URL.
std::unique_ptr<testing::Child> comfy(const DaemonFixture& f, int port,
                                      std::vector<std::string> extra, const std::string& log) {
  std::vector<std::string> argv = {testing::build_dir() + "/fake-gpu-server", "--kind", "comfyui",
                                   "--port", std::to_string(port), "--state", f.state,
                                   "--model-bytes", "6GiB"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  auto c = std::make_unique<testing::Child>(argv, std::vector<std::string>{}, log);
  EXPECT_TRUE(testing::eventually(
      [&] { return testing::slurp(log).find(fmt::format("ready {}", port)) != std::string::npos; }))
      << testing::slurp(log);
  return c;
}

// Runs one prompt to its end on the fake.
void run_prompt(int port, int seed) {
  std::string url = fmt::format("http://127.0.0.1:{}", port);
  auto r = http_request({url}, "POST", "/prompt",
                                 json{{"prompt", workflow(seed)}, {"client_id", "t"}}.dump(), 5000);
  ASSERT_TRUE(r && r->status == 200) << (r ? r->body : r.error());
  std::string id = json::parse(r->body)["prompt_id"];
  ASSERT_TRUE(testing::eventually([&] {
    auto h = http_request({url}, "GET", "/history/" + id, "", 2000);
    if (!h || h->status != 200) return false;
    json j = json::parse(h->body, nullptr, false);
    return j.is_object() && j.contains(id) && j[id]["status"].value("completed", false);
  }, 20s)) << "prompt " << id << " did not finish";
}

// Runs tests/browser/history.test.mjs on the fixture's dashboard with `expect` (its JSON); its
// exit status (77: node or chromium not found at configure time), its output in `out`.
int run_browser(const json& expect, const testing::TempDir& dir, std::string& out) {
  namespace paths = vramd::test_paths;
  if (paths::browser_node().empty() || paths::browser_chromium().empty()) {
    out = "SKIPPED: node or chromium was not found when the build was configured (make deps)";
    return 77;
  }
  std::string file = dir.file("expect-history.json");
  std::ofstream(file) << expect.dump(2);
  std::string log = dir.file("browser-history.log");
  std::string cmd = fmt::format(
      "'{}' '{}/tests/browser/history.test.mjs' --url '{}' --expect '{}' --node-modules '{}' "
      "--chromium '{}' --screenshots '{}/screenshots' >'{}' 2>&1",
      paths::browser_node(), paths::source_dir(), expect.value("url", ""), file,
      paths::browser_modules(), paths::browser_chromium(), paths::build_dir(), log);
  int status = std::system(cmd.c_str());
  out = testing::slurp(log);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

size_t prompts_recorded(const DaemonFixture& f) {
  json h = testing::get(f, "/v1/history/records?service=comfy&kind=prompt&limit=1000");
  return h.value("records", json::array()).size();
}

TEST(HistoryE2E, PromptsComparedByVersionThenByArgumentsThroughApiAndCli) {
  DaemonFixture f;
  int port = testing::free_port();
  f.daemon_toml = "probe_interval = \"200ms\"\nquiet_probe_interval = \"400ms\"\n";
  auto fake = comfy(f, port, {"--version", "0.27.0", "--prompt-seconds", "0.6"}, f.dir.file("c1.log"));
  f.start(fmt::format("[services.comfy]\nkind = \"comfyui\"\nurl = \"http://127.0.0.1:{}\"\n", port));
  ASSERT_TRUE(testing::eventually([&] { return testing::get(f, "/v1/services/comfy").value("version", json()) == "0.27.0"; }))
      << testing::get(f, "/v1/services/comfy").dump(2);
  for (int seed = 1; seed <= 3; ++seed) run_prompt(port, seed);
  ASSERT_TRUE(testing::eventually([&] { return prompts_recorded(f) == 3; }, 15s))
      << testing::get(f, "/v1/history/records?service=comfy").dump(2);

  // The update: the same server restarted as 0.28.0, faster.
  fake.reset();
  fake = comfy(f, port, {"--version", "0.28.0", "--prompt-seconds", "0.3"}, f.dir.file("c2.log"));
  ASSERT_TRUE(testing::eventually([&] { return testing::get(f, "/v1/services/comfy").value("version", json()) == "0.28.0"; }));
  for (int seed = 4; seed <= 6; ++seed) run_prompt(port, seed);
  ASSERT_TRUE(testing::eventually([&] { return prompts_recorded(f) == 6; }, 15s))
      << testing::get(f, "/v1/history/records?service=comfy").dump(2);

  json h = testing::get(f, "/v1/history/records?service=comfy&limit=100");
  const json& newest = h["records"][0];
  EXPECT_EQ(newest["kind"], "prompt");
  EXPECT_EQ(newest["version"], "0.28.0");
  EXPECT_EQ(newest["outcome"], "success");
  EXPECT_EQ(newest["model"], "flux1-dev-Q8_0.safetensors");
  EXPECT_EQ(newest["gpu"], 0) << newest.dump(2);
  ASSERT_TRUE(newest["workflow"].is_string());
  std::string wf = newest["workflow"];
  for (const auto& r : h["records"]) EXPECT_EQ(r["workflow"], wf) << "seeds and texts must not change it";
  ASSERT_TRUE(newest["wait_seconds"].is_number()) << newest.dump(2);

  // One service.changed, with the old and new values.
  auto changed = testing::events_of(f, "service.changed");
  ASSERT_EQ(changed.size(), 1u) << testing::get(f, "/v1/events").dump(2);
  EXPECT_EQ(changed[0]["data"]["old_version"], "0.27.0");
  EXPECT_EQ(changed[0]["data"]["new_version"], "0.28.0");

  json cmp = testing::get(f, "/v1/history/durations?service=comfy&by=version&workflow=" + wf);
  ASSERT_EQ(cmp["groups"].size(), 2u) << cmp.dump(2);
  const json& old_v = cmp["groups"][0];
  const json& new_v = cmp["groups"][1];
  EXPECT_EQ(old_v["variant"], "0.27.0");
  EXPECT_EQ(new_v["variant"], "0.28.0");
  EXPECT_EQ(old_v["count"], 3);
  EXPECT_EQ(new_v["count"], 3);
  EXPECT_NEAR(old_v["p50_seconds"].get<double>(), 0.6, 0.15) << cmp.dump(2);
  EXPECT_NEAR(new_v["p50_seconds"].get<double>(), 0.3, 0.15) << cmp.dump(2);
  ASSERT_TRUE(new_v["change_pct"].is_number());
  EXPECT_LT(new_v["change_pct"].get<double>(), -25) << cmp.dump(2);
  EXPECT_GT(new_v["change_pct"].get<double>(), -75) << cmp.dump(2);

  // The fix: the same version restarted with --disable-async-offload, an argument change.
  fake.reset();
  fake = comfy(f, port, {"--version", "0.28.0", "--prompt-seconds", "0.3", "--disable-async-offload"},
               f.dir.file("c3.log"));
  ASSERT_TRUE(testing::eventually([&] { return testing::events_of(f, "service.changed").size() == 2; }))
      << testing::get(f, "/v1/events").dump(2);
  json args_change = testing::events_of(f, "service.changed")[1];
  EXPECT_EQ(args_change["data"]["args_diff"], json::array({"+--disable-async-offload"}))
      << args_change.dump(2);
  EXPECT_NE(args_change["message"].get<std::string>().find("+--disable-async-offload"), std::string::npos);
  run_prompt(port, 7);
  ASSERT_TRUE(testing::eventually([&] { return prompts_recorded(f) == 7; }, 15s));
  json by_args = testing::get(f, "/v1/history/durations?service=comfy&by=args");
  ASSERT_EQ(by_args["groups"].size(), 3u) << by_args.dump(2);  // three argument sets (the port's too)

  // The CLI reads the same.
  auto r = testing::run_cli({"history", "comfy", "--by", "version", "--url", f.url}, {}, f.dir);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("0.27.0"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("0.28.0"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("%"), std::string::npos) << r.out;
  r = testing::run_cli({"history", "comfy", "--by", "args", "--url", f.url}, {}, f.dir);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("+--disable-async-offload"), std::string::npos) << r.out;
  r = testing::run_cli({"history", "comfy", "--url", f.url}, {}, f.dir);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("success"), std::string::npos) << r.out;
  // The dashboard shows it: the card's version, last change and durations; the history view's
  // chart, one dot per prompt of the workflow, one line at the version change
  // (tests/browser/history.test.mjs).
  json expect = {{"version", "0.28.0"}, {"change", "+--disable-async-offload"}, {"points", 7},
                 {"markers", 1}, {"url", f.url + "/"}};
  std::string browser_out;
  int rc = run_browser(expect, f.dir, browser_out);
  if (rc != 77) {
    EXPECT_EQ(rc, 0) << browser_out;
  }

  // Wrong arguments: a clear message, exit 2 or the API's 400.
  r = testing::run_cli({"history", "comfy", "--by", "speed", "--url", f.url}, {}, f.dir);
  EXPECT_NE(r.code, 0);
  auto bad = http_request({f.url}, "GET", "/v1/history/durations?service=comfy&by=speed", "", 2000);
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400);
  EXPECT_NE(bad->body.find("by: expected version or args"), std::string::npos) << bad->body;
  bad = http_request({f.url}, "GET", "/v1/history/records?service=comfy&since=yesterday", "", 2000);
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400) << bad->body;
}

TEST(HistoryE2E, CrashesSplitByTheArgumentsTheyRanOnAndTheFixShownApplied) {
  DaemonFixture f;
  int port = testing::free_port();
  // ComfyUI with async offloading crashes at boot; with --disable-async-offload it runs.
  std::string script = f.dir.file("comfy.sh");
  std::ofstream(script) << fmt::format(
      "#!/bin/sh\n"
      "case \" $* \" in *' --disable-async-offload '*) exec {} --kind comfyui --port {} --state {} "
      "--model-bytes 2GiB \"$@\";; esac\n"
      "echo 'Using async weight offloading with 2 streams'\n"
      "sleep 0.2\n"
      "echo 'Traceback (most recent call last):'\n"
      "echo '  File \"/opt/ComfyUI/comfy/model_management.py\", line 1080, in sync_stream'\n"
      "echo 'torch.AcceleratorError: CUDA error: unknown error'\n"
      "exit 1\n",
      testing::build_dir() + "/fake-gpu-server", port, f.state);
  chmod(script.c_str(), 0755);
  auto service = [&](const std::string& extra) {
    return fmt::format(
        "[services.comfy]\nkind = \"comfyui\"\nurl = \"http://127.0.0.1:{}\"\nstart = [\"{}\"{}]\n"
        "max_restarts = 2\n",
        port, script, extra);
  };
  f.start(service(""));
  auto start = http_request({f.url}, "POST", "/v1/services/comfy/start", "", 5000);
  ASSERT_TRUE(start);
  ASSERT_TRUE(testing::eventually([&] {
    json d = testing::get(f, "/v1/doctor?service=comfy");
    return !d["services"].empty() && !d["services"][0]["crashes"].empty() &&
           d["services"][0]["crashes"][0]["count"] == 3;
  }, 30s)) << testing::get(f, "/v1/doctor?service=comfy").dump(2);

  // The fix applied: vramd restarted with the flag in `start`.
  f.daemon.reset();
  f.start(service(", \"--disable-async-offload\""));
  start = http_request({f.url}, "POST", "/v1/services/comfy/start?wait=true", "", 30000);
  ASSERT_TRUE(start && start->status == 200) << (start ? start->body : start.error());
  auto changed = testing::events_of(f, "service.changed");
  ASSERT_EQ(changed.size(), 1u) << testing::get(f, "/v1/events").dump(2);
  EXPECT_EQ(changed[0]["data"]["args_diff"], json::array({"+--disable-async-offload"}));

  json d = testing::get(f, "/v1/doctor?service=comfy");
  const json& c = d["services"][0]["crashes"][0];
  EXPECT_EQ(c["signature"], "cuda-async-offload") << d.dump(2);
  ASSERT_EQ(c["by_variant"].size(), 2u) << c.dump(2);
  EXPECT_EQ(c["by_variant"][0]["crashes"], 3);
  EXPECT_EQ(c["by_variant"][1]["crashes"], 0);
  EXPECT_EQ(c["by_variant"][1]["label"], "+--disable-async-offload");
  ASSERT_TRUE(c["applied"].is_object()) << c.dump(2);
  EXPECT_EQ(c["applied"]["option"], "--disable-async-offload");
  ASSERT_TRUE(c["summary"].is_string());
  EXPECT_NE(c["summary"].get<std::string>().find("0 in "), std::string::npos) << c["summary"];
  EXPECT_NE(c["summary"].get<std::string>().find("since +--disable-async-offload"), std::string::npos)
      << c["summary"];
  auto r = testing::run_cli({"doctor", "comfy", "--url", f.url}, {}, f.dir);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("applied since"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("by variant: cuda-async-offload: 3 in "), std::string::npos) << r.out;
}

// Each request through the front door is recorded with its times, its service's version and the
// tokens per second its answer's usage says: vLLM's OpenAI answer, whole and streamed (the usage
// in the last event with stream_options.include_usage, none without), and Ollama's eval_count
// over eval_duration.
TEST(HistoryE2E, ProxiedRequestsCarryTheirTimesAndTokensPerSecondStreamingIncluded) {
  DaemonFixture f;
  testing::FakeService vllm(f, "vllm", {"--model-bytes", "6GiB", "--model", "Qwen/Qwen2.5-7B-Instruct",
                                        "--version", "0.8.5"});
  testing::FakeService ollama(f, "ollama", {"--model-bytes", "4GiB", "--model", "llama3.2:latest"});
  int port = testing::free_port();
  f.daemon_toml = "probe_interval = \"200ms\"\n";
  f.start(fmt::format(
      "[proxy]\nlisten = \"127.0.0.1:{}\"\n\n[services.vllm]\nkind = \"vllm\"\nurl = \"{}\"\n\n"
      "[services.ollama]\nkind = \"ollama\"\nurl = \"{}\"\n",
      port, vllm.url(), ollama.url()));
  ASSERT_TRUE(testing::eventually([&] {
    return testing::get(f, "/v1/services/vllm").value("version", json()) == "0.8.5" &&
           testing::get(f, "/v1/services/ollama").value("version", json()) == "0.6.8";
  })) << testing::get(f, "/v1/services").dump(2);
  std::string door = fmt::format("http://127.0.0.1:{}", port);
  json chat = {{"model", "Qwen/Qwen2.5-7B-Instruct"},
               {"messages", json::array({{{"role", "user"}, {"content", "hi"}}})}};
  auto ask = [&](const json& body, const std::string& path = "/v1/chat/completions") {
    auto r = http_request({door}, "POST", path, body.dump(), 10000);
    EXPECT_TRUE(r && r->status == 200) << (r ? r->body : r.error());
    return r ? r->body : std::string();
  };
  ask(chat);
  json streamed = chat;
  streamed["stream"] = true;
  streamed["stream_options"] = {{"include_usage", true}};
  EXPECT_NE(ask(streamed).find("data: [DONE]"), std::string::npos);
  json no_usage = chat;
  no_usage["stream"] = true;
  ask(no_usage);
  ask({{"model", "llama3.2"}, {"messages", chat["messages"]}, {"stream", false}}, "/api/chat");

  json records;
  ASSERT_TRUE(testing::eventually([&] {
    records = testing::get(f, "/v1/history/records?kind=request&limit=100")["records"];
    return records.size() == 4;
  })) << records.dump(2);
  // Newest first: Ollama's, then the stream without usage, the stream with it, the whole one.
  EXPECT_EQ(records[0]["service"], "ollama");
  EXPECT_EQ(records[0]["model"], "llama3.2:latest");  // the name the front door routed to
  EXPECT_EQ(records[0]["version"], "0.6.8");
  ASSERT_TRUE(records[0]["tokens_per_second"].is_number()) << records[0].dump(2);
  EXPECT_NEAR(records[0]["tokens_per_second"].get<double>(), 50.0, 0.01);
  for (int i = 1; i <= 3; ++i) {
    const json& r = records[i];
    EXPECT_EQ(r["service"], "vllm");
    EXPECT_EQ(r["kind"], "request");
    EXPECT_EQ(r["model"], "Qwen/Qwen2.5-7B-Instruct");
    EXPECT_EQ(r["version"], "0.8.5");
    EXPECT_EQ(r["status"], 200);
    EXPECT_EQ(r["gpu"], 0) << r.dump(2);
    EXPECT_TRUE(r["first_byte_seconds"].is_number()) << r.dump(2);
    EXPECT_GE(r["seconds"].get<double>(), r["first_byte_seconds"].get<double>());
    EXPECT_TRUE(r["wait_seconds"].is_null()) << "not held: " << r.dump(2);
  }
  EXPECT_TRUE(records[1]["tokens_per_second"].is_null()) << "a stream without usage says nothing";
  ASSERT_TRUE(records[2]["tokens_per_second"].is_number()) << records[2].dump(2);
  // Five tokens streamed 50 ms apart: over the time from the first byte to the end.
  const json& st = records[2];
  double generation = st["seconds"].get<double>() - st["first_byte_seconds"].get<double>();
  EXPECT_NEAR(st["tokens_per_second"].get<double>(), 5 / generation, 0.01 * 5 / generation);
  ASSERT_TRUE(records[3]["tokens_per_second"].is_number()) << records[3].dump(2);
  // Two tokens over the request's seconds (sent in one piece).
  EXPECT_NEAR(records[3]["tokens_per_second"].get<double>(), 2 / records[3]["seconds"].get<double>(),
              0.01 * 2 / records[3]["seconds"].get<double>());

  json cmp = testing::get(f, "/v1/history/durations?service=vllm");
  ASSERT_EQ(cmp["groups"].size(), 1u) << cmp.dump(2);
  EXPECT_EQ(cmp["groups"][0]["kind"], "request");
  EXPECT_EQ(cmp["groups"][0]["subject"], "Qwen/Qwen2.5-7B-Instruct");
  EXPECT_EQ(cmp["groups"][0]["variant"], "0.8.5");
  EXPECT_EQ(cmp["groups"][0]["count"], 3);
  EXPECT_TRUE(cmp["groups"][0]["tokens_per_second_p50"].is_number());
  auto r = testing::run_cli({"history", "ollama", "--url", f.url}, {}, f.dir);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("50.0"), std::string::npos) << r.out;
}

}  // namespace history_e2e_test
}  // namespace vramd
