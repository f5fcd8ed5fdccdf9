#include "store/event_store.h"

#include <fstream>

#include <gtest/gtest.h>

#include "integration/test_util.h"

namespace vramd {
// Named, not anonymous: its helpers share a unity batch with other tests' (cmake/unity.cmake).
namespace event_store_test {

EventRecord ev(int64_t ms, std::string type, std::string message) {
  return {TimePoint(Duration(ms)), std::move(type), 0u, "comfyui", std::move(message)};
}

TEST(EventStore, AppendsAndListsInOrderWithData) {
  testing::TempDir dir;
  auto store = EventStore::open(dir.file("vramd.db"), 100);
  ASSERT_TRUE(store.ok()) << store.error();
  auto id1 = (*store)->append(ev(1000, "unload.freed", "16.3 GiB → 370 MiB"),
                              {{"outcome", "freed"}, {"before_bytes", 17502000000}});
  auto id2 = (*store)->append(ev(2000, "gpu.lost", "GPU 0 lost"));
  ASSERT_TRUE(id1.ok() && id2.ok());
  EXPECT_LT(*id1, *id2);
  auto all = (*store)->list(0, std::nullopt, 10);
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[0].event.type, "unload.freed");
  EXPECT_EQ((*all)[0].data["outcome"], "freed");
  EXPECT_EQ((*all)[0].event.gpu, 0u);
  EXPECT_TRUE((*all)[1].data.is_null());
  auto after = (*store)->list(*id1, std::nullopt, 10);
  ASSERT_EQ(after->size(), 1u);
  auto since = (*store)->list(0, TimePoint(Duration(1500)), 10);
  ASSERT_EQ(since->size(), 1u);
  EXPECT_EQ((*since)[0].event.type, "gpu.lost");
}

TEST(EventStore, SurvivesReopenAndKeepsOnlyTheRetention) {
  testing::TempDir dir;
  {
    auto store = EventStore::open(dir.file("vramd.db"), 50);
    ASSERT_TRUE(store.ok());
    for (int i = 0; i < 500; ++i) ASSERT_TRUE((*store)->append(ev(i, "t", std::to_string(i))).ok());
  }
  auto store = EventStore::open(dir.file("vramd.db"), 50);
  ASSERT_TRUE(store.ok());
  EXPECT_EQ(*(*store)->count(), 50);
  auto all = (*store)->list(0, std::nullopt, 1000);
  ASSERT_EQ(all->size(), 50u);
  EXPECT_EQ(all->front().event.message, "450");
  EXPECT_EQ(all->back().event.message, "499");
}

TEST(EventStore, AFileThatIsNotADatabaseIsAClearError) {
  testing::TempDir dir;
  std::ofstream(dir.file("vramd.db")) << "this is not sqlite, but it is long enough to be read as a header......";
  auto store = EventStore::open(dir.file("vramd.db"), 50);
  ASSERT_FALSE(store.ok());
  EXPECT_NE(store.error().find(dir.file("vramd.db")), std::string::npos) << store.error();
}

}  // namespace event_store_test
}  // namespace vramd
