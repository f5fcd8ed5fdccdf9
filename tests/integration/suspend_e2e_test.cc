// Preemptible leases through the real daemon (issue 28): a `vramd run --preemptible` job holding
// 16 GiB of a 24 GiB card is suspended by the fake cuda-checkpoint when a front-door request must
// wake a 10 GiB vLLM, the request is served, and the job is resumed on its GPU once vLLM sleeps
// again. The job's process never dies and its exit status comes back through `vramd run`.
#include <csignal>
#include <fstream>
#include <thread>

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
namespace suspend_e2e_test {

using nlohmann::json;
using testing::Child;
using testing::DaemonFixture;
using testing::eventually;
using testing::FakeService;
using testing::get;
using testing::slurp;
using namespace std::chrono_literals;

constexpr const char* kChat =
    R"({"model":"Qwen/Qwen2.5-7B-Instruct","messages":[{"role":"user","content":"hi"}]})";

json lease_of(const DaemonFixture& f, uint64_t id) {
  return get(f, fmt::format("/v1/leases/{}", id));
}

json find_lease(const DaemonFixture& f, const std::string& label) {
  for (const auto& l : get(f, "/v1/leases").value("leases", json::array()))
    if (l.value("label", "") == label) return l;
  return nullptr;
}

std::string metrics(const DaemonFixture& f) {
  auto r = http_request({f.url}, "GET", "/metrics", "", 5000);
  return r ? r->body : "";
}

// A preemptible `vramd run` job that writes its pid, holds 16 GiB on the fake GPU once running,
// and exits with `code` when the test creates its `go` file.
struct BatchJob {
  BatchJob(const DaemonFixture& f, int code)
      : go(f.dir.file("go")),
        log(f.dir.file("run.log")),
        run({testing::vramd_bin(), "run", "--url", "unix:" + f.dir.file("vramd.sock"), "--vram",
             "16GiB", "--preemptible", "--label", "batch", "--", "sh", "-c",
             fmt::format("echo $$ > {}; while [ ! -e {} ]; do sleep 0.1; done; exit {}",
                         f.dir.file("job.pid"), f.dir.file("go"), code)},
            {}, f.dir.file("run.log")) {
    started = eventually([&] {
      std::ifstream in(f.dir.file("job.pid"));
      return static_cast<bool>(in >> pid) && pid > 1;
    });
    if (started) started = add_fake_process(f.state, 0, pid, 16 * GiB).ok();
    if (started)
      started = eventually([&] {
        lease = find_lease(f, "batch");
        return !lease.is_null() && lease.value("held_bytes", Bytes{0}) == 16 * GiB;
      });
  }
  // Lets the job finish; its exit status as `vramd run` gave it back.
  int finish() {
    std::ofstream(go) << "go";
    return run.wait_exit(30s);
  }
  std::string go, log;
  Child run;
  int pid = 0;
  json lease;            // as granted, holding its 16 GiB
  bool started = false;  // running, its pid on the GPU and its lease holding the bytes
};

TEST(SuspendE2E, APreemptibleJobIsSuspendedForARequestsWakeAndResumedWhenTheServiceSleeps) {
  DaemonFixture f;
  FakeService vllm(f, "vllm", {"--model-bytes", "10GiB"});
  f.gpu_toml = fmt::format("cuda_checkpoint = \"{}/fake-bin/cuda-checkpoint\"\n",
                           testing::build_dir());
  int front = testing::free_port();
  f.start(fmt::format("[host]\nram_reserve = \"0%\"\n\n[proxy]\nlisten = \"127.0.0.1:{}\"\n\n"
                      "[services.vllm]\nkind = \"vllm\"\nurl = \"{}\"\n",
                      front, vllm.url()));
  std::string front_url = fmt::format("http://127.0.0.1:{}", front);
  // vLLM loaded once (its size learned), then put to sleep: the card is free for batch work.
  ASSERT_TRUE(eventually([&] {
    json st = get(f, "/v1/services/vllm");
    return st.value("bytes", Bytes{0}) >= 10 * GiB &&
           st["load_peaks"].value("Qwen/Qwen2.5-7B-Instruct", Bytes{0}) >= 10 * GiB;
  })) << get(f, "/v1/services/vllm").dump(2) << f.log();
  ASSERT_TRUE(eventually([&] { return get(f, "/v1/status")["suspend"].value("offered", false); }))
      << get(f, "/v1/status")["suspend"].dump(2);
  auto unloaded = http_request({f.url}, "POST", "/v1/services/vllm/unload", "", 40000);
  ASSERT_TRUE(unloaded.ok());
  ASSERT_NE(unloaded->body.find("\"freed\""), std::string::npos) << unloaded->body;

  // The batch job: it exits 7 when told.
  BatchJob job(f, 7);
  ASSERT_TRUE(job.started) << slurp(job.log) << get(f, "/v1/leases").dump(2);
  json batch = job.lease;
  int job_pid = job.pid;
  EXPECT_EQ(batch["state"], "granted");
  EXPECT_TRUE(batch["preemptible"].get<bool>());
  uint64_t id = batch["id"].get<uint64_t>();

  // A request for vLLM: its wake needs 10 GiB, only ~7.5 GiB are free, and nothing idle holds
  // any: the batch job is suspended (its bytes leave the GPU), vLLM wakes and answers.
  auto r = http_request({front_url}, "POST", "/v1/chat/completions", kChat, 60000);
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(r->status, 200u) << r->body << f.log();
  // (Suspended once the utility said done and a sample showed the bytes gone: the wake may have
  // had the room a moment before the utility's answer came, slower under a sanitizer.)
  EXPECT_TRUE(eventually([&] { return lease_of(f, id).value("state", "") == "suspended"; }))
      << lease_of(f, id).dump(2);
  json suspended = lease_of(f, id);
  EXPECT_EQ(suspended["state"], "suspended") << suspended.dump(2);
  EXPECT_EQ(suspended["suspended_for"], "vllm's request") << suspended.dump(2);
  EXPECT_FALSE(suspended["suspended_at"].is_null());
  EXPECT_EQ(suspended["suspended_bytes"], 16 * GiB);
  auto told = testing::events_of(f, "lease.suspended");
  ASSERT_EQ(told.size(), 1u) << get(f, "/v1/events?limit=200").dump(2);
  EXPECT_NE(told[0]["message"].get<std::string>().find("suspended for vllm's request: 16.0 GiB "
                                                       "of GPU 0 moved to host RAM"),
            std::string::npos)
      << told[0].dump();
  // The fake utility took the pid off the GPU; the process itself runs on.
  json gpu = read_fake_gpu_state(f.state).value();
  for (const auto& p : gpu["gpus"][0]["processes"]) EXPECT_NE(p["pid"], job_pid) << gpu.dump(2);
  EXPECT_EQ(::kill(job_pid, 0), 0);
  std::string m = metrics(f);
  EXPECT_NE(m.find("vramd_leases{state=\"suspended\"} 1"), std::string::npos) << m;
  EXPECT_NE(m.find(fmt::format("vramd_suspended_bytes {}", 16 * GiB)), std::string::npos) << m;
  // `vramd leases` says so: since when, for whom, and what host RAM holds for it.
  auto listed =
      testing::run_cli({"leases", "--url", "unix:" + f.dir.file("vramd.sock")}, {}, f.dir);
  EXPECT_EQ(listed.code, 0) << listed.err;
  EXPECT_NE(listed.out.find("STATE "), std::string::npos) << listed.out;
  // (Its time within a second: each answer converts the monotonic moment to the wall clock anew.)
  size_t at = listed.out.find("suspended since ");
  ASSERT_NE(at, std::string::npos) << listed.out;
  auto since = parse_rfc3339(listed.out.substr(at + 16, 24));
  ASSERT_TRUE(since) << listed.out;
  EXPECT_LT(std::chrono::abs(*since - *parse_rfc3339(suspended["suspended_at"].get<std::string>())),
            1s);
  EXPECT_NE(listed.out.find(" for vllm's request: 16.0 GiB in host RAM", at), std::string::npos)
      << listed.out;
  // `vramd run` in the foreground says so, once.
  EXPECT_TRUE(eventually([&] {
    return slurp(job.log).find("suspended for vllm's request") != std::string::npos;
  }, 25s)) << slurp(job.log);

  // vLLM, loaded again, goes back to sleep once idle: the room is back, the job resumes on GPU 0.
  // (Until the proxy and vLLM's probe say it is done with the request, an unload is refused,
  // busy: that was a flake here.)
  ASSERT_TRUE(eventually([&] {
    json st = get(f, "/v1/services/vllm");
    return st.value("requests_in_flight", -1) == 0 && st.value("busy", json(true)) == false &&
           st.value("bytes", Bytes{0}) >= 10 * GiB;
  }, 25s)) << get(f, "/v1/services/vllm").dump(2);
  unloaded = http_request({f.url}, "POST", "/v1/services/vllm/unload", "", 40000);
  ASSERT_TRUE(unloaded.ok());
  ASSERT_EQ(unloaded->status, 200u) << unloaded->body;
  ASSERT_TRUE(eventually([&] { return lease_of(f, id).value("state", "") == "granted"; }, 20s))
      << lease_of(f, id).dump(2) << f.log();
  auto resumed = testing::events_of(f, "lease.resumed");
  ASSERT_EQ(resumed.size(), 1u);
  EXPECT_NE(resumed[0]["message"].get<std::string>().find("resumed on GPU 0 after"),
            std::string::npos)
      << resumed[0].dump();
  ASSERT_TRUE(eventually([&] { return lease_of(f, id).value("held_bytes", Bytes{0}) == 16 * GiB; }))
      << lease_of(f, id).dump(2);
  EXPECT_TRUE(eventually([&] {
    return slurp(job.log).find("resumed on GPU 0") != std::string::npos;
  }, 25s)) << slurp(job.log);
  EXPECT_NE(metrics(f).find("vramd_lease_suspends_total{outcome=\"suspended\"} 1"),
            std::string::npos);

  // The job finishes as if nothing happened: its exit status comes back.
  int status = job.finish();
  ASSERT_TRUE(WIFEXITED(status)) << slurp(job.log);
  EXPECT_EQ(WEXITSTATUS(status), 7) << slurp(job.log);
}

TEST(SuspendE2E, AUtilityThatCannotCheckpointLeavesTheJobRunningAndSaysWhy) {
  DaemonFixture f;
  f.gpu_toml = fmt::format("cuda_checkpoint = \"{}/fake-bin/cuda-checkpoint\"\n",
                           testing::build_dir());
  f.extra_env.push_back("FAKE_CUDA_CHECKPOINT=uvm");
  f.start("[host]\nram_reserve = \"0%\"\n");
  ASSERT_TRUE(eventually([&] { return get(f, "/v1/status")["suspend"].value("offered", false); }))
      << get(f, "/v1/status")["suspend"].dump(2) << f.log();
  BatchJob job(f, 3);
  ASSERT_TRUE(job.started) << slurp(job.log) << get(f, "/v1/leases").dump(2);
  int job_pid = job.pid;
  json urgent = json::parse(
      http_request({f.url}, "POST", "/v1/leases",
                   R"({"vram":"10GiB","priority":5,"label":"urgent","pid":1})", 5000)
          ->body,
      nullptr, false);
  ASSERT_TRUE(urgent.contains("id")) << urgent.dump();
  ASSERT_TRUE(eventually([&] { return !testing::events_of(f, "lease.suspend_failed").empty(); }))
      << get(f, "/v1/events?limit=200").dump(2) << f.log();
  std::string why = testing::events_of(f, "lease.suspend_failed")[0]["message"];
  EXPECT_NE(why.find("could not be suspended, left running"), std::string::npos) << why;
  EXPECT_NE(why.find("operation not supported"), std::string::npos) << why;
  json b = find_lease(f, "batch");
  EXPECT_EQ(b["state"], "granted") << b.dump(2);
  EXPECT_NE(b.value("suspend_refused", json(nullptr)), nullptr) << b.dump(2);
  EXPECT_EQ(lease_of(f, urgent["id"].get<uint64_t>())["state"], "queued");
  // The fake says the pid is running, on the GPU still.
  json gpu = read_fake_gpu_state(f.state).value();
  bool on_gpu = false;
  for (const auto& p : gpu["gpus"][0]["processes"]) on_gpu = on_gpu || p["pid"] == job_pid;
  EXPECT_TRUE(on_gpu) << gpu.dump(2);
  int status = job.finish();
  ASSERT_TRUE(WIFEXITED(status)) << slurp(job.log);
  EXPECT_EQ(WEXITSTATUS(status), 3);

  // Bad input: a clear 400, nothing queued.
  for (const auto& [body, words] :
       {std::pair<std::string, std::string>{R"({"vram":"1GiB","preemptible":"yes"})",
                                            "preemptible: expected true or false"},
        {R"({"vram":"1GiB","preemptible":true,"service":"x"})",
         "preemptible: a lease for a service cannot be suspended"}}) {
    auto bad = http_request({f.url}, "POST", "/v1/leases", body, 5000);
    ASSERT_TRUE(bad.ok());
    EXPECT_EQ(bad->status, 400u) << bad->body;
    EXPECT_NE(bad->body.find(words), std::string::npos) << bad->body;
  }
}

// Suspend as a service's depth (issue 28, item 3): a generic_http server with no unload_url
// would be stopped to free its memory; here its process is suspended instead, and a request
// through its proxy restores it in a second. The wake time is learned at that depth.
TEST(SuspendE2E, AServiceWithoutAnUnloadCallIsSuspendedAndARequestRestoresIt) {
  DaemonFixture f;
  FakeService gen(f, "generic_http", {"--model-bytes", "8GiB"});
  f.gpu_toml = fmt::format("cuda_checkpoint = \"{}/fake-bin/cuda-checkpoint\"\n",
                           testing::build_dir());
  int proxy = testing::free_port();
  f.start(fmt::format("[host]\nram_reserve = \"0%\"\n\n[services.gen]\nkind = \"generic_http\"\n"
                      "url = \"{}\"\nproxy = \"127.0.0.1:{}\"\n",
                      gen.url(), proxy));
  ASSERT_TRUE(eventually([&] {
    json st = get(f, "/v1/services/gen");
    return st.value("bytes", Bytes{0}) >= 8 * GiB && st.value("state", "") == "up";
  })) << get(f, "/v1/services/gen").dump(2) << f.log();
  ASSERT_TRUE(eventually([&] { return get(f, "/v1/status")["suspend"].value("offered", false); }))
      << get(f, "/v1/status")["suspend"].dump(2);
  EXPECT_FALSE(get(f, "/v1/services/gen")["can_unload"].get<bool>());

  auto unloaded = http_request({f.url}, "POST", "/v1/services/gen/unload", "", 40000);
  ASSERT_TRUE(unloaded.ok());
  json verdict = json::parse(unloaded->body, nullptr, false);
  EXPECT_EQ(verdict.value("outcome", ""), "freed") << unloaded->body << f.log();
  EXPECT_EQ(verdict.value("depth", ""), "suspend") << unloaded->body;
  json st = get(f, "/v1/services/gen");
  ASSERT_TRUE(st["asleep"].is_object()) << st.dump(2);
  EXPECT_EQ(st["asleep"]["depth"], "suspend");
  EXPECT_EQ(st["asleep"]["pids"], json::array({gen.pid()})) << st.dump(2);
  EXPECT_GE(st["asleep"]["host_ram_bytes"].get<Bytes>(), 8 * GiB - 512 * MiB) << st.dump(2);
  // Its process lives on, off the GPU; nothing was stopped.
  EXPECT_EQ(::kill(gen.pid(), 0), 0);
  json gpu = read_fake_gpu_state(f.state).value();
  for (const auto& p : gpu["gpus"][0]["processes"]) EXPECT_NE(p["pid"], gen.pid()) << gpu.dump(2);
  EXPECT_TRUE(testing::events_of(f, "service.stopping").empty());

  // A request through its proxy: restored, then answered.
  auto r = http_request({fmt::format("http://127.0.0.1:{}", proxy)}, "POST", "/work", "{}", 60000);
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(r->status, 200u) << r->body << f.log();
  ASSERT_TRUE(eventually([&] {
    return get(f, "/v1/services/gen").value("bytes", Bytes{0}) >= 8 * GiB;
  }))
      << get(f, "/v1/services/gen").dump(2);
  st = get(f, "/v1/services/gen");
  EXPECT_TRUE(st["asleep"].is_null()) << st.dump(2);
  ASSERT_TRUE(st["wake_seconds"].contains("suspend")) << st.dump(2);
  EXPECT_TRUE(st["wake_seconds"]["suspend"]["measured"].get<bool>()) << st.dump(2);
  auto woken = testing::events_of(f, "service.woken");
  ASSERT_EQ(woken.size(), 1u) << get(f, "/v1/events?limit=200").dump(2);
  EXPECT_NE(woken[0]["message"].get<std::string>().find("from suspend"), std::string::npos)
      << woken[0].dump();
}

}  // namespace suspend_e2e_test
}  // namespace vramd
