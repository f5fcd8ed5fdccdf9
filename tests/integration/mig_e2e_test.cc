// MIG end to end: the real daemon on a fake H200 with MIG on (no root privileges), its instances
// in /v1/status, /metrics and `vramd status`, and `vramd run --gpu 0/2` getting the instance's
// MIG UUID as CUDA_VISIBLE_DEVICES.
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
using testing::DaemonFixture;
using testing::eventually;
using testing::get;
using testing::slurp;
using namespace std::chrono_literals;

json mig_gpu() {
  return json::parse(R"({
    "driver_version": "590.48.01", "privileged": false,
    "gpus": [{"name": "NVIDIA H200", "uuid": "GPU-00000000-0000-0000-0000-000000000000",
      "total": 150754820096, "used": 17783848960,
      "mig_devices": [
        {"gi": 2, "ci": 0, "uuid": "MIG-aaaaaaaa-0000-5000-8000-000000000000", "profile": "3g.71gb",
         "total": 74893950976, "used": 4312793088,
         "processes": [{"pid": 999999, "used": 4294967296}]},
        {"gi": 9, "ci": 0, "uuid": "MIG-cccccccc-0000-5000-8000-000000000000", "profile": "1g.18gb",
         "total": 17179869184, "used": 9437184, "processes": []}]}]})");
}

TEST(MigE2E, InstancesAreShownLeasedAndNamedByTheirUuid) {
  DaemonFixture f;
  ASSERT_TRUE(write_fake_gpu_state(f.state, mig_gpu()).ok());
  f.start("");
  json st;
  ASSERT_TRUE(eventually([&] {
    st = f.status();
    return st.value("gpus", json::array()).size() == 3;
  })) << f.log();
  EXPECT_EQ(st["gpus"][0]["label"], "0");
  EXPECT_TRUE(st["gpus"][0]["mig_enabled"].get<bool>());
  EXPECT_EQ(st["gpus"][0]["health"], "ok");  // no privileges: said in its note, not an error
  EXPECT_NE(st["gpus"][0]["note"].get<std::string>().find("Insufficient Permissions"),
            std::string::npos);
  EXPECT_TRUE(st["gpus"][0]["holdings"].empty());
  const json& gi2 = st["gpus"][1];
  EXPECT_EQ(gi2["label"], "0/2");
  EXPECT_EQ(gi2["parent"], "0");
  EXPECT_EQ(gi2["mig_profile"], "3g.71gb");
  EXPECT_EQ(gi2["uuid"], "MIG-aaaaaaaa-0000-5000-8000-000000000000");
  Bytes held = 0;
  for (const auto& h : gi2["holdings"]) held += h["bytes"].get<Bytes>();
  EXPECT_EQ(held, gi2["used_bytes"].get<Bytes>());

  // /metrics names instances by label.
  auto m = http_request({f.url}, "GET", "/metrics", "", 10000);
  ASSERT_TRUE(m.ok());
  EXPECT_NE(m->body.find("vramd_gpu_memory_total_bytes{gpu=\"0/2\",uuid=\"MIG-aaaaaaaa"),
            std::string::npos)
      << m->body.substr(0, 2000);
  EXPECT_NE(m->body.find("vramd_owner_memory_bytes{gpu=\"0/2\""), std::string::npos);

  // `vramd status` lists them under their card.
  Child status({testing::vramd_bin(), "status", "--url", f.url}, {}, f.dir.file("status.log"));
  ASSERT_TRUE(WIFEXITED(status.wait_exit(20s)));
  std::string text = slurp(f.dir.file("status.log"));
  EXPECT_NE(text.find("GPU 0  NVIDIA H200"), std::string::npos) << text;
  EXPECT_NE(text.find("  GPU 0/2  MIG 3g.71gb  MIG-aaaaaaaa-0000-5000-8000-000000000000"),
            std::string::npos)
      << text;

  // The card itself takes no lease; an instance does, and is named by its UUID.
  auto parent = http_request({f.url}, "POST", "/v1/leases",
                             json{{"vram", "1GiB"}, {"gpu", 0}, {"holder", "t"}}.dump(), 10000);
  ASSERT_TRUE(parent.ok());
  EXPECT_EQ(parent->status, 400u) << parent->body;
  EXPECT_NE(parent->body.find("MIG on"), std::string::npos) << parent->body;
  Child run({testing::vramd_bin(), "run", "--url", f.url, "--vram", "8GiB", "--gpu", "0/2", "--",
             "sh", "-c", "echo CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES"},
            {}, f.dir.file("run.log"));
  int rc = run.wait_exit(30s);
  std::string out = slurp(f.dir.file("run.log"));
  ASSERT_TRUE(WIFEXITED(rc)) << out;
  EXPECT_EQ(WEXITSTATUS(rc), 0) << out << f.log();
  EXPECT_NE(out.find("on GPU 0/2"), std::string::npos) << out;
  EXPECT_NE(out.find("CUDA_VISIBLE_DEVICES=MIG-aaaaaaaa-0000-5000-8000-000000000000"),
            std::string::npos)
      << out;

  // A bad selector is a clear usage error.
  Child bad(
      {testing::vramd_bin(), "run", "--url", f.url, "--vram", "1GiB", "--gpu", "0/x", "--", "true"},
      {}, f.dir.file("bad.log"));
  int brc = bad.wait_exit(10s);
  EXPECT_TRUE(WIFEXITED(brc) && WEXITSTATUS(brc) == 2) << slurp(f.dir.file("bad.log"));
  EXPECT_NE(slurp(f.dir.file("bad.log")).find("a MIG instance like 0/2"), std::string::npos)
      << slurp(f.dir.file("bad.log"));
}

}  // namespace
}  // namespace vramd
