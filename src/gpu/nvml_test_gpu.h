// The test GPU for the NVML reader's tests: a temporary state file for the fake libnvidia-ml
// (tests/fake_nvml), loaded through the real dlopen path.
#pragma once

#include <dlfcn.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "gpu/nvml_reader.h"
#include "test_paths.h"
#include "testgpu/fake_gpu_state.h"

namespace vramd::nvml_test {

using nlohmann::json;

// A temporary state file, named by FAKE_NVML_STATE, and the fake library as VRAMD_NVML_LIBRARY.
class TestGpu {
 public:
  TestGpu() {
    char tmpl[] = "/tmp/vramd-nvml-test-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
    path_ = dir_ + "/state.json";
    ::setenv("FAKE_NVML_STATE", path_.c_str(), 1);
    ::setenv("VRAMD_NVML_LIBRARY",
             (vramd::test_paths::build_dir() + "/libnvidia-ml-fake.so").c_str(), 1);
  }
  ~TestGpu() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
    ::unsetenv("FAKE_NVML_STATE");
    ::unsetenv("VRAMD_NVML_LIBRARY");
  }
  void write(const json& state) {
    Status s = write_fake_gpu_state(path_, state);
    ASSERT_TRUE(s.ok()) << s.error();
  }
  void remove() { std::filesystem::remove(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string dir_;
  std::string path_;
};

// GPU 0: figures everywhere, a process in both lists, one N/A process. GPU 1: bare.
inline json base_state() {
  return json::parse(R"({
    "driver_version": "550.54.14",
    "gpus": [
      {"name": "NVIDIA GeForce RTX 3090", "uuid": "GPU-0000aaaa", "total": 25769803776,
       "used": 18253611008, "reserved": 314572800, "utilization": 37, "temperature": 55,
       "power_mw": 123450,
       "processes": [{"pid": 123, "used": 17179869184}, {"pid": 456, "used": null}],
       "graphics_processes": [{"pid": 123, "used": 104857600}, {"pid": 789, "used": 209715200}]},
      {"name": "NVIDIA RTX A4000", "uuid": "GPU-0000bbbb", "total": 17171480576,
       "used": 1073741824, "processes": []}
    ]})");
}

inline std::unique_ptr<NvmlReader> open_reader() {
  Result<std::unique_ptr<NvmlReader>> r = NvmlReader::open();
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error());
  return r.ok() ? std::move(r.value()) : nullptr;
}

inline const ProcessMemory* find_pid(const GpuSample& g, int pid) {
  auto it = std::find_if(g.processes.begin(), g.processes.end(),
                         [&](const ProcessMemory& p) { return p.pid == pid; });
  return it == g.processes.end() ? nullptr : &*it;
}

// The fake itself, called directly: the protocol details the reader relies on.
class FakeNvmlLibrary {
 public:
  FakeNvmlLibrary() {
    handle_ =
        ::dlopen((vramd::test_paths::build_dir() + "/libnvidia-ml-fake.so").c_str(), RTLD_NOW);
  }
  ~FakeNvmlLibrary() {
    if (handle_ != nullptr) ::dlclose(handle_);
  }
  template <typename Fn>
  Fn get(const char* name) {
    return reinterpret_cast<Fn>(::dlsym(handle_, name));
  }
  bool loaded() const { return handle_ != nullptr; }

 private:
  void* handle_ = nullptr;
};

}  // namespace vramd::nvml_test
