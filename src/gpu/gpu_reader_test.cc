#include "gpu/gpu_reader.h"

#include <stdlib.h>

#include <gtest/gtest.h>
#include "test_paths.h"

namespace vramd {
namespace {

// Sets or clears an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : ScopedEnv(name, value.c_str()) {}
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value != nullptr) {
      ::setenv(name, value, 1);
    } else {
      ::unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      ::setenv(name_, old_->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST(OpenGpuReader, UnknownBackendIsAnError) {
  auto r = open_gpu_reader("cuda");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().find("unknown GPU backend \"cuda\""), std::string::npos) << r.error();
}

TEST(OpenGpuReader, AutoPrefersNvml) {
  ScopedEnv lib("VRAMD_NVML_LIBRARY", vramd::test_paths::build_dir() + "/libnvidia-ml-fake.so");
  ScopedEnv smi("VRAMD_NVIDIA_SMI", vramd::test_paths::build_dir() + "/fake-bin/nvidia-smi");
  auto r = open_gpu_reader("auto");
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ((*r)->backend(), "nvml");
}

TEST(OpenGpuReader, AutoFallsBackToNvidiaSmi) {
  ScopedEnv lib("VRAMD_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1");
  ScopedEnv smi("VRAMD_NVIDIA_SMI", vramd::test_paths::build_dir() + "/fake-bin/nvidia-smi");
  auto r = open_gpu_reader("auto");
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ((*r)->backend(), "nvidia-smi");
  auto only_nvml = open_gpu_reader("nvml");
  EXPECT_FALSE(only_nvml.ok());
}

TEST(OpenGpuReader, OnlyTheBackendAskedFor) {
  ScopedEnv lib("VRAMD_NVML_LIBRARY", vramd::test_paths::build_dir() + "/libnvidia-ml-fake.so");
  ScopedEnv smi("VRAMD_NVIDIA_SMI", vramd::test_paths::build_dir() + "/fake-bin/nvidia-smi");
  auto r = open_gpu_reader("nvidia-smi");
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ((*r)->backend(), "nvidia-smi");
}

TEST(OpenGpuReader, NeitherBackendSaysWhereItLooked) {
  ScopedEnv lib("VRAMD_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1");
  ScopedEnv smi("VRAMD_NVIDIA_SMI", "/nonexistent/nvidia-smi");
  auto r = open_gpu_reader("auto");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().find("neither NVML nor nvidia-smi"), std::string::npos) << r.error();
  EXPECT_NE(r.error().find("/nonexistent/libnvidia-ml.so.1"), std::string::npos) << r.error();
  EXPECT_NE(r.error().find("/nonexistent/nvidia-smi"), std::string::npos) << r.error();
}

}  // namespace
}  // namespace vramd
