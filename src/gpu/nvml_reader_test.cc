// NvmlReader through the real dlopen path, against the fake libnvidia-ml (tests/fake_nvml).
#include "gpu/nvml_reader.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include <gtest/gtest.h>

#include "gpu/nvml_test_gpu.h"
#include "test_paths.h"
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

namespace vramd {
namespace {

using nlohmann::json;
using namespace nvml_test;

// The fake library's own count of each entry point (fakeNvmlCallCounts), through a handle of
// this test's that keeps the library loaded while readers come and go.
struct FakeCounts {
  void* lib = ::dlopen((vramd::test_paths::build_dir() + "/libnvidia-ml-fake.so").c_str(),
                       RTLD_NOW | RTLD_LOCAL);
  ~FakeCounts() {
    if (lib) ::dlclose(lib);
  }
  json now() const {
    auto fn = reinterpret_cast<const char* (*)()>(::dlsym(lib, "fakeNvmlCallCounts"));
    return fn ? json::parse(fn()) : json::object();
  }
};

uint64_t calls_of(const GpuReading& r, const std::string& fn) {
  for (const auto& [name, n] : r.nvml_calls)
    if (name == fn) return n;
  return 0;
}

// The reader's count of every entry point is the library's own, call for call.
TEST(NvmlReader, CountsEveryCallAsTheLibrarySeesIt) {
  TestGpu gpu;
  gpu.write(base_state());
  FakeCounts fake;
  ASSERT_NE(fake.lib, nullptr) << ::dlerror();
  json before = fake.now();
  auto reader = open_reader();
  ASSERT_NE(reader, nullptr);
  GpuReading r;
  for (int i = 0; i < 3; ++i) r = reader->read();
  json after = fake.now();
  ASSERT_FALSE(r.nvml_calls.empty());
  for (const auto& [fn, n] : r.nvml_calls) {
    uint64_t seen = after.value(fn, uint64_t{0}) - before.value(fn, uint64_t{0});
    EXPECT_EQ(n, seen) << fn;
  }
  EXPECT_EQ(calls_of(r, "nvmlDeviceGetMemoryInfo_v2"), 6u);  // 2 GPUs, 3 reads
  EXPECT_EQ(calls_of(r, "nvmlInit_v2"), 1u);
  // GPU 0's compute list has processes: a count call and a fetch each read; GPU 1's is empty.
  EXPECT_EQ(calls_of(r, "nvmlDeviceGetComputeRunningProcesses_v3"), 9u);
}

// With a schedule, the lists are read when memory moves by the threshold, when forced, when the
// interval passed, and otherwise the last lists stand in.
TEST(NvmlReader, ProcessListsOnlyWhenDue) {
  TestGpu gpu;
  gpu.write(base_state());
  auto reader = open_reader();
  ASSERT_NE(reader, nullptr);
  ProcessListSchedule lists({32 * MiB, std::chrono::seconds(10)});
  MonoTime t{};
  auto read = [&](bool force = false) {
    lists.begin(t, force);
    return reader->read(lists);
  };
  const std::string list_fn = "nvmlDeviceGetComputeRunningProcesses_v3";
  GpuReading first = read();
  expect_base_figures(first, true);
  EXPECT_TRUE(first.gpus[0].processes_listed);
  uint64_t listed = calls_of(first, list_fn);

  // Nothing moved: memory and utilization are read, the lists are not; the last ones stand.
  t += std::chrono::seconds(1);
  GpuReading quiet = read();
  expect_base_figures(quiet, true);
  EXPECT_FALSE(quiet.gpus[0].processes_listed);
  EXPECT_FALSE(quiet.gpus[1].processes_listed);
  EXPECT_EQ(calls_of(quiet, list_fn), listed);
  EXPECT_EQ(calls_of(quiet, "nvmlDeviceGetMemoryInfo_v2"), 4u);

  // A new process whose 20 MiB stay under the threshold is not seen yet...
  ASSERT_TRUE(add_fake_process(gpu.path(), 0, 4242, 20 * MiB).ok());
  t += std::chrono::seconds(1);
  GpuReading small = read();
  EXPECT_EQ(find_pid(small.gpus[0], 4242), nullptr);
  EXPECT_EQ(calls_of(small, list_fn), listed);
  // ...and is once vramd says something changed (a grant, a start).
  GpuReading forced = read(/*force=*/true);
  ASSERT_NE(find_pid(forced.gpus[0], 4242), nullptr);
  EXPECT_GT(calls_of(forced, list_fn), listed);
  listed = calls_of(forced, list_fn);

  // Memory moving by the threshold lists that GPU alone, in the same read.
  ASSERT_TRUE(add_fake_process(gpu.path(), 0, 4343, 1 * GiB).ok());
  t += std::chrono::seconds(1);
  GpuReading moved = read();
  ASSERT_NE(find_pid(moved.gpus[0], 4343), nullptr);
  EXPECT_TRUE(moved.gpus[0].processes_listed);
  EXPECT_FALSE(moved.gpus[1].processes_listed);
  EXPECT_EQ(find_pid(moved.gpus[0], 4343)->used, 1 * GiB);

  // The interval: each GPU again 10 s after its last lists, with nothing moving (GPU 1 was last
  // listed a second before GPU 0).
  t += std::chrono::seconds(9);
  GpuReading gpu1_due = read();
  EXPECT_FALSE(gpu1_due.gpus[0].processes_listed);
  EXPECT_TRUE(gpu1_due.gpus[1].processes_listed);
  t += std::chrono::seconds(1);
  GpuReading gpu0_due = read();
  EXPECT_TRUE(gpu0_due.gpus[0].processes_listed);
  EXPECT_FALSE(gpu0_due.gpus[1].processes_listed);

  // Without a schedule, every read lists (discover, `vramd status` without a daemon).
  EXPECT_TRUE(reader->read().gpus[0].processes_listed);
}

// Lists that could not be read are not kept in place of the next read.
TEST(NvmlReader, UnreadableListsAreReadAgain) {
  TestGpu gpu;
  json s = base_state();
  s["errors"] = {{"nvmlDeviceGetComputeRunningProcesses_v3", "NO_PERMISSION"},
                 {"nvmlDeviceGetGraphicsRunningProcesses_v3", "NO_PERMISSION"}};
  s["omit_symbols"] = {"nvmlDeviceGetComputeRunningProcesses_v2",
                       "nvmlDeviceGetComputeRunningProcesses",
                       "nvmlDeviceGetGraphicsRunningProcesses_v2",
                       "nvmlDeviceGetGraphicsRunningProcesses"};
  gpu.write(s);
  auto reader = open_reader();
  ASSERT_NE(reader, nullptr);
  ProcessListSchedule lists;
  lists.begin(MonoTime{}, false);
  GpuReading r = reader->read(lists);
  EXPECT_FALSE(r.gpus[0].processes_readable);
  lists.begin(MonoTime{} + std::chrono::seconds(1), false);
  r = reader->read(lists);
  EXPECT_TRUE(r.gpus[0].processes_listed);  // read again, not stood in for
  EXPECT_FALSE(r.gpus[0].processes_readable);
}

}  // namespace
}  // namespace vramd
