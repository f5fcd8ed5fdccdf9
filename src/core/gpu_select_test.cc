#include "core/gpu_select.h"

#include <gtest/gtest.h>

namespace vramd {
namespace {

TEST(GpuSelector, IndexInstanceAndAny) {
  auto any = parse_gpu_selector("any");
  ASSERT_TRUE(any.ok());
  EXPECT_EQ(*any, std::nullopt);
  auto one = parse_gpu_selector("1");
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(*one, 1u);
  auto mig = parse_gpu_selector("0/2");
  ASSERT_TRUE(mig.ok());
  EXPECT_EQ(*mig, mig_flat_index(0, 2));
  EXPECT_EQ(gpu_label(**mig), "0/2");
  auto mig13 = parse_gpu_selector("1/13");
  ASSERT_TRUE(mig13.ok());
  EXPECT_EQ(gpu_label(**mig13), "1/13");
  EXPECT_NE(**mig13, **mig);
}

TEST(GpuSelector, BadInputIsAClearError) {
  for (const char* bad :
       {"-1", "0/", "/2", "0/2/1", "x", "1.5", " 1", "0x1", "99999", "0/70000", "1e3", "ANY"}) {
    auto r = parse_gpu_selector(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.error().find("expected a GPU index"), std::string::npos) << r.error();
    EXPECT_NE(r.error().find(bad), std::string::npos) << r.error();
  }
}

TEST(GpuSelector, InstanceIndicesNeverMeetPhysicalOnes) {
  EXPECT_FALSE(is_mig_index(kMaxGpuIndex));
  EXPECT_TRUE(is_mig_index(mig_flat_index(0, 0)));
  EXPECT_GT(mig_flat_index(0, 0), kMaxGpuIndex);
  EXPECT_NE(mig_flat_index(0, 1), mig_flat_index(1, 0));
  EXPECT_EQ(gpu_label(7u), "7");
}

TEST(GpuSelector, MigParentHoldsNoMemoryAndAdmitsNoLease) {
  GpuSample card;
  card.index = 0;
  EXPECT_TRUE(attributes_memory(card));
  EXPECT_TRUE(admits_leases(card));
  card.health = GpuHealth::lost;
  EXPECT_FALSE(admits_leases(card));
  card.health = GpuHealth::ok;
  card.mig_enabled = true;
  EXPECT_FALSE(attributes_memory(card));
  EXPECT_FALSE(admits_leases(card));
  GpuSample instance;
  instance.index = mig_flat_index(0, 2);
  instance.parent = 0;
  instance.uuid = "MIG-aaaa";
  EXPECT_TRUE(admits_leases(instance));
  EXPECT_EQ(cuda_visible_devices(instance), "MIG-aaaa");
  EXPECT_EQ(gpu_label(instance), "0/2");
}

}  // namespace
}  // namespace vramd
