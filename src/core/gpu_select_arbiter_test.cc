// The Arbiter with a MIG card: memory is attributed on the instances, not on the parent as well,
// and leases go to instances only.
#include <gtest/gtest.h>

#include "core/arbiter.h"
#include "core/gpu_select.h"

namespace vramd {
namespace {

using namespace std::chrono_literals;

// GPU 0 with MIG on (its aggregate unreadable without root: total 0, no processes) and its
// instances 0/2 (70 GiB, pid 100 holds 16 GiB) and 0/9 (16 GiB, empty).
SampleTaken mig_sample() {
  SampleTaken s;
  s.gpus.backend = "test";
  GpuSample parent;
  parent.index = 0;
  parent.label = "0";
  parent.name = "NVIDIA H200";
  parent.mig_enabled = true;
  parent.processes_readable = false;
  parent.note = "card-wide memory: Insufficient Permissions";
  s.gpus.gpus.push_back(parent);
  GpuSample gi2;
  gi2.index = mig_flat_index(0, 2);
  gi2.label = "0/2";
  gi2.parent = 0;
  gi2.uuid = "MIG-aaaa";
  gi2.total = 70 * GiB;
  gi2.used = 16 * GiB + 20 * MiB;
  gi2.processes.push_back({100, 16 * GiB, "", 2, 0});
  s.gpus.gpus.push_back(gi2);
  GpuSample gi9;
  gi9.index = mig_flat_index(0, 9);
  gi9.label = "0/9";
  gi9.parent = 0;
  gi9.uuid = "MIG-cccc";
  gi9.total = 16 * GiB;
  gi9.used = 9 * MiB;
  s.gpus.gpus.push_back(gi9);
  ProcessInfo p;
  p.pid = 100;
  p.ppid = 1;
  p.comm = "gpu_burn";
  p.cmdline = "./gpu_burn";
  s.host.processes.push_back(p);
  s.host.mem_available = 64 * GiB;
  return s;
}

TEST(ArbiterMig, ParentHoldsNothingAndEachInstanceItsOwn) {
  Config c;
  c.gpu.baseline = 0;
  Arbiter arbiter(c);
  MonoTime now{};
  arbiter.handle(mig_sample(), now);
  const auto& gpus = arbiter.status().gpus;
  ASSERT_EQ(gpus.size(), 3u);
  EXPECT_TRUE(gpus[0].holdings.empty());  // not counted twice
  Bytes on_gi2 = 0;
  bool process_named = false;
  for (const auto& h : gpus[1].holdings) {
    on_gi2 += h.bytes;
    process_named |= h.source == Source::process && h.bytes == 16 * GiB;
  }
  EXPECT_EQ(on_gi2, gpus[1].sample.used);  // the invariant, per instance
  EXPECT_TRUE(process_named);
}

TEST(ArbiterMig, LeasesGoToInstancesNeverToTheParent) {
  Config c;
  c.gpu.baseline = 0;
  Arbiter arbiter(c);
  MonoTime now{};
  arbiter.handle(mig_sample(), now);
  LeaseRequest big;
  big.vram = 40 * GiB;  // fits only on 0/2
  big.holder = "test";
  uint64_t id = arbiter.next_lease_id();
  arbiter.handle(LeaseRequested{id, big}, now);
  ASSERT_NE(arbiter.lease(id), nullptr);
  EXPECT_EQ(arbiter.lease(id)->state, LeaseState::granted);
  EXPECT_EQ(arbiter.lease(id)->gpu, mig_flat_index(0, 2));

  LeaseRequest on_parent;
  on_parent.vram = 1 * GiB;
  on_parent.gpu = 0;
  on_parent.holder = "test";
  uint64_t id2 = arbiter.next_lease_id();
  arbiter.handle(LeaseRequested{id2, on_parent}, now);
  ASSERT_NE(arbiter.lease(id2), nullptr);
  EXPECT_NE(arbiter.lease(id2)->state, LeaseState::granted);  // the API refuses it up front

  LeaseRequest on_gi9;
  on_gi9.vram = 1 * GiB;
  on_gi9.gpu = mig_flat_index(0, 9);
  on_gi9.holder = "test";
  uint64_t id3 = arbiter.next_lease_id();
  arbiter.handle(LeaseRequested{id3, on_gi9}, now);
  EXPECT_EQ(arbiter.lease(id3)->state, LeaseState::granted);
  EXPECT_EQ(arbiter.lease(id3)->gpu, mig_flat_index(0, 9));
}

}  // namespace
}  // namespace vramd
