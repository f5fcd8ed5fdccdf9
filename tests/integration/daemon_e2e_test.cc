// The daemon end to end on the test GPU: the real binary, the real NVML loading path against the
// fake libnvidia-ml, real /proc, real HTTP.
#include <fstream>

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
using testing::Child;
using testing::eventually;
using testing::TempDir;
using testing::DaemonFixture;
using testing::holding;
using testing::run_cli;
using testing::sampled_at;
using testing::vramd_bin;
using testing::wall_now;

TEST(DaemonE2E, NamesOwnersAndFollowsProcessesWithinTwoSamples) {
  DaemonFixture f;
  Child svc({"sleep", "3601"});
  Child job({"sleep", "3602"});
  ASSERT_TRUE(add_fake_process(f.state, 0, svc.pid(), 8 * GiB).ok());
  ASSERT_TRUE(add_fake_process(f.state, 0, job.pid(), 2 * GiB).ok());
  f.start(
      "[services.sleeper]\nkind = \"comfyui\"\nurl = \"http://127.0.0.1:1\"\n"
      "match = { cmdline = \"^sleep 3601$\" }\n");

  std::string job_owner = fmt::format("sleep[{}]", job.pid());
  ASSERT_TRUE(eventually([&] { return holding(f.status(), job_owner) != nullptr; })) << f.log();
  json st = f.status();
  const json* s = holding(st, "sleeper");
  ASSERT_NE(s, nullptr) << st.dump(2);
  EXPECT_EQ((*s)["owner_kind"], "service");
  EXPECT_EQ((*s)["source"], "process");
  EXPECT_EQ((*s)["bytes"].get<Bytes>(), 8 * GiB);
  EXPECT_EQ((*s)["pids"], json::array({svc.pid()}));
  const json* j = holding(st, job_owner);
  EXPECT_EQ((*j)["owner_kind"], "process");
  EXPECT_EQ((*j)["bytes"].get<Bytes>(), 2 * GiB);
  EXPECT_EQ(st["gpus"][0]["used_bytes"].get<Bytes>(), 400 * MiB + 10 * GiB);
  Bytes sum = 0;
  for (const auto& h : st["gpus"][0]["holdings"]) sum += h["bytes"].get<Bytes>();
  EXPECT_EQ(sum, st["gpus"][0]["used_bytes"].get<Bytes>());

  // The job ends: every status sampled two intervals after that no longer lists it.
  TimePoint change = wall_now();
  ASSERT_TRUE(remove_fake_process(f.state, job.pid()).ok());
  job.kill(SIGKILL);
  json after;
  ASSERT_TRUE(eventually([&] {
    after = f.status();
    return sampled_at(after) >= change + std::chrono::milliseconds(400);
  }));
  EXPECT_EQ(holding(after, job_owner), nullptr) << after.dump(2);
  EXPECT_NE(holding(after, "sleeper"), nullptr);

  // A new process shows up the same way.
  Child late({"sleep", "3603"});
  change = wall_now();
  ASSERT_TRUE(add_fake_process(f.state, 0, late.pid(), 3 * GiB).ok());
  ASSERT_TRUE(eventually([&] {
    after = f.status();
    return sampled_at(after) >= change + std::chrono::milliseconds(400);
  }));
  const json* l = holding(after, fmt::format("sleep[{}]", late.pid()));
  ASSERT_NE(l, nullptr) << after.dump(2);
  EXPECT_EQ((*l)["bytes"].get<Bytes>(), 3 * GiB);

  // The same answer on the unix socket in the state directory.
  json via_socket = f.status("unix:" + f.dir.file("vramd.sock"));
  EXPECT_TRUE(via_socket.contains("gpus")) << f.log();
}

TEST(DaemonE2E, GpuLostBecomesAStateAndTheDaemonKeepsAnswering) {
  DaemonFixture f;
  f.start("");
  ASSERT_TRUE(update_fake_gpu_state(f.state, [](json& s) {
                s["errors"] = {{"nvmlDeviceGetMemoryInfo_v2", "GPU_IS_LOST"},
                               {"nvmlDeviceGetMemoryInfo", "GPU_IS_LOST"}};
              }).ok());
  ASSERT_TRUE(eventually([&] {
    json st = f.status();
    return st.contains("gpus") && !st["gpus"].empty() && st["gpus"][0]["health"] == "lost";
  })) << f.status().dump(2);
  ASSERT_TRUE(update_fake_gpu_state(f.state, [](json& s) { s.erase("errors"); }).ok());
  ASSERT_TRUE(eventually([&] {
    json st = f.status();
    return st.contains("gpus") && !st["gpus"].empty() && st["gpus"][0]["health"] == "ok";
  })) << f.status().dump(2);
  auto events = http_request({f.url}, "GET", "/v1/events");
  ASSERT_TRUE(events.ok());
  EXPECT_NE(events->body.find("gpu.lost"), std::string::npos) << events->body;
  EXPECT_NE(events->body.find("gpu.recovered"), std::string::npos) << events->body;
}

TEST(DaemonE2E, UnknownPathsAndMethodsAreJsonErrors) {
  DaemonFixture f;
  f.start("");
  auto r = http_request({f.url}, "GET", "/v1/nope");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status, 404u);
  EXPECT_EQ(json::parse(r->body)["error"]["code"], "not_found");
  r = http_request({f.url}, "POST", "/v1/status", "{}");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status, 405u);
  r = http_request({f.url}, "GET", "/v1/history?gpu=0&window=5m");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status, 200u);
  EXPECT_TRUE(json::parse(r->body).contains("series"));
  r = http_request({f.url}, "GET", "/v1/history?gpu=7");
  EXPECT_EQ(r->status, 404u);
  r = http_request({f.url}, "GET", "/v1/history?window=forever");
  EXPECT_EQ(r->status, 400u);
}

// Suspend (issue 28): [gpu] cuda_checkpoint is probed once at start; /v1/status and `vramd
// status` say whether it is offered, and why not in one line. The fake utility speaks the 570
// driver's form; a path where nothing is, or a 550 utility without --get-state, is not offered.
TEST(DaemonE2E, StatusSaysWhetherSuspendIsOfferedAndWhyNot) {
  struct Case {
    std::string tool, faults;
    bool offered;
    std::string line;  // in `vramd status`
  };
  const std::string fake = testing::build_dir() + "/fake-bin/cuda-checkpoint";
  const Case cases[] = {
      {fake, "", true, "Suspend offered: " + fake + " 570.86.10 (--action)"},
      {fake, "driver-550", true, "Suspend offered: " + fake + " 550.90.07 (--toggle)"},
      {fake, "driver-550-toggle-only", false, "Suspend is not offered: "},
      {"/nonexistent/cuda-checkpoint", "", false, "Suspend is not offered: "},
  };
  for (const Case& c : cases) {
    DaemonFixture f;
    f.gpu_toml = fmt::format("cuda_checkpoint = \"{}\"", c.tool);
    if (!c.faults.empty()) f.extra_env.push_back("FAKE_CUDA_CHECKPOINT=" + c.faults);
    f.start("");
    json st;
    ASSERT_TRUE(eventually([&] {
      st = f.status();
      return st.contains("suspend") && st["suspend"].value("probed", false);
    })) << st.dump(2) << f.log();
    const json& s = st["suspend"];
    EXPECT_EQ(s["offered"], c.offered) << c.tool << " " << c.faults << ": " << s.dump();
    EXPECT_EQ(s["tool"], c.tool);
    if (!c.offered) {
      EXPECT_TRUE(s["why"].is_string() && s["why"].get<std::string>().starts_with(
                                              "suspend is not offered: "))
          << s.dump();
    }
    auto r = run_cli({"status", "--url", f.url}, f.env(), f.dir);
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.out.find(c.line), std::string::npos) << r.out;
    // Said once, as an event (stored behind the loop: looked for until it is there).
    std::string type = c.offered ? "suspend.offered" : "suspend.not_offered";
    ASSERT_TRUE(eventually([&] { return !testing::events_of(f, type).empty(); })) << f.log();
    std::vector<json> said = testing::events_of(f, type);
    EXPECT_EQ(said.size(), 1u);
    EXPECT_EQ(said[0]["message"], c.offered ? "suspend is offered: " + c.line.substr(17)
                                            : s["why"].get<std::string>());
  }
}

TEST(DaemonE2E, StatusWithoutADaemonTakesOneSampleItselfAndSaysSo) {
  DaemonFixture f;
  Child svc({"sleep", "3604"});
  ASSERT_TRUE(add_fake_process(f.state, 0, svc.pid(), 6 * GiB).ok());
  int dead_port = testing::free_port();
  auto r = run_cli({"status", "--json", "--url", fmt::format("http://127.0.0.1:{}", dead_port)},
                   f.env(), f.dir);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("one sample taken directly"), std::string::npos) << r.err;
  json st = json::parse(r.out);
  const json* h = holding(st, fmt::format("sleep[{}]", svc.pid()));
  ASSERT_NE(h, nullptr) << r.out;
  EXPECT_EQ((*h)["bytes"].get<Bytes>(), 6 * GiB);

  // The table form names the owner too.
  r = run_cli({"status", "--url", fmt::format("http://127.0.0.1:{}", dead_port)}, f.env(), f.dir);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find(fmt::format("sleep[{}]", svc.pid())), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("NVIDIA GeForce RTX 3090"), std::string::npos) << r.out;
}

TEST(DaemonE2E, NoGpuBackendAtAllIsAPlainErrorAndExit1) {
  TempDir dir;
  std::ofstream(dir.file("vramd.toml")) << fmt::format(
      "[daemon]\nlisten = \"127.0.0.1:{}\"\nstate_dir = \"{}\"\n", testing::free_port(), dir.path());
  auto r = run_cli({"serve", "--config", dir.file("vramd.toml")},
                   {"VRAMD_NVML_LIBRARY=/nonexistent/libnvidia-ml.so.1",
                    "VRAMD_NVIDIA_SMI=/nonexistent/nvidia-smi", "PATH=/usr/bin:/bin"},
                   dir);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("NVML"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("nvidia-smi"), std::string::npos) << r.err;
}

TEST(DaemonE2E, BrokenConfigIsReportedWithFileLineColumn) {
  TempDir dir;
  std::ofstream(dir.file("vramd.toml")) << "[daemon]\nlisten = \"127.0.0.1:7100\"\nsample_intervall = \"1s\"\n";
  auto r = run_cli({"serve", "--config", dir.file("vramd.toml")}, {}, dir);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find(dir.file("vramd.toml") + ":3:"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("sample_interval"), std::string::npos) << r.err;
}

TEST(DaemonE2E, WrongArgumentsExit2) {
  TempDir dir;
  EXPECT_EQ(run_cli({"status", "--bogus"}, {}, dir).code, 2);
  auto unknown = run_cli({"frobnicate"}, {}, dir);
  EXPECT_EQ(unknown.code, 2);
  EXPECT_NE(unknown.err.find("unknown command 'frobnicate'"), std::string::npos) << unknown.err;
  EXPECT_EQ(run_cli({}, {}, dir).code, 2);
}

}  // namespace
}  // namespace vramd
