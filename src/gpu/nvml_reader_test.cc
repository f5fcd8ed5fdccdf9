// NvmlReader through the real dlopen path, against the fake libnvidia-ml (tests/fake_nvml).
#include "gpu/nvml_reader.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include <gtest/gtest.h>

#include "gpu/nvml_test_gpu.h"
#include "testgpu/fake_gpu_state.h"

namespace vramd {
namespace {

using nlohmann::json;
using namespace nvml_test;

// The figures of base_state(), whichever API versions read them.
void expect_base_figures(const GpuReading& r, bool reserved_known) {
  ASSERT_TRUE(r.error.empty()) << r.error;
  EXPECT_EQ(r.backend, "nvml");
  EXPECT_EQ(r.driver_version, "550.54.14");
  ASSERT_EQ(r.gpus.size(), 2u);
  const GpuSample& g = r.gpus[0];
  EXPECT_EQ(g.health, GpuHealth::ok) << g.error;
  EXPECT_EQ(g.index, 0u);
  EXPECT_EQ(g.uuid, "GPU-0000aaaa");
  EXPECT_EQ(g.name, "NVIDIA GeForce RTX 3090");
  EXPECT_EQ(g.total, 25769803776u);
  EXPECT_EQ(g.used, 18253611008u);  // total - free in both versions
  if (reserved_known) {
    EXPECT_EQ(g.reserved, 314572800u);
  } else {
    EXPECT_EQ(g.reserved, std::nullopt);
  }
  EXPECT_EQ(g.utilization_pct, 37.0);
  EXPECT_EQ(g.temperature_c, 55u);
  EXPECT_EQ(g.power_w, 123.45);
  EXPECT_TRUE(g.processes_readable);
  ASSERT_EQ(g.processes.size(), 3u);
  ASSERT_NE(find_pid(g, 123), nullptr);
  EXPECT_EQ(find_pid(g, 123)->used, 17179869184u);  // in both lists: once, the larger value
  ASSERT_NE(find_pid(g, 456), nullptr);
  EXPECT_EQ(find_pid(g, 456)->used, std::nullopt);  // NVML_VALUE_NOT_AVAILABLE
  ASSERT_NE(find_pid(g, 789), nullptr);
  EXPECT_EQ(find_pid(g, 789)->used, 209715200u);

  const GpuSample& g1 = r.gpus[1];
  EXPECT_EQ(g1.health, GpuHealth::ok) << g1.error;
  EXPECT_EQ(g1.index, 1u);
  EXPECT_EQ(g1.total, 17171480576u);
  EXPECT_EQ(g1.used, 1073741824u);
  EXPECT_EQ(g1.utilization_pct, std::nullopt);
  EXPECT_EQ(g1.temperature_c, std::nullopt);
  EXPECT_EQ(g1.power_w, std::nullopt);
  EXPECT_TRUE(g1.processes_readable);
  EXPECT_TRUE(g1.processes.empty());
}

TEST(NvmlReader, AllSymbolsPresentUsesNewestVersions) {
  TestGpu gpu;
  gpu.write(base_state());
  auto reader = open_reader();
  ASSERT_NE(reader, nullptr);
  EXPECT_EQ(reader->backend(), "nvml");
  expect_base_figures(reader->read(), /*reserved_known=*/true);
  EXPECT_EQ(reader->api_versions().to_string(),
            "init=v2 mem=v2 compute=v3 graphics=v3 mps=v3 v3_entry=24");
}

TEST(NvmlReader, ProcessListV3MissingFallsBackToV2) {
  TestGpu gpu;
  json state = base_state();
  state["omit_symbols"] = {"nvmlDeviceGetComputeRunningProcesses_v3",
                           "nvmlDeviceGetGraphicsRunningProcesses_v3"};
  gpu.write(state);
  auto reader = open_reader();
  ASSERT_NE(reader, nullptr);
  expect_base_figures(reader->read(), true);
  EXPECT_EQ(reader->api_versions().compute, "v2");
  EXPECT_EQ(reader->api_versions().graphics, "v2");
}

TEST(NvmlReader, ProcessListV3AndV2MissingFallsBackToV1WithItsOwnLayout) {
  TestGpu gpu;
  json state = base_state();
  state["omit_symbols"] = {
      "nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2",
      "nvmlDeviceGetGraphicsRunningProcesses_v3", "nvmlDeviceGetGraphicsRunningProcesses_v2"};
  gpu.write(state);
  auto reader = open_reader();
  ASSERT_NE(reader, nullptr);
  expect_base_figures(reader->read(), true);
  EXPECT_EQ(reader->api_versions().compute, "v1");
  EXPECT_EQ(reader->api_versions().graphics, "v1");
}

TEST(NvmlReader, MemoryInfoV2MissingFallsBackToV1) {
  TestGpu gpu;
  json state = base_state();
  state["omit_symbols"] = {"nvmlDeviceGetMemoryInfo_v2"};
  gpu.write(state);
  auto reader = open_reader();
  ASSERT_NE(reader, nullptr);
  expect_base_figures(reader->read(), /*reserved_known=*/false);
  EXPECT_EQ(reader->api_versions().memory, "v1");
}

TEST(NvmlReader, InitV2MissingFallsBackToInit) {
  TestGpu gpu;
  json state = base_state();
  state["omit_symbols"] = {"nvmlInit_v2", "nvmlDeviceGetCount_v2", "nvmlDeviceGetHandleByIndex_v2"};
  gpu.write(state);
  auto reader = open_reader();
  ASSERT_NE(reader, nullptr);
  expect_base_figures(reader->read(), true);
  EXPECT_EQ(reader->api_versions().init, "v1");
}

TEST(NvmlReader, MemoryV2VersionMismatchFallsBackToV1) {
  TestGpu gpu;
  json state = base_state();
  state["errors"] = {{"nvmlDeviceGetMemoryInfo_v2", "ARGUMENT_VERSION_MISMATCH"}};
  gpu.write(state);
  auto reader = open_reader();
  ASSERT_NE(reader, nullptr);
  expect_base_figures(reader->read(), false);
  EXPECT_EQ(reader->api_versions().memory, "v1");
}

TEST(NvmlReader, AllNotAvailableProcessesStayUnknown) {
  TestGpu gpu;
  json state = base_state();
  state["gpus"][0]["processes"] =
      json::parse(R"([{"pid": 1, "used": null}, {"pid": 2, "used": null}])");
  state["gpus"][0]["graphics_processes"] = json::array();
  gpu.write(state);
  auto reader = open_reader();
  ASSERT_NE(reader, nullptr);
  GpuReading r = reader->read();
  ASSERT_EQ(r.gpus.size(), 2u);
  ASSERT_EQ(r.gpus[0].processes.size(), 2u);
  for (const ProcessMemory& p : r.gpus[0].processes) EXPECT_EQ(p.used, std::nullopt) << p.pid;
}

TEST(NvmlReader, LostGpuIsReportedThenReadAgainWhenItComesBack) {
  TestGpu gpu;
  json state = base_state();
  state["gpus"][0]["errors"] = {{"nvmlDeviceGetMemoryInfo_v2", "GPU_IS_LOST"}};
  gpu.write(state);
  auto reader = open_reader();
  ASSERT_NE(reader, nullptr);
  GpuReading lost = reader->read();
  ASSERT_TRUE(lost.error.empty()) << lost.error;
  ASSERT_EQ(lost.gpus.size(), 2u);
  EXPECT_EQ(lost.gpus[0].health, GpuHealth::lost);
  EXPECT_NE(lost.gpus[0].error.find("GPU is lost"), std::string::npos) << lost.gpus[0].error;
  EXPECT_NE(lost.gpus[0].error.find("GPU 0"), std::string::npos) << lost.gpus[0].error;
  EXPECT_NE(lost.gpus[0].error.find("GPU-0000aaaa"), std::string::npos) << lost.gpus[0].error;
  EXPECT_EQ(lost.gpus[1].health, GpuHealth::ok);

  gpu.write(base_state());
  expect_base_figures(reader->read(), true);
}

TEST(NvmlReader, LostAtHandleAndResetRequiredAreLost) {
  TestGpu gpu;
  json state = base_state();
  state["gpus"][0]["lost"] = true;
  state["gpus"][1]["errors"] = {{"nvmlDeviceGetComputeRunningProcesses_v3", "RESET_REQUIRED"}};
  gpu.write(state);
  auto reader = open_reader();
  ASSERT_NE(reader, nullptr);
  GpuReading r = reader->read();
  ASSERT_EQ(r.gpus.size(), 2u);
  EXPECT_EQ(r.gpus[0].health, GpuHealth::lost);
  EXPECT_EQ(r.gpus[1].health, GpuHealth::lost);
  EXPECT_NE(r.gpus[1].error.find("GPU-0000bbbb"), std::string::npos) << r.gpus[1].error;
}

TEST(NvmlReader, OtherDeviceErrorIsErrorHealth) {
  TestGpu gpu;
  json state = base_state();
  state["gpus"][1]["errors"] = {{"nvmlDeviceGetMemoryInfo_v2", "UNKNOWN"},
                                {"nvmlDeviceGetMemoryInfo", "UNKNOWN"}};
  gpu.write(state);
  auto reader = open_reader();
  ASSERT_NE(reader, nullptr);
  GpuReading r = reader->read();
  ASSERT_EQ(r.gpus.size(), 2u);
  EXPECT_EQ(r.gpus[0].health, GpuHealth::ok);
  EXPECT_EQ(r.gpus[1].health, GpuHealth::error);
  EXPECT_NE(r.gpus[1].error.find("Unknown Error"), std::string::npos) << r.gpus[1].error;
}

TEST(NvmlReader, OptionalFiguresFailingAreUnknownNotErrors) {
  TestGpu gpu;
  json state = base_state();
  state["errors"] = {{"nvmlDeviceGetPowerUsage", "UNKNOWN"},
                     {"nvmlDeviceGetTemperature", "NO_PERMISSION"},
                     {"nvmlDeviceGetUtilizationRates", "NOT_SUPPORTED"}};
  gpu.write(state);
  auto reader = open_reader();
  ASSERT_NE(reader, nullptr);
  GpuReading r = reader->read();
  ASSERT_EQ(r.gpus.size(), 2u);
  EXPECT_EQ(r.gpus[0].health, GpuHealth::ok);
  EXPECT_EQ(r.gpus[0].power_w, std::nullopt);
  EXPECT_EQ(r.gpus[0].temperature_c, std::nullopt);
  EXPECT_EQ(r.gpus[0].utilization_pct, std::nullopt);
  EXPECT_EQ(r.gpus[0].used, 18253611008u);
}

TEST(NvmlReader, UnreadableProcessListsSaySo) {
  TestGpu gpu;
  json state = base_state();
  json errors;
  for (const char* fn :
       {"nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2",
        "nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses_v3",
        "nvmlDeviceGetGraphicsRunningProcesses_v2", "nvmlDeviceGetGraphicsRunningProcesses"}) {
    errors[fn] = "NO_PERMISSION";
  }
  state["errors"] = errors;
  gpu.write(state);
  auto reader = open_reader();
  ASSERT_NE(reader, nullptr);
  GpuReading r = reader->read();
  ASSERT_EQ(r.gpus.size(), 2u);
  EXPECT_EQ(r.gpus[0].health, GpuHealth::ok);
  EXPECT_FALSE(r.gpus[0].processes_readable);
  EXPECT_TRUE(r.gpus[0].processes.empty());
}

TEST(NvmlReader, DriverNotLoadedThenLoaded) {
  TestGpu gpu;  // no state file yet: the fake's nvmlInit answers DRIVER_NOT_LOADED
  auto reader = open_reader();
  ASSERT_NE(reader, nullptr);
  GpuReading r = reader->read();
  EXPECT_NE(r.error.find("NVIDIA driver not loaded (NVML: Driver Not Loaded)"), std::string::npos)
      << r.error;
  EXPECT_TRUE(r.gpus.empty());

  gpu.write(base_state());
  expect_base_figures(reader->read(), true);
}

TEST(NvmlReader, VersionMismatchAtInitIsExplained) {
  TestGpu gpu;
  json state = base_state();
  state["errors"] = {{"nvmlInit_v2", "LIB_RM_VERSION_MISMATCH"}};
  gpu.write(state);
  auto reader = open_reader();
  ASSERT_NE(reader, nullptr);
  GpuReading r = reader->read();
  EXPECT_NE(r.error.find("versions differ"), std::string::npos) << r.error;
  gpu.write(base_state());
  EXPECT_TRUE(reader->read().error.empty());
}

TEST(NvmlReader, DriverGoneAfterInitIsAReadingErrorThenRecovers) {
  TestGpu gpu;
  gpu.write(base_state());
  auto reader = open_reader();
  ASSERT_NE(reader, nullptr);
  expect_base_figures(reader->read(), true);
  gpu.remove();
  EXPECT_FALSE(reader->read().error.empty());
  gpu.write(base_state());
  expect_base_figures(reader->read(), true);
}

TEST(NvmlReader, ProcessListGrowingBetweenCountAndFetch) {
  TestGpu gpu;
  json state = base_state();
  state["gpus"][0]["extra_processes_after_first_call"] = 50;
  gpu.write(state);
  auto reader = open_reader();
  ASSERT_NE(reader, nullptr);
  GpuReading r = reader->read();
  ASSERT_EQ(r.gpus.size(), 2u);
  EXPECT_TRUE(r.gpus[0].processes_readable);
  EXPECT_EQ(r.gpus[0].processes.size(), 3u + 50u);
  EXPECT_EQ(find_pid(r.gpus[0], 456)->used, std::nullopt);
  EXPECT_EQ(reader->api_versions().compute, "v3");
}

TEST(NvmlReader, MissingLibraryNamesWhatWasTried) {
  TestGpu gpu;
  ::setenv("VRAMD_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1", 1);
  Result<std::unique_ptr<NvmlReader>> r = NvmlReader::open();
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().find("/nonexistent/libnvidia-ml.so.1"), std::string::npos) << r.error();
}

TEST(NvmlReader, DefaultCandidatesPreferVersionedName) {
  ::unsetenv("VRAMD_NVML_LIBRARY");
  EXPECT_EQ(NvmlReader::library_candidates(),
            (std::vector<std::string>{"libnvidia-ml.so.1", "libnvidia-ml.so"}));
}

TEST(FakeNvml, MemoryInfoV2ChecksTheVersionField) {
  TestGpu gpu;
  gpu.write(base_state());
  FakeNvmlLibrary lib;
  ASSERT_TRUE(lib.loaded());
  ASSERT_EQ(lib.get<nvmlInit_fn>("nvmlInit_v2")(), NVML_SUCCESS);
  nvmlDevice_t dev = nullptr;
  ASSERT_EQ(lib.get<nvmlDeviceGetHandleByIndex_fn>("nvmlDeviceGetHandleByIndex_v2")(0, &dev),
            NVML_SUCCESS);
  auto mem_v2 = lib.get<nvmlDeviceGetMemoryInfo_v2_fn>("nvmlDeviceGetMemoryInfo_v2");
  nvmlMemory_v2_t mem{};
  EXPECT_EQ(mem_v2(dev, &mem), NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
  mem.version = nvml::kMemoryV2Version;
  ASSERT_EQ(mem_v2(dev, &mem), NVML_SUCCESS);
  EXPECT_EQ(mem.total - mem.free, 18253611008u);
  EXPECT_EQ(mem.reserved, 314572800u);
  EXPECT_EQ(mem.used + mem.reserved, 18253611008u);
  EXPECT_EQ(lib.get<nvmlShutdown_fn>("nvmlShutdown")(), NVML_SUCCESS);
}

TEST(FakeNvml, ProcessListCountProtocol) {
  TestGpu gpu;
  gpu.write(base_state());
  FakeNvmlLibrary lib;
  ASSERT_TRUE(lib.loaded());
  auto list = lib.get<nvmlDeviceGetProcesses_v1_fn>("nvmlDeviceGetComputeRunningProcesses");
  nvmlDevice_t dev = nullptr;
  unsigned count = 0;
  EXPECT_EQ(list(dev, &count, nullptr), NVML_ERROR_UNINITIALIZED);
  ASSERT_EQ(lib.get<nvmlInit_fn>("nvmlInit")(), NVML_SUCCESS);
  ASSERT_EQ(lib.get<nvmlDeviceGetHandleByIndex_fn>("nvmlDeviceGetHandleByIndex")(0, &dev),
            NVML_SUCCESS);
  EXPECT_EQ(list(dev, &count, nullptr), NVML_ERROR_INSUFFICIENT_SIZE);
  EXPECT_EQ(count, 2u);
  nvmlProcessInfo_v1_t infos[2] = {};
  count = 1;
  EXPECT_EQ(list(dev, &count, infos), NVML_ERROR_INSUFFICIENT_SIZE);
  EXPECT_EQ(count, 2u);
  ASSERT_EQ(list(dev, &count, infos), NVML_SUCCESS);
  EXPECT_EQ(infos[0].pid, 123u);
  EXPECT_EQ(infos[1].usedGpuMemory, nvml::kValueNotAvailable);
  nvmlDevice_t dev1 = nullptr;
  ASSERT_EQ(lib.get<nvmlDeviceGetHandleByIndex_fn>("nvmlDeviceGetHandleByIndex")(1, &dev1),
            NVML_SUCCESS);
  count = 0;
  EXPECT_EQ(list(dev1, &count, nullptr), NVML_SUCCESS);  // none running
  EXPECT_EQ(count, 0u);
  EXPECT_EQ(lib.get<nvmlShutdown_fn>("nvmlShutdown")(), NVML_SUCCESS);
}

}  // namespace
}  // namespace vramd
