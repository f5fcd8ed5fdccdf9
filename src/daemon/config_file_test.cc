// Reading the config file: errors name the file and why.
#include "daemon/config_file.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include "test_paths.h"

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

// The configs packaging ships are read by the real parser: what they say is what vramd does.
TEST(PackagingConfig, TheKubernetesConfigParsesAndSharesTheQueueThroughTheSecret) {
  Result<Config> c =
      load_config(vramd::test_paths::source_dir() + "/packaging/kubernetes/vramd.toml");
  ASSERT_TRUE(c.ok()) << c.error();
  EXPECT_EQ(c->daemon.listen, "0.0.0.0:7100");
  EXPECT_EQ(c->daemon.token_file, "/etc/vramd/secret/token");
  EXPECT_EQ(c->daemon.store_url_file, "/etc/vramd/secret/store-url");
  EXPECT_EQ(c->daemon.state_dir, "/var/lib/vramd");
  EXPECT_TRUE(c->daemon.host.empty());  // each node's hostname
  EXPECT_EQ(c->gpu.backend, "nvml");
}

}  // namespace
}  // namespace vramd
