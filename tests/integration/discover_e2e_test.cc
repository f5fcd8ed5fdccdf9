// `vramd discover` on the test GPU: fake servers that hold GPU memory are found by their ports'
// answers, a GPU process that serves nothing is listed as unknown, and the config it writes is
// one that `vramd serve` runs as it is.
#include <fstream>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "daemon/config_file.h"
#include "integration/daemon_fixture.h"
#include "integration/test_util.h"
#include "testgpu/fake_gpu_state.h"

namespace vramd {
namespace {

using nlohmann::json;
using testing::Child;
using testing::DaemonFixture;
using testing::eventually;
using testing::FakeService;
using testing::get;
using testing::run_cli;
using testing::slurp;

TEST(DiscoverE2E, FindsEachServerByItsAnswersAndWritesAConfigThatServes) {
  DaemonFixture f;
  FakeService comfy(f, "comfyui", {"--model-bytes", "12GiB"});
  FakeService vllm(f, "vllm", {"--model-bytes", "6GiB", "--model", "Qwen/Qwen2.5-7B"});
  // A GPU process that listens on nothing (a training script).
  Child job({"/bin/sleep", "60"});
  ASSERT_TRUE(add_fake_process(f.state, 0, job.pid(), 2 * GiB).ok());

  auto r = run_cli({"discover", "--json"}, f.env(), f.dir);
  ASSERT_EQ(r.code, 0) << r.err;
  json out = json::parse(r.out, nullptr, false);
  ASSERT_TRUE(out.is_object()) << r.out;
  std::map<std::string, json> by_kind;
  for (const auto& s : out["services"]) by_kind[s.value("kind", "")] = s;
  ASSERT_EQ(by_kind.size(), 2u) << out.dump(2);
  EXPECT_EQ(by_kind["comfyui"]["url"], comfy.url());
  EXPECT_EQ(by_kind["comfyui"]["bytes"], 12 * GiB);
  EXPECT_EQ(by_kind["comfyui"]["pid"], comfy.pid());
  EXPECT_EQ(by_kind["vllm"]["url"], vllm.url());
  EXPECT_NE(by_kind["vllm"]["evidence"].get<std::string>().find("vllm:"), std::string::npos);
  ASSERT_EQ(out["unknown"].size(), 1u) << out.dump(2);
  EXPECT_EQ(out["unknown"][0]["gpu_pids"][0], job.pid());
  EXPECT_EQ(out["unknown"][0]["evidence"], "no listening port");

  // The table says the same for people.
  auto table = run_cli({"discover"}, f.env(), f.dir);
  ASSERT_EQ(table.code, 0) << table.err;
  EXPECT_NE(table.out.find("comfyui"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find(fmt::format("port {}", vllm.port())), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("not a server vramd knows"), std::string::npos) << table.out;

  // --write: a config `vramd serve` loads as it is, and that names both services.
  std::string path = f.dir.file("discovered.toml");
  auto w = run_cli({"discover", "--write", path}, f.env(), f.dir);
  ASSERT_EQ(w.code, 0) << w.err;
  auto config = load_config(path);
  ASSERT_TRUE(config.ok()) << config.error() << "\n" << slurp(path);
  ASSERT_EQ(config->services.size(), 2u) << slurp(path);
  f.start(slurp(path));
  EXPECT_TRUE(eventually([&] {
    return get(f, "/v1/services/comfyui").value("state", "") == "up" &&
           get(f, "/v1/services/vllm").value("state", "") == "up" &&
           get(f, "/v1/services/comfyui").value("bytes", Bytes{0}) == 12 * GiB;
  })) << slurp(path) << f.log();
  // It never overwrites a file.
  std::string before = slurp(path);
  auto again = run_cli({"discover", "--write", path}, f.env(), f.dir);
  EXPECT_EQ(again.code, 2);
  EXPECT_NE(again.err.find("exists"), std::string::npos) << again.err;
  EXPECT_EQ(slurp(path), before);
}

TEST(DiscoverE2E, NoGpuProcessSaysSoAndBadArgumentsAreUsageErrors) {
  DaemonFixture f;
  auto r = run_cli({"discover"}, f.env(), f.dir);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("No process holds GPU memory"), std::string::npos) << r.out;
  EXPECT_EQ(run_cli({"discover", "--timeout-ms", "0"}, f.env(), f.dir).code, 2);
  EXPECT_EQ(run_cli({"discover", "--nope"}, f.env(), f.dir).code, 2);
}

}  // namespace
}  // namespace vramd
