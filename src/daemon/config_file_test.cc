// Reading the config file: errors name the file and why.
#include "daemon/config_file.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

namespace vramd {
namespace {

TEST(ConfigFile, LoadMissingFile) {
  Result<Config> c = load_config("/nonexistent/vramd.toml");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error(), "/nonexistent/vramd.toml: cannot read config: No such file or directory");
}

TEST(ConfigFile, LoadReadsFile) {
  std::string path = ::testing::TempDir() + "config_test_load.toml";
  {
    std::ofstream out(path);
    out << "[daemon]\nsample_interval = \"2s\"\n[gpu]\nbackend = \"nvml\"\n";
  }
  Result<Config> c = load_config(path);
  std::remove(path.c_str());
  ASSERT_TRUE(c.ok()) << c.error();
  EXPECT_EQ(c->path, path);
  EXPECT_EQ(c->daemon.sample_interval, std::chrono::seconds(2));
  EXPECT_EQ(c->gpu.backend, "nvml");
}

}  // namespace
}  // namespace vramd
