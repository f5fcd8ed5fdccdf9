// DiscoveryPicker, the discovery loop's choices: which GPU processes a pass looks at, how often,
// and how the servers found are named. (The whole loop, with real servers on real ports, runs in
// DiscoverE2E.TheDaemonFindsServicesByItselfAndLeavesThemAlone.)
#include "daemon/discovery_loop.h"

#include <gtest/gtest.h>

#include "core/config.h"

namespace vramd {
namespace {

Holding held_by(OwnerKind kind, std::string name, std::vector<int> pids, Bytes bytes,
                std::vector<int> candidates = {}) {
  Holding h;
  h.owner.kind = kind;
  h.owner.name = std::move(name);
  h.pids = std::move(pids);
  h.bytes = bytes;
  for (int pid : candidates) {
    Candidate c;
    c.pid = pid;
    h.candidates.push_back(c);
  }
  return h;
}

StatusSnapshot status_with(std::vector<Holding> holdings, unsigned gpu = 0) {
  StatusSnapshot st;
  st.sampled = true;
  GpuStatus g;
  g.sample.index = gpu;
  g.holdings = std::move(holdings);
  st.gpus.push_back(std::move(g));
  return st;
}

TEST(DiscoveryPicker, LooksAtWhatNobodyOwnsThreeTimesThenLeavesItUntilItEnds) {
  DiscoveryPicker loop;
  StatusSnapshot st =
      status_with({held_by(OwnerKind::service, "comfy", {100}, 8 * GiB),
                   held_by(OwnerKind::lease, "lease 3", {101}, 2 * GiB),
                   held_by(OwnerKind::process, "python3[200]", {200}, 6 * GiB),
                   held_by(OwnerKind::unknown, "unknown", {}, 3 * GiB, {300, 301})});
  for (int pass = 0; pass < DiscoveryPicker::kTries; ++pass) {
    DiscoveryInput in = loop.pick(st);
    ASSERT_EQ(in.gpu_procs.size(), 3u) << "pass " << pass;
    EXPECT_EQ(in.gpu_procs.at(200).bytes, 6 * GiB);
    EXPECT_EQ(in.gpu_procs.at(200).gpus, std::set<unsigned>{0});
    EXPECT_EQ(in.gpu_procs.at(300).bytes, 3 * GiB);  // the first candidate carries the bytes
    EXPECT_EQ(in.gpu_procs.at(301).bytes, 0u);
    EXPECT_FALSE(in.gpu_procs.count(100));  // a service's
    EXPECT_FALSE(in.gpu_procs.count(101));  // a lease's
  }
  EXPECT_TRUE(loop.pick(st).gpu_procs.empty());  // looked at enough

  // 200 leaves the GPU; a new process with its pid later is looked at again.
  StatusSnapshot gone =
      status_with({held_by(OwnerKind::unknown, "unknown", {}, 3 * GiB, {300, 301})});
  EXPECT_TRUE(loop.pick(gone).gpu_procs.empty());
  DiscoveryInput back = loop.pick(st);
  ASSERT_EQ(back.gpu_procs.size(), 1u);
  EXPECT_TRUE(back.gpu_procs.count(200));
}

TEST(DiscoveryPicker, FoundServersOnConfiguredPortsAreLeftAndNamesDoNotCollide) {
  auto parsed = parse_config(
      "[services.ollama]\nkind = \"ollama\"\nurl = \"http://127.0.0.1:11434\"\n", "test.toml");
  ASSERT_TRUE(parsed.ok()) << parsed.error();
  DiscoveryResult result;
  auto server = [](std::string kind, int port) {
    DiscoveredServer s;
    s.name = kind;  // as assemble_discovery names a server outside any container or unit
    s.kind = std::move(kind);
    s.port = port;
    s.url = "http://127.0.0.1:" + std::to_string(port);
    return s;
  };
  result.found = {server("ollama", 11434), server("ollama", 11500), server("ollama", 11501)};
  std::vector<ServiceConfig> added = DiscoveryPicker::new_services(result, *parsed);
  ASSERT_EQ(added.size(), 2u);
  EXPECT_EQ(added[0].url, "http://127.0.0.1:11500");
  EXPECT_EQ(added[0].name, "ollama-2");
  EXPECT_EQ(added[1].url, "http://127.0.0.1:11501");
  EXPECT_EQ(added[1].name, "ollama-3");
}

}  // namespace
}  // namespace vramd
