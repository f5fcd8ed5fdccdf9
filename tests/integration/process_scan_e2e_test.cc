// The driver's process lists through the real daemon on the fake libnvidia-ml: read when a GPU's
// memory moves, when vramd grants a lease (or starts, stops, unloads, wakes), and every
// process_scan_interval; never on every sample. Counted twice: by vramd
// (vramd_nvml_calls_total) and by the fake library itself ($FAKE_NVML_CALLS, at exit).
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/client.h"
#include "core/units.h"
#include "integration/daemon_fixture.h"
#include "integration/test_util.h"

namespace vramd {
namespace {

using nlohmann::json;
using testing::Child;
using testing::DaemonFixture;
using testing::eventually;

constexpr char kList[] = "nvmlDeviceGetComputeRunningProcesses_v3";
constexpr char kMemory[] = "nvmlDeviceGetMemoryInfo_v2";

// vramd's own count of one entry point, from /metrics (0 when absent).
uint64_t calls(const DaemonFixture& f, const std::string& fn) {
  auto r = http_request({f.url}, "GET", "/metrics", "", 5000);
  if (!r || r->status != 200) return 0;
  std::string series = fmt::format("vramd_nvml_calls_total{{function=\"{}\"}} ", fn);
  std::istringstream in(r->body);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(series, 0) == 0) return std::stoull(line.substr(series.size()));
  return 0;
}

bool named(const DaemonFixture& f, int pid) {
  json s = f.status();
  if (!s.contains("gpus")) return false;
  for (const auto& h : s["gpus"][0]["holdings"])
    for (const auto& p : h.value("pids", json::array()))
      if (p == pid) return true;
  return false;
}

TEST(ProcessScanE2E, ListsWhenMemoryMovesOrVramdActsNotEverySample) {
  DaemonFixture f;
  f.gpu_toml = "process_scan_interval = \"1h\"\n";  // so the interval never explains a read
  f.extra_env = {"FAKE_NVML_CALLS=" + f.dir.file("calls.json")};
  f.start("");

  // Steady state: memory read every sample, the lists not again after the first.
  ASSERT_TRUE(eventually([&] { return calls(f, kMemory) >= 20; }, std::chrono::seconds(30)))
      << f.log();
  uint64_t lists_at_rest = calls(f, kList);
  EXPECT_GE(lists_at_rest, 1u);
  EXPECT_LE(lists_at_rest, 2u) << "the lists were read while nothing moved";

  // A process that takes 2 GiB is named at once: its bytes move the card's memory, and the lists
  // are read in the sample that sees them. 200 ms samples: at most three (one of slack for the
  // poll between a sample and this test's look at /v1/status).
  Child big({"sleep", "60"});
  uint64_t m0 = calls(f, kMemory);
  ASSERT_TRUE(add_fake_process(f.state, 0, big.pid(), 2 * GiB).ok());
  ASSERT_TRUE(eventually([&] { return named(f, big.pid()); })) << f.status().dump();
  EXPECT_LE(calls(f, kMemory) - m0, 3u) << "samples before the new process was named";
  uint64_t lists_after_big = calls(f, kList);
  EXPECT_GT(lists_after_big, lists_at_rest);

  // A process whose 8 MiB stay under the threshold is not looked for on every sample...
  Child small({"sleep", "60"});
  ASSERT_TRUE(add_fake_process(f.state, 0, small.pid(), 8 * MiB).ok());
  uint64_t m1 = calls(f, kMemory);
  ASSERT_TRUE(eventually([&] { return calls(f, kMemory) >= m1 + 10; })) << f.log();
  EXPECT_FALSE(named(f, small.pid()));
  EXPECT_EQ(calls(f, kList), lists_after_big);
  // ...but a grant (its holder may now allocate) has the next sample read the lists.
  auto l = http_request({f.url}, "POST", "/v1/leases",
                        R"({"vram": "1GiB", "gpu": 0, "holder": "scan-test"})", 5000);
  ASSERT_TRUE(l.ok() && l->status / 100 == 2) << (l ? l->body : l.error());
  ASSERT_TRUE(eventually([&] { return named(f, small.pid()); })) << f.status().dump();

  // The library's own count: what vramd said it called, and far fewer lists than samples.
  uint64_t memory_seen = calls(f, kMemory), lists_seen = calls(f, kList);
  f.daemon->kill(SIGTERM);
  std::ifstream in(f.dir.file("calls.json"));
  json fake = json::parse(in, nullptr, false);
  ASSERT_TRUE(fake.is_object()) << "the fake wrote no counts";
  EXPECT_GE(fake.value(kMemory, uint64_t{0}), memory_seen);
  EXPECT_GE(fake.value(kList, uint64_t{0}), lists_seen);
  EXPECT_LT(fake.value(kList, uint64_t{0}) * 4, fake.value(kMemory, uint64_t{0})) << fake.dump();
}

}  // namespace
}  // namespace vramd
