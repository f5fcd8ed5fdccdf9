#include "core/attribution.h"

#include <random>

#include <gtest/gtest.h>

namespace vramd {
namespace {

// A GPU sample plus a host with named processes, built up by each test.
struct Scene {
  GpuSample gpu;
  std::vector<ProcessInfo> procs;
  std::unordered_map<int, ResolvedOwner> owners;
  std::unordered_map<int, const ProcessInfo*> by_pid;

  void process(int pid, std::string comm, std::optional<Bytes> used, Owner owner) {
    ProcessInfo p;
    p.pid = pid;
    p.comm = std::move(comm);
    procs.push_back(p);
    gpu.processes.push_back({pid, used, ""});
    owners[pid] = {std::move(owner), "test"};
  }
  std::vector<Holding> attribute(std::optional<Bytes> baseline,
                                 std::map<Owner, Bytes> self_reports = {}) {
    by_pid.clear();
    for (const auto& p : procs) by_pid[p.pid] = &p;
    AttributionInput in;
    in.gpu = &gpu;
    in.owners = &owners;
    in.processes = &by_pid;
    in.baseline = baseline;
    in.self_reports = std::move(self_reports);
    return vramd::attribute(in);
  }
};

Bytes sum(const std::vector<Holding>& hs) {
  Bytes s = 0;
  for (const auto& h : hs) s += h.bytes;
  return s;
}

const Holding* find(const std::vector<Holding>& hs, const std::string& name) {
  for (const auto& h : hs)
    if (h.owner.name == name) return &h;
  return nullptr;
}

const Owner kComfy{OwnerKind::service, "comfyui"};

// (a) 24 GiB card, ComfyUI's process 16666 MiB and another python 588 MiB: both named from the
// driver's per-process figures.
TEST(Attribution, PerProcessFiguresNameBothOwners) {
  Scene s;
  s.gpu.total = 24 * GiB;
  s.gpu.used = (16666 + 588 + 300) * MiB;
  s.process(16666, "python3", 16666 * MiB, kComfy);
  s.process(4242, "python3", 588 * MiB, {OwnerKind::process, "python3[4242]"});
  auto hs = s.attribute(std::nullopt);
  ASSERT_EQ(hs.size(), 3u);
  EXPECT_EQ(hs[0].owner, kComfy);
  EXPECT_EQ(hs[0].bytes, 16666 * MiB);
  EXPECT_EQ(hs[0].source, Source::process);
  EXPECT_EQ(hs[0].pids, std::vector<int>{16666});
  EXPECT_EQ(hs[1].owner.name, "python3[4242]");
  EXPECT_EQ(hs[1].bytes, 588 * MiB);
  EXPECT_EQ(hs[1].source, Source::process);
  EXPECT_EQ(hs[2].owner.kind, OwnerKind::baseline);
  EXPECT_EQ(hs[2].bytes, 300 * MiB);
  EXPECT_EQ(sum(hs), s.gpu.used);
}

// (b) WSL: 32607 MiB card, 17922 MiB used, one process (ComfyUI) with N/A, baseline 2 GiB →
// ComfyUI ≈ 15.5 GiB by residual, nothing unknown. ComfyUI's own torch_vram_total (0.1 GB under
// cudaMallocAsync) must not shrink it: self-reports only split a residual among several.
TEST(Attribution, WslResidualGoesToTheOnlyUnmeasuredProcess) {
  Scene s;
  s.gpu.total = 32607 * MiB;
  s.gpu.used = 17922 * MiB;
  s.process(79, "python3", std::nullopt, kComfy);
  auto hs = s.attribute(2 * GiB, {{kComfy, 100'000'000}});
  const Holding* comfy = find(hs, "comfyui");
  ASSERT_NE(comfy, nullptr);
  EXPECT_EQ(comfy->bytes, (17922 - 2048) * MiB);
  EXPECT_NEAR(double(comfy->bytes) / GiB, 15.5, 0.05);
  EXPECT_EQ(comfy->source, Source::residual);
  EXPECT_EQ(comfy->pids, std::vector<int>{79});
  EXPECT_EQ(find(hs, "unknown"), nullptr);
  EXPECT_EQ(find(hs, "baseline")->bytes, 2 * GiB);
  EXPECT_EQ(sum(hs), s.gpu.used);
}

// (c) Two N/A processes and no self-reports: unknown, listing both candidates.
TEST(Attribution, TwoUnmeasuredProcessesWithoutReportsAreUnknown) {
  Scene s;
  s.gpu.total = 24 * GiB;
  s.gpu.used = 20 * GiB;
  s.process(100, "python3", std::nullopt, kComfy);
  s.process(200, "ollama", std::nullopt, {OwnerKind::service, "ollama"});
  auto hs = s.attribute(1 * GiB);
  const Holding* unknown = find(hs, "unknown");
  ASSERT_NE(unknown, nullptr);
  EXPECT_EQ(unknown->bytes, 19 * GiB);
  EXPECT_EQ(unknown->source, Source::unknown);
  ASSERT_EQ(unknown->candidates.size(), 2u);
  EXPECT_EQ(unknown->candidates[0], (Candidate{100, "python3"}));
  EXPECT_EQ(unknown->candidates[1], (Candidate{200, "ollama"}));
  EXPECT_EQ(find(hs, "comfyui"), nullptr);
  EXPECT_EQ(sum(hs), s.gpu.used);
}

TEST(Attribution, SelfReportsSplitAResidualAndTheLastCandidateTakesTheRest) {
  Scene s;
  s.gpu.total = 24 * GiB;
  s.gpu.used = 20 * GiB;
  s.process(100, "python3", std::nullopt, kComfy);
  Owner ollama{OwnerKind::service, "ollama"};
  s.process(200, "ollama", std::nullopt, ollama);
  auto hs = s.attribute(1 * GiB, {{ollama, 5 * GiB}});
  EXPECT_EQ(find(hs, "ollama")->bytes, 5 * GiB);
  EXPECT_EQ(find(hs, "ollama")->source, Source::self_report);
  EXPECT_EQ(find(hs, "comfyui")->bytes, 14 * GiB);
  EXPECT_EQ(find(hs, "comfyui")->source, Source::residual);
  EXPECT_EQ(find(hs, "unknown"), nullptr);
  EXPECT_EQ(sum(hs), s.gpu.used);
}

TEST(Attribution, ThreeCandidatesOneReportingLeavesTheRestUnknownWithTheOtherTwo) {
  Scene s;
  s.gpu.total = 24 * GiB;
  s.gpu.used = 20 * GiB;
  Owner ollama{OwnerKind::service, "ollama"};
  s.process(100, "python3", std::nullopt, kComfy);
  s.process(200, "ollama", std::nullopt, ollama);
  s.process(300, "whisper", std::nullopt, {OwnerKind::process, "whisper[300]"});
  auto hs = s.attribute(0, {{ollama, 5 * GiB}});
  EXPECT_EQ(find(hs, "ollama")->bytes, 5 * GiB);
  const Holding* unknown = find(hs, "unknown");
  ASSERT_NE(unknown, nullptr);
  EXPECT_EQ(unknown->bytes, 15 * GiB);
  ASSERT_EQ(unknown->candidates.size(), 2u);
  EXPECT_EQ(unknown->candidates[0].pid, 100);
  EXPECT_EQ(unknown->candidates[1].pid, 300);
}

TEST(Attribution, ProcessesOfOneOwnerAddUp) {
  Scene s;
  s.gpu.total = 24 * GiB;
  s.gpu.used = 10 * GiB;
  s.process(10, "python3", 6 * GiB, kComfy);
  s.process(11, "python3", 4 * GiB, kComfy);
  auto hs = s.attribute(0);
  ASSERT_EQ(hs.size(), 1u);
  EXPECT_EQ(hs[0].bytes, 10 * GiB);
  EXPECT_EQ(hs[0].pids, (std::vector<int>{10, 11}));
}

TEST(Attribution, SeveralUnmeasuredProcessesOfOneOwnerAreOneCandidate) {
  Scene s;
  s.gpu.total = 24 * GiB;
  s.gpu.used = 10 * GiB;
  s.process(10, "python3", std::nullopt, kComfy);
  s.process(11, "python3", std::nullopt, kComfy);
  auto hs = s.attribute(0);
  ASSERT_EQ(hs.size(), 1u);
  EXPECT_EQ(hs[0].owner, kComfy);
  EXPECT_EQ(hs[0].source, Source::residual);
}

TEST(Attribution, UnexplainedMemoryWithEveryProcessMeasuredIsUnknownWithoutCandidates) {
  Scene s;
  s.gpu.total = 24 * GiB;
  s.gpu.used = 10 * GiB;
  s.process(10, "python3", 4 * GiB, kComfy);
  auto hs = s.attribute(512 * MiB);  // a learned baseline: the rest is unexplained
  const Holding* unknown = find(hs, "unknown");
  ASSERT_NE(unknown, nullptr);
  EXPECT_EQ(unknown->bytes, 10 * GiB - 4 * GiB - 512 * MiB);
  EXPECT_TRUE(unknown->candidates.empty());
}

TEST(Attribution, SmallResidualIsNoiseInTheBaseline) {
  Scene s;
  s.gpu.total = 24 * GiB;
  s.gpu.used = 4 * GiB + 612 * MiB;
  s.process(10, "python3", 4 * GiB, kComfy);
  auto hs = s.attribute(512 * MiB);
  ASSERT_EQ(hs.size(), 2u);
  EXPECT_EQ(hs[1].owner.kind, OwnerKind::baseline);
  EXPECT_EQ(hs[1].bytes, 612 * MiB);
}

TEST(Attribution, PerProcessSumAboveUsedIsScaledToUsed) {
  Scene s;
  s.gpu.total = 24 * GiB;
  s.gpu.used = 9 * GiB;
  s.process(10, "a", 6 * GiB, {OwnerKind::process, "a[10]"});
  s.process(11, "b", 4 * GiB, {OwnerKind::process, "b[11]"});
  auto hs = s.attribute(std::nullopt);
  EXPECT_EQ(sum(hs), 9 * GiB);
  EXPECT_GT(hs[0].bytes, hs[1].bytes);
}

TEST(Attribution, EmptyCardIsAllBaseline) {
  Scene s;
  s.gpu.total = 24 * GiB;
  s.gpu.used = 400 * MiB;
  auto hs = s.attribute(std::nullopt);
  ASSERT_EQ(hs.size(), 1u);
  EXPECT_EQ(hs[0].owner.kind, OwnerKind::baseline);
  EXPECT_EQ(sum(hs), s.gpu.used);
}

// (d) The invariant over many generated samples: holdings add up to the card's used bytes, no
// holding is empty, and unknown appears only with a reason.
TEST(Attribution, InvariantHoldingsAddUpToUsedOverGeneratedSamples) {
  std::mt19937_64 rng(20261129);
  auto pick = [&](Bytes n) { return n ? rng() % n : 0; };
  for (int iter = 0; iter < 5000; ++iter) {
    Scene s;
    s.gpu.total = (8 + pick(73)) * GiB;
    int nproc = static_cast<int>(pick(9));
    Bytes known = 0;
    std::map<Owner, Bytes> reports;
    for (int i = 0; i < nproc; ++i) {
      bool na = pick(3) == 0;
      Bytes b = pick(4 * GiB);
      int owner_no = static_cast<int>(pick(4));
      Owner o = owner_no == 0 ? Owner{OwnerKind::process, "p" + std::to_string(i)}
                              : Owner{OwnerKind::service, "svc" + std::to_string(owner_no)};
      if (pick(4) == 0) reports[o] = pick(6 * GiB);
      s.process(1000 + i, "proc", na ? std::nullopt : std::optional<Bytes>(b), o);
      if (!na) known += b;
    }
    // Used is usually at least the known bytes, sometimes (racing reads) a little less.
    Bytes extra = pick(8 * GiB);
    s.gpu.used = std::min(s.gpu.total, pick(5) == 0 ? known - std::min(known, pick(GiB)) : known + extra);
    std::optional<Bytes> baseline;
    if (pick(2)) baseline = pick(2 * GiB);
    if (pick(3) == 0) s.gpu.reserved = pick(GiB);
    auto hs = s.attribute(baseline, reports);
    ASSERT_EQ(sum(hs), s.gpu.used) << "iteration " << iter;
    for (const auto& h : hs) {
      ASSERT_GT(h.bytes, 0u) << "iteration " << iter << " owner " << h.owner.name;
      if (h.owner.kind == OwnerKind::unknown) {
        ASSERT_EQ(h.source, Source::unknown);
      }
    }
  }
}

}  // namespace
}  // namespace vramd
