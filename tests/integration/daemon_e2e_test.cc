// The daemon end to end on the test GPU: the real binary, the real NVML loading path against the
// fake libnvidia-ml, real /proc, real HTTP.
#include <fstream>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/client.h"
#include "core/units.h"
#include "integration/test_util.h"
#include "sim/fake_gpu_state.h"

namespace vramd {
namespace {

using nlohmann::json;
using testing::Child;
using testing::eventually;
using testing::TempDir;

std::string vramd_bin() { return testing::build_dir() + "/vramd"; }
std::string fake_lib() { return testing::build_dir() + "/libnvidia-ml-fake.so"; }

// A daemon on a fake 24 GiB GPU, sampling every 200 ms.
struct DaemonFixture {
  TempDir dir;
  std::string state = dir.file("gpu.json");
  int port = testing::free_port();
  std::string url = fmt::format("http://127.0.0.1:{}", port);
  std::unique_ptr<Child> daemon;

  DaemonFixture() {
    auto s = make_fake_gpu_state({{"NVIDIA GeForce RTX 3090", 24 * GiB}});
    s["gpus"][0]["used"] = 400 * MiB;
    EXPECT_TRUE(write_fake_gpu_state(state, s).ok());
  }

  std::vector<std::string> env() const {
    return {"VRAMD_NVML_LIBRARY=" + fake_lib(), "FAKE_NVML_STATE=" + state};
  }

  void start(const std::string& services_toml) {
    std::ofstream(dir.file("vramd.toml")) << fmt::format(
        "[daemon]\nlisten = \"127.0.0.1:{}\"\nstate_dir = \"{}\"\nsample_interval = \"200ms\"\n\n"
        "[gpu]\nbackend = \"nvml\"\n\n{}",
        port, dir.path(), services_toml);
    daemon = std::make_unique<Child>(
        std::vector<std::string>{vramd_bin(), "serve", "--config", dir.file("vramd.toml")}, env(),
        dir.file("daemon.log"));
    ASSERT_TRUE(eventually([&] { return status().contains("gpus") && !status()["sampled_at"].is_null(); }))
        << log();
  }

  json status(const std::string& where = "") const {
    auto r = http_request({where.empty() ? url : where}, "GET", "/v1/status");
    if (!r || r->status != 200) return json::object();
    return json::parse(r->body);
  }

  std::string log() const {
    std::ifstream f(dir.file("daemon.log"));
    return std::string(std::istreambuf_iterator<char>(f), {});
  }
};

const json* holding(const json& status, const std::string& owner) {
  if (!status.contains("gpus")) return nullptr;
  for (const auto& h : status["gpus"][0]["holdings"])
    if (h["owner"] == owner) return &h;
  return nullptr;
}

TimePoint sampled_at(const json& status) {
  if (!status.contains("sampled_at") || status["sampled_at"].is_null()) return {};
  return *parse_rfc3339(status["sampled_at"].get<std::string>());
}

TimePoint wall_now() {
  return std::chrono::time_point_cast<std::chrono::milliseconds>(std::chrono::system_clock::now());
}

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

// Runs the CLI and returns (exit status, stdout, stderr).
struct CliResult {
  int code;
  std::string out, err;
};
CliResult run_cli(const std::vector<std::string>& args, const std::vector<std::string>& env,
                  const TempDir& dir) {
  std::string cmd;
  for (const auto& e : env) cmd += e + " ";
  cmd += vramd_bin();
  for (const auto& a : args) cmd += " '" + a + "'";
  cmd += " >" + dir.file("out") + " 2>" + dir.file("err");
  int status = std::system(cmd.c_str());
  auto slurp = [](const std::string& p) {
    std::ifstream f(p);
    return std::string(std::istreambuf_iterator<char>(f), {});
  };
  return {WEXITSTATUS(status), slurp(dir.file("out")), slurp(dir.file("err"))};
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
  EXPECT_EQ(run_cli({"frobnicate"}, {}, dir).code, 2);
  EXPECT_EQ(run_cli({}, {}, dir).code, 2);
}

}  // namespace
}  // namespace vramd
