#include "testgpu/fake_gpu_state.h"

#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include <gtest/gtest.h>

namespace vramd {
namespace {

using nlohmann::json;

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/vramd-fake-state-test-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  std::string file(const std::string& name) const { return dir_ + "/" + name; }
  // Names in the directory other than the state file and its lock.
  std::vector<std::string> strays() const {
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(dir_)) {
      std::string name = e.path().filename().string();
      if (name != "state.json" && name != "state.json.lock") out.push_back(name);
    }
    return out;
  }

 private:
  std::string dir_;
};

TEST(FakeGpuState, WriteThenReadBackLeavesNoTemporaryFiles) {
  TempDir dir;
  std::string path = dir.file("state.json");
  json state = make_fake_gpu_state({{"NVIDIA GeForce RTX 3090", 24 * GiB}});
  ASSERT_TRUE(write_fake_gpu_state(path, state).ok());
  Result<json> back = read_fake_gpu_state(path);
  ASSERT_TRUE(back.ok()) << back.error();
  EXPECT_EQ(*back, state);
  EXPECT_EQ((*back)["gpus"][0]["total"], 24 * GiB);
  EXPECT_EQ((*back)["driver_version"], "550.54.14");
  EXPECT_TRUE(dir.strays().empty());
}

TEST(FakeGpuState, WriteIntoMissingDirectoryIsAnError) {
  Status s = write_fake_gpu_state("/nonexistent-dir/state.json", json::object());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().find("/nonexistent-dir/state.json"), std::string::npos) << s.error();
}

TEST(FakeGpuState, ReadersNeverSeeAHalfWrittenFile) {
  TempDir dir;
  std::string path = dir.file("state.json");
  json big = make_fake_gpu_state({{"A", 24 * GiB}});
  for (int i = 0; i < 2000; ++i) big["gpus"][0]["processes"].push_back({{"pid", i}, {"used", i}});
  ASSERT_TRUE(write_fake_gpu_state(path, big).ok());
  std::atomic<bool> done{false};
  std::thread writer([&] {
    for (int i = 0; i < 50; ++i) ASSERT_TRUE(write_fake_gpu_state(path, big).ok());
    done = true;
  });
  int reads = 0;
  while (!done || reads < 10) {
    Result<json> r = read_fake_gpu_state(path);
    ASSERT_TRUE(r.ok()) << r.error();
    ++reads;
  }
  writer.join();
}

TEST(FakeGpuState, UpdateStartsFromEmptyWhenMissing) {
  TempDir dir;
  std::string path = dir.file("state.json");
  ASSERT_TRUE(update_fake_gpu_state(path, [](json& s) { s["driver_version"] = "1.0"; }).ok());
  Result<json> back = read_fake_gpu_state(path);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ((*back)["driver_version"], "1.0");
  EXPECT_TRUE((*back)["gpus"].is_array());
}

TEST(FakeGpuState, ThrowingMutationLeavesTheFileUnchanged) {
  TempDir dir;
  std::string path = dir.file("state.json");
  ASSERT_TRUE(write_fake_gpu_state(path, make_fake_gpu_state({{"A", GiB}})).ok());
  Status s = update_fake_gpu_state(path, [](json& state) {
    state["gpus"] = json::array();
    throw std::runtime_error("boom");
  });
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().find("boom"), std::string::npos);
  EXPECT_EQ((*read_fake_gpu_state(path))["gpus"].size(), 1u);
}

void bump(const std::string& path, const char* key, int times) {
  for (int i = 0; i < times; ++i) {
    Status s =
        update_fake_gpu_state(path, [&](json& state) { state[key] = state.value(key, 0) + 1; });
    ASSERT_TRUE(s.ok()) << s.error();
  }
}

TEST(FakeGpuState, ConcurrentUpdatesFromTwoThreadsLoseNothing) {
  TempDir dir;
  std::string path = dir.file("state.json");
  std::thread a([&] { bump(path, "n", 200); });
  std::thread b([&] { bump(path, "n", 200); });
  a.join();
  b.join();
  EXPECT_EQ((*read_fake_gpu_state(path))["n"], 400);
}

TEST(FakeGpuState, ConcurrentUpdatesFromTwoProcessesLoseNothing) {
  TempDir dir;
  std::string path = dir.file("state.json");
  ASSERT_TRUE(write_fake_gpu_state(path, json::object()).ok());
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    for (int i = 0; i < 200; ++i) {
      if (!update_fake_gpu_state(path, [](json& s) { s["n"] = s.value("n", 0) + 1; }).ok()) {
        ::_exit(1);
      }
    }
    ::_exit(0);
  }
  bump(path, "n", 200);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_EQ((*read_fake_gpu_state(path))["n"], 400);
}

TEST(FakeGpuState, AddAndRemoveProcessMoveTheCardsUsedBytes) {
  TempDir dir;
  std::string path = dir.file("state.json");
  ASSERT_TRUE(
      write_fake_gpu_state(path, make_fake_gpu_state({{"A", 24 * GiB}, {"B", 8 * GiB}})).ok());
  ASSERT_TRUE(set_fake_gpu_used(path, 0, 512 * MiB).ok());
  ASSERT_TRUE(add_fake_process(path, 0, 100, 4 * GiB).ok());
  ASSERT_TRUE(add_fake_process(path, 0, 200, std::nullopt, 2 * GiB).ok());  // N/A, as under WSL
  json s = *read_fake_gpu_state(path);
  EXPECT_EQ(s["gpus"][0]["used"], 512 * MiB + 6 * GiB);
  ASSERT_EQ(s["gpus"][0]["processes"].size(), 2u);
  EXPECT_EQ(s["gpus"][0]["processes"][0]["used"], 4 * GiB);
  EXPECT_TRUE(s["gpus"][0]["processes"][1]["used"].is_null());

  // Re-adding a pid replaces it rather than counting it twice.
  ASSERT_TRUE(add_fake_process(path, 0, 100, 5 * GiB).ok());
  s = *read_fake_gpu_state(path);
  EXPECT_EQ(s["gpus"][0]["used"], 512 * MiB + 7 * GiB);

  ASSERT_TRUE(remove_fake_process(path, 200).ok());
  ASSERT_TRUE(remove_fake_process(path, 100).ok());
  ASSERT_TRUE(remove_fake_process(path, 999).ok());
  s = *read_fake_gpu_state(path);
  EXPECT_EQ(s["gpus"][0]["used"], 512 * MiB);
  EXPECT_TRUE(s["gpus"][0]["processes"].empty());
  EXPECT_EQ(s["gpus"][1]["used"], 0);

  EXPECT_FALSE(add_fake_process(path, 7, 1, GiB).ok());
  EXPECT_FALSE(set_fake_gpu_used(path, 7, GiB).ok());
}

TEST(FakeGpuState, AddingBeyondTotalClampsUsed) {
  TempDir dir;
  std::string path = dir.file("state.json");
  ASSERT_TRUE(write_fake_gpu_state(path, make_fake_gpu_state({{"A", 8 * GiB}})).ok());
  ASSERT_TRUE(add_fake_process(path, 0, 1, 10 * GiB).ok());
  EXPECT_EQ((*read_fake_gpu_state(path))["gpus"][0]["used"], 8 * GiB);
}

}  // namespace
}  // namespace vramd
