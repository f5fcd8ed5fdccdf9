// NvmlReader on MIG cards, MPS clients and early R535 drivers, through the real dlopen path
// against the fake libnvidia-ml.
#include <dlfcn.h>
#include <stdlib.h>

#include <gtest/gtest.h>

#include "core/gpu_select.h"
#include "gpu/nvml_reader.h"
#include "gpu/nvml_test_gpu.h"
#include "test_paths.h"

namespace vramd {
namespace {

using nlohmann::json;
using namespace nvml_test;

// An H200 with MIG on, as in shared/reference/samples/nvidia-smi-table-h200-mig-590.48.txt: GI 2
// holds two compute instances (MIG devices 0 and 1), GI 3, 9 and 10 one each; slot 4 is empty.
json mig_state() {
  return json::parse(R"({
    "driver_version": "590.48.01",
    "gpus": [
      {"name": "NVIDIA H200", "uuid": "GPU-00000000-0000-0000-0000-000000000000",
       "total": 150754820096, "used": 17783848960,
       "mig_devices": [
         {"gi": 2, "ci": 0, "uuid": "MIG-aaaaaaaa-0000-5000-8000-000000000000", "profile": "3g.71gb",
          "total": 74893950976, "used": 17747148800, "processes": []},
         {"gi": 2, "ci": 1, "uuid": "MIG-aaaaaaaa-0000-5000-8000-000000000001", "profile": "3g.71gb",
          "total": 74893950976, "used": 17747148800,
          "processes": [{"pid": 12249, "used": 2300575744}, {"pid": 12250, "used": 1226833920},
                        {"pid": 12267, "used": 14183038976}]},
         {"gi": 3, "ci": 0, "uuid": "MIG-bbbbbbbb-0000-5000-8000-000000000000", "profile": "2g.35gb",
          "total": 34896609280, "used": 17825792, "processes": []},
         {"gi": 9, "ci": 0, "uuid": "MIG-cccccccc-0000-5000-8000-000000000000", "profile": "1g.18gb",
          "total": 17179869184, "used": 9437184,
          "processes": [{"pid": 300, "used": 1048576}]},
         null,
         {"gi": 10, "ci": 0, "uuid": "MIG-dddddddd-0000-5000-8000-000000000000", "profile": "1g.18gb",
          "total": 17179869184, "used": 9437184, "processes": []}
       ]}
    ]})");
}

const GpuSample* find_gpu(const GpuReading& r, const std::string& label) {
  for (const auto& g : r.gpus)
    if (gpu_label(g) == label) return &g;
  return nullptr;
}

// The instances of mig_state(), whoever may read the parent's aggregate.
void expect_mig_instances(const GpuReading& r) {
  ASSERT_TRUE(r.error.empty()) << r.error;
  ASSERT_EQ(r.gpus.size(), 5u);  // the parent and four GPU instances
  const GpuSample& parent = r.gpus[0];
  EXPECT_EQ(parent.index, 0u);
  EXPECT_EQ(parent.label, "0");
  EXPECT_TRUE(parent.mig_enabled);
  EXPECT_FALSE(parent.parent);
  EXPECT_TRUE(parent.processes.empty());  // listed on the instances, counted there
  EXPECT_FALSE(attributes_memory(parent));
  EXPECT_FALSE(admits_leases(parent));

  const GpuSample* gi2 = find_gpu(r, "0/2");
  ASSERT_NE(gi2, nullptr);
  EXPECT_EQ(gi2->index, mig_flat_index(0, 2));
  EXPECT_EQ(gi2->health, GpuHealth::ok) << gi2->error;
  EXPECT_EQ(gi2->parent, 0u);
  EXPECT_EQ(gi2->gpu_instance_id, 2u);
  EXPECT_EQ(gi2->compute_instance_id, 0u);
  EXPECT_EQ(gi2->uuid, "MIG-aaaaaaaa-0000-5000-8000-000000000000");
  EXPECT_EQ(gi2->name, "NVIDIA H200 MIG 3g.71gb");
  EXPECT_EQ(gi2->mig_profile, "3g.71gb");
  EXPECT_EQ(gi2->total, 74893950976u);  // its two compute instances share it: counted once
  EXPECT_EQ(gi2->used, 17747148800u);
  EXPECT_TRUE(gi2->processes_readable);
  ASSERT_EQ(gi2->processes.size(), 3u);
  ASSERT_NE(find_pid(*gi2, 12267), nullptr);
  EXPECT_EQ(find_pid(*gi2, 12267)->used, 14183038976u);
  EXPECT_EQ(find_pid(*gi2, 12267)->gpu_instance_id, 2u);
  EXPECT_EQ(find_pid(*gi2, 12267)->compute_instance_id, 1u);
  EXPECT_TRUE(admits_leases(*gi2));
  EXPECT_EQ(cuda_visible_devices(*gi2), "MIG-aaaaaaaa-0000-5000-8000-000000000000");

  const GpuSample* gi9 = find_gpu(r, "0/9");
  ASSERT_NE(gi9, nullptr);
  EXPECT_EQ(gi9->mig_profile, "1g.18gb");
  ASSERT_EQ(gi9->processes.size(), 1u);
  EXPECT_EQ(gi9->processes[0].pid, 300);
  ASSERT_NE(find_gpu(r, "0/3"), nullptr);
  ASSERT_NE(find_gpu(r, "0/10"), nullptr);  // after the empty slot
  EXPECT_EQ(find_gpu(r, "0/10")->used, 9437184u);
}

TEST(NvmlReaderMig, InstancesAreDevicesOfTheirOwnUnderTheirParent) {
  TestGpu gpu;
  gpu.write(mig_state());
  auto reader = open_reader();
  ASSERT_NE(reader, nullptr);
  GpuReading r = reader->read();
  expect_mig_instances(r);
  // With privileges the parent's card-wide figures are there.
  EXPECT_EQ(r.gpus[0].health, GpuHealth::ok) << r.gpus[0].error;
  EXPECT_EQ(r.gpus[0].total, 150754820096u);
  EXPECT_EQ(r.gpus[0].note, "");
}

TEST(NvmlReaderMig, WithoutPrivilegesTheInstancesAreStillReadAndTheGapIsSaid) {
  TestGpu gpu;
  json state = mig_state();
  state["privileged"] = false;
  gpu.write(state);
  auto reader = open_reader();
  ASSERT_NE(reader, nullptr);
  GpuReading r = reader->read();
  expect_mig_instances(r);
  const GpuSample& parent = r.gpus[0];
  EXPECT_EQ(parent.health, GpuHealth::ok) << parent.error;  // not an error for the whole card
  EXPECT_EQ(parent.total, 0u);
  EXPECT_NE(parent.note.find("card-wide memory: Insufficient Permissions"), std::string::npos)
      << parent.note;
  EXPECT_NE(parent.note.find("card-wide process list"), std::string::npos) << parent.note;
}

TEST(NvmlReaderMig, AnInstanceWhoseListFailsTakesItsProcessesFromTheParentList) {
  TestGpu gpu;
  json state = mig_state();
  json errors;
  for (const char* fn :
       {"nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2",
        "nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses_v3",
        "nvmlDeviceGetGraphicsRunningProcesses_v2", "nvmlDeviceGetGraphicsRunningProcesses"})
    errors[fn] = "NO_PERMISSION";
  state["gpus"][0]["mig_devices"][3]["errors"] = errors;  // GI 9
  gpu.write(state);
  auto reader = open_reader();
  ASSERT_NE(reader, nullptr);
  GpuReading r = reader->read();
  const GpuSample* gi9 = find_gpu(r, "0/9");
  ASSERT_NE(gi9, nullptr);
  EXPECT_TRUE(gi9->processes_readable);
  ASSERT_EQ(gi9->processes.size(), 1u);  // from the parent's list, by its gpuInstanceId
  EXPECT_EQ(gi9->processes[0].pid, 300);

  state["privileged"] = false;  // and without the parent's list: unreadable, said so
  gpu.write(state);
  r = reader->read();
  gi9 = find_gpu(r, "0/9");
  ASSERT_NE(gi9, nullptr);
  EXPECT_FALSE(gi9->processes_readable);
  EXPECT_TRUE(gi9->processes.empty());
}

TEST(NvmlReaderMig, AnInstanceWhoseMemoryFailsIsAnErrorOfItsOwn) {
  TestGpu gpu;
  json state = mig_state();
  state["gpus"][0]["mig_devices"][2]["errors"] = {{"nvmlDeviceGetMemoryInfo_v2", "UNKNOWN"},
                                                  {"nvmlDeviceGetMemoryInfo", "UNKNOWN"}};
  gpu.write(state);
  auto reader = open_reader();
  ASSERT_NE(reader, nullptr);
  GpuReading r = reader->read();
  const GpuSample* gi3 = find_gpu(r, "0/3");
  ASSERT_NE(gi3, nullptr);
  EXPECT_EQ(gi3->health, GpuHealth::error);
  EXPECT_NE(gi3->error.find("GPU 0/3 (MIG-bbbbbbbb"), std::string::npos) << gi3->error;
  EXPECT_EQ(r.gpus[0].health, GpuHealth::ok);
  EXPECT_EQ(find_gpu(r, "0/2")->health, GpuHealth::ok);
}

TEST(NvmlReaderMig, MigOffGivesNoInstanceIdsAndTheFakeSaysFFFFFFFF) {
  TestGpu gpu;
  gpu.write(base_state());
  auto reader = open_reader();
  ASSERT_NE(reader, nullptr);
  GpuReading r = reader->read();
  ASSERT_EQ(r.gpus.size(), 2u);
  EXPECT_FALSE(r.gpus[0].mig_enabled);
  ASSERT_NE(find_pid(r.gpus[0], 123), nullptr);
  EXPECT_EQ(find_pid(r.gpus[0], 123)->gpu_instance_id, std::nullopt);
  EXPECT_EQ(find_pid(r.gpus[0], 123)->compute_instance_id, std::nullopt);
  EXPECT_TRUE(admits_leases(r.gpus[0]));
  EXPECT_EQ(cuda_visible_devices(r.gpus[1]), "1");

  // What the library itself writes, as the real one does with MIG off.
  void* lib =
      ::dlopen((vramd::test_paths::build_dir() + "/libnvidia-ml-fake.so").c_str(), RTLD_NOW);
  ASSERT_NE(lib, nullptr);
  auto init = reinterpret_cast<nvmlInit_fn>(::dlsym(lib, "nvmlInit_v2"));
  auto handle = reinterpret_cast<nvmlDeviceGetHandleByIndex_fn>(
      ::dlsym(lib, "nvmlDeviceGetHandleByIndex_v2"));
  auto list = reinterpret_cast<nvmlDeviceGetProcesses_v2_fn>(
      ::dlsym(lib, "nvmlDeviceGetComputeRunningProcesses_v3"));
  ASSERT_EQ(init(), NVML_SUCCESS);
  nvmlDevice_t dev = nullptr;
  ASSERT_EQ(handle(0, &dev), NVML_SUCCESS);
  nvmlProcessInfo_v2_t infos[4] = {};
  unsigned count = 4;
  ASSERT_EQ(list(dev, &count, infos), NVML_SUCCESS);
  EXPECT_EQ(infos[0].gpuInstanceId, 0xFFFFFFFFu);
  EXPECT_EQ(infos[0].computeInstanceId, 0xFFFFFFFFu);
  reinterpret_cast<nvmlShutdown_fn>(::dlsym(lib, "nvmlShutdown"))();
  ::dlclose(lib);
}

TEST(NvmlReaderMps, ClientsAreListedBesideTheServer) {
  TestGpu gpu;
  json state = base_state();
  state["gpus"][1]["processes"] = {{{"pid", 1999}, {"used", 33554432}}};  // nvidia-cuda-mps-server
  state["gpus"][1]["mps_processes"] = {{{"pid", 2001}, {"used", 4294967296}},
                                       {{"pid", 2002}, {"used", 1073741824}}};
  gpu.write(state);
  auto reader = open_reader();
  ASSERT_NE(reader, nullptr);
  GpuReading r = reader->read();
  ASSERT_EQ(r.gpus.size(), 2u);
  const GpuSample& g = r.gpus[1];
  ASSERT_EQ(g.processes.size(), 3u);
  EXPECT_EQ(find_pid(g, 1999)->used, 33554432u);
  ASSERT_NE(find_pid(g, 2001), nullptr);
  EXPECT_EQ(find_pid(g, 2001)->used, 4294967296u);
  EXPECT_EQ(find_pid(g, 2002)->used, 1073741824u);
  EXPECT_EQ(reader->api_versions().mps, "v3");

  state["omit_symbols"] = {"nvmlDeviceGetMPSComputeRunningProcesses_v3"};
  gpu.write(state);
  r = reader->read();
  EXPECT_EQ(reader->api_versions().mps, "v2");
  EXPECT_EQ(r.gpus[1].processes.size(), 3u);
}

// 100 processes with distinct pids and sizes: every one must come back exactly.
json many_processes_state(const char* driver) {
  json state = base_state();
  state["driver_version"] = driver;
  json procs = json::array();
  for (int i = 0; i < 100; ++i) procs.push_back({{"pid", 10000 + i}, {"used", (i + 1) * 1048576}});
  state["gpus"][1]["processes"] = procs;
  return state;
}

void expect_many_processes(const GpuReading& r) {
  ASSERT_EQ(r.gpus.size(), 2u);
  const GpuSample& g = r.gpus[1];
  ASSERT_EQ(g.processes.size(), 100u);
  for (int i = 0; i < 100; ++i) {
    const ProcessMemory* p = find_pid(g, 10000 + i);
    ASSERT_NE(p, nullptr) << i;
    EXPECT_EQ(p->used, static_cast<Bytes>(i + 1) * 1048576) << i;
  }
}

TEST(NvmlReaderR535, EarlyR535DriverVersionReadsThe32ByteEntries) {
  TestGpu gpu;
  json state = many_processes_state("535.54.03");
  state["v3_entry_bytes"] = 32;
  gpu.write(state);
  auto reader = open_reader();
  ASSERT_NE(reader, nullptr);
  expect_many_processes(reader->read());
  EXPECT_EQ(reader->api_versions().v3_entry_bytes, 32u);
  EXPECT_EQ(reader->api_versions().compute, "v3");
}

TEST(NvmlReaderR535, TheLibrarysExportsTellTheLayoutAsNvitopDoes) {
  TestGpu gpu;
  ::setenv("VRAMD_NVML_LIBRARY",
           (vramd::test_paths::build_dir() + "/libnvidia-ml-fake-r535.so").c_str(), 1);
  gpu.write(many_processes_state("535.999.99"));  // the version alone would not tell
  auto reader = open_reader();
  ASSERT_NE(reader, nullptr);
  expect_many_processes(reader->read());
  EXPECT_EQ(reader->api_versions().v3_entry_bytes, 32u);
}

TEST(NvmlReaderR535, OtherDriversKeep24ByteEntries) {
  TestGpu gpu;
  gpu.write(many_processes_state("535.104.05"));
  auto reader = open_reader();
  ASSERT_NE(reader, nullptr);
  expect_many_processes(reader->read());
  EXPECT_EQ(reader->api_versions().v3_entry_bytes, 24u);
}

TEST(NvmlReaderR535, AMisjudgedLayoutNeverWritesOrReadsPastTheBuffer) {
  // 32-byte entries read as 24: entries are garbled, but the buffer has room for 32-byte
  // entries and no entry beyond it is read (AddressSanitizer watches in test-asan).
  TestGpu gpu;
  json state = many_processes_state("550.54.14");
  state["v3_entry_bytes"] = 32;
  gpu.write(state);
  auto reader = open_reader();
  ASSERT_NE(reader, nullptr);
  GpuReading r = reader->read();
  ASSERT_EQ(r.gpus.size(), 2u);
  EXPECT_LE(r.gpus[1].processes.size(), 100u);
  ASSERT_FALSE(r.gpus[1].processes.empty());
  EXPECT_EQ(r.gpus[1].processes[0].pid, 10000);  // the first entry is where both layouts agree
}

TEST(NvmlReaderR535, ACountBeyondTheBufferIsNeverRead) {
  // The library answers SUCCESS with a count far beyond the room it was given.
  TestGpu gpu;
  json state = many_processes_state("550.54.14");
  state["overstate_count"] = 100000;
  gpu.write(state);
  auto reader = open_reader();
  ASSERT_NE(reader, nullptr);
  expect_many_processes(reader->read());  // exactly the 100 it wrote; ASan watches the rest
}

TEST(NvmlReaderR535, EveryCountReadsRightInEitherLayout) {
  // Around the first buffer's size (count + count/4 + 8) and past 96 entries, where 24-byte
  // buffers overflowed with 32-byte entries; the list also grows between count and fetch.
  for (bool r535 : {false, true}) {
    for (int n : {0, 1, 2, 7, 8, 9, 31, 96, 97, 98, 250}) {
      TestGpu gpu;
      json state = base_state();
      state["driver_version"] = r535 ? "535.86.10" : "535.104.05";
      if (r535) state["v3_entry_bytes"] = 32;
      json procs = json::array();
      for (int i = 0; i < n; ++i) procs.push_back({{"pid", 20000 + i}, {"used", (i + 3) * 4096}});
      state["gpus"][1]["processes"] = procs;
      state["gpus"][1]["extra_processes_after_first_call"] = n % 3;
      gpu.write(state);
      auto reader = open_reader();
      ASSERT_NE(reader, nullptr);
      GpuReading r = reader->read();
      ASSERT_EQ(r.gpus.size(), 2u);
      const GpuSample& g = r.gpus[1];
      SCOPED_TRACE(testing::Message() << "r535=" << r535 << " n=" << n);
      EXPECT_EQ(reader->api_versions().v3_entry_bytes, r535 ? 32u : 24u);
      EXPECT_TRUE(g.processes_readable);
      EXPECT_EQ(g.processes.size(), static_cast<std::size_t>(n + (n ? n % 3 : 0)));
      for (int i = 0; i < n; ++i) {
        const ProcessMemory* p = find_pid(g, 20000 + i);
        ASSERT_NE(p, nullptr) << i;
        EXPECT_EQ(p->used, static_cast<Bytes>(i + 3) * 4096) << i;
        EXPECT_EQ(p->gpu_instance_id, std::nullopt);
      }
    }
  }
}

TEST(FakeNvml, MigSlotsWithoutAnInstanceAreNotFound) {
  TestGpu gpu;
  gpu.write(mig_state());
  FakeNvmlLibrary lib;
  ASSERT_TRUE(lib.loaded());
  ASSERT_EQ(lib.get<nvmlInit_fn>("nvmlInit_v2")(), NVML_SUCCESS);
  nvmlDevice_t dev = nullptr;
  ASSERT_EQ(lib.get<nvmlDeviceGetHandleByIndex_fn>("nvmlDeviceGetHandleByIndex_v2")(0, &dev),
            NVML_SUCCESS);
  unsigned current = 0, pending = 0;
  ASSERT_EQ(lib.get<nvmlDeviceGetMigMode_fn>("nvmlDeviceGetMigMode")(dev, &current, &pending),
            NVML_SUCCESS);
  EXPECT_EQ(current, nvml::kDeviceMigEnable);
  auto by_index =
      lib.get<nvmlDeviceGetMigDeviceHandleByIndex_fn>("nvmlDeviceGetMigDeviceHandleByIndex");
  nvmlDevice_t mig = nullptr;
  EXPECT_EQ(by_index(dev, 4, &mig), NVML_ERROR_NOT_FOUND);
  EXPECT_EQ(by_index(dev, 6, &mig), NVML_ERROR_NOT_FOUND);
  ASSERT_EQ(by_index(dev, 1, &mig), NVML_SUCCESS);
  unsigned gi = 0, ci = 0;
  ASSERT_EQ(lib.get<nvmlDeviceGetInstanceId_fn>("nvmlDeviceGetGpuInstanceId")(mig, &gi),
            NVML_SUCCESS);
  ASSERT_EQ(lib.get<nvmlDeviceGetInstanceId_fn>("nvmlDeviceGetComputeInstanceId")(mig, &ci),
            NVML_SUCCESS);
  EXPECT_EQ(gi, 2u);
  EXPECT_EQ(ci, 1u);
  EXPECT_EQ(lib.get<nvmlShutdown_fn>("nvmlShutdown")(), NVML_SUCCESS);
}

}  // namespace
}  // namespace vramd
