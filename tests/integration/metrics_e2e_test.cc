// GET /metrics from the real daemon on the test GPU: the documented families (docs/metrics.md),
// figures that match the GPU and an unload's verdict, and `promtool check metrics` (Debian's
// prometheus package) accepting the exposition when it is installed.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/client.h"
#include "core/units.h"
#include "integration/daemon_fixture.h"
#include "integration/test_util.h"

namespace vramd {
namespace {

using testing::DaemonFixture;
using testing::eventually;
using testing::FakeService;

std::string scrape(const DaemonFixture& f) {
  auto r = http_request({f.url}, "GET", "/metrics", "", 5000);
  if (!r || r->status != 200) return "";
  return r->body;
}

// The value of the one sample whose name and labels are exactly `series`; nullopt if absent.
std::optional<double> value(const std::string& text, const std::string& series) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line))
    if (line.size() > series.size() && line.compare(0, series.size(), series) == 0 && line[series.size()] == ' ')
      return std::stod(line.substr(series.size() + 1));
  return std::nullopt;
}

TEST(MetricsE2E, FamiliesFiguresAndAnUnloadAreInTheExposition) {
  DaemonFixture f;
  FakeService comfy(f, "comfyui", {"--model-bytes", "16GiB"});
  f.start(fmt::format("[services.comfyui]\nkind = \"comfyui\"\nurl = \"{}\"\n", comfy.url()));
  // Memory comes with a sample and the service's state with its probe: wait for both (on a
  // loaded machine the first probe can land after the first samples).
  ASSERT_TRUE(eventually([&] {
    std::string text = scrape(f);
    auto v = value(text, R"(vramd_owner_memory_bytes{gpu="0",owner="comfyui",kind="service",source="process"})");
    return v && *v == static_cast<double>(16 * GiB) &&
           value(text, R"(vramd_service_state{service="comfyui",state="up"})") == 1.0;
  })) << scrape(f) << f.log();

  std::string before = scrape(f);
  for (const char* family :
       {"vramd_gpu_memory_total_bytes", "vramd_gpu_memory_used_bytes", "vramd_gpu_utilization_ratio",
        "vramd_owner_memory_bytes", "vramd_service_state", "vramd_service_idle_seconds",
        "vramd_unloads_total", "vramd_unload_freed_bytes_total", "vramd_leases", "vramd_lease_wait_seconds",
        "vramd_restarts_total", "vramd_crashes_total", "vramd_build_info"})
    EXPECT_NE(before.find(fmt::format("# TYPE {} ", family)), std::string::npos) << family;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(before, m, std::regex(R"re(vramd_gpu_memory_total_bytes\{gpu="0",uuid="[^"]+",name="[^"]+"\} (\d+))re")))
      << before;
  EXPECT_EQ(std::stoull(m[1]), 24 * GiB);
  EXPECT_EQ(value(before, R"(vramd_service_state{service="comfyui",state="up"})"), 1.0);
  EXPECT_EQ(value(before, R"(vramd_service_state{service="comfyui",state="unreachable"})"), 0.0);
  EXPECT_EQ(value(before, R"(vramd_leases{state="queued"})"), 0.0);

  // An unload: counted by its verified outcome, with the bytes the GPU gave back.
  auto u = http_request({f.url}, "POST", "/v1/services/comfyui/unload", "", 40000);
  ASSERT_TRUE(u.ok() && u->status == 200u) << (u ? u->body : u.error());
  std::string after = scrape(f);
  EXPECT_EQ(value(after, R"(vramd_unloads_total{service="comfyui",outcome="freed"})"), 1.0) << after;
  EXPECT_EQ(value(after, R"(vramd_unload_freed_bytes_total{service="comfyui"})"), static_cast<double>(16 * GiB));

  // A lease granted at once: one observation in the lowest bucket.
  auto l = http_request({f.url}, "POST", "/v1/leases", R"({"vram": "1GiB", "gpu": 0, "holder": "t"})", 5000);
  ASSERT_TRUE(l.ok() && l->status / 100 == 2) << (l ? l->body : l.error());
  std::string leased = scrape(f);
  EXPECT_EQ(value(leased, R"(vramd_leases{state="granted"})"), 1.0) << leased;
  EXPECT_EQ(value(leased, R"(vramd_lease_wait_seconds_bucket{le="0.1"})"), 1.0);
  EXPECT_EQ(value(leased, R"(vramd_lease_wait_seconds_bucket{le="+Inf"})"), 1.0);
  EXPECT_EQ(value(leased, "vramd_lease_wait_seconds_count"), 1.0);
  // Its end, counted by how it ended.
  ASSERT_TRUE(eventually([&] {
    auto d = http_request({f.url}, "DELETE", fmt::format("/v1/leases/{}", nlohmann::json::parse(l->body)["id"].get<uint64_t>()), "", 5000);
    return d && d->status == 200;
  }));
  EXPECT_EQ(value(scrape(f), R"(vramd_lease_ends_total{state="released"})"), 1.0);
  // SQLite: one host, no shared store, no contact to age.
  EXPECT_EQ(leased.find("vramd_store_contact_age_seconds"), std::string::npos);

  // POST is not a scrape.
  auto p = http_request({f.url}, "POST", "/metrics", "", 5000);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->status, 405u);

  // promtool, where installed (make deps installs it), checks the exposition's format.
  if (std::filesystem::exists("/usr/bin/promtool")) {
    std::string path = f.dir.file("metrics.txt");
    std::ofstream(path) << leased;
    std::string cmd = fmt::format("/usr/bin/promtool check metrics < {} 2>&1", path);
    FILE* pipe = popen(cmd.c_str(), "r");
    ASSERT_NE(pipe, nullptr);
    std::string out;
    char buf[512];
    while (size_t n = fread(buf, 1, sizeof buf, pipe)) out.append(buf, n);
    int status = pclose(pipe);
    EXPECT_EQ(status, 0) << out;
  } else {
    GTEST_LOG_(INFO) << "promtool not installed: format not checked by it";
  }
}

}  // namespace
}  // namespace vramd
