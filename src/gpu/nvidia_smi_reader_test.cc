// NvidiaSmiReader running the fake nvidia-smi (build/fake-bin/nvidia-smi) as a child process.
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "gpu/nvidia_smi.h"
#include "host/subprocess.h"
#include "testgpu/fake_gpu_state.h"
#include "test_paths.h"

namespace vramd {
namespace {

using nlohmann::json;

const std::string& fake_smi() {
  static const std::string s = vramd::test_paths::build_dir() + "/fake-bin/nvidia-smi";
  return s;
}

class SmiGpu {
 public:
  SmiGpu() {
    char tmpl[] = "/tmp/vramd-smi-test-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
    path_ = dir_ + "/state.json";
    ::setenv("FAKE_NVML_STATE", path_.c_str(), 1);
  }
  ~SmiGpu() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
    ::unsetenv("FAKE_NVML_STATE");
  }
  void write(const json& state) {
    Status s = write_fake_gpu_state(path_, state);
    ASSERT_TRUE(s.ok()) << s.error();
  }
  const std::string& dir() const { return dir_; }
  const std::string& path() const { return path_; }

 private:
  std::string dir_;
  std::string path_;
};

json state() {
  return json::parse(R"({
    "driver_version": "550.54.14",
    "gpus": [
      {"name": "NVIDIA GeForce RTX 3090", "uuid": "GPU-0000aaaa", "total": 25769803776,
       "used": 18253611008, "utilization": 37, "temperature": 55, "power_mw": 123450,
       "processes": [{"pid": 123, "used": 17179869184, "name": "python3, main.py"},
                     {"pid": 456, "used": null, "name": "C:\\Program Files (x86)\\a b.exe"}]},
      {"name": "NVIDIA RTX A4000", "uuid": "GPU-0000bbbb", "total": 17171480576,
       "used": 1073741824, "processes": []}
    ]})");
}

TEST(NvidiaSmiReader, ReadsTheFakeThroughTheRealBinaryPath) {
  SmiGpu gpu;
  gpu.write(state());
  NvidiaSmiReader reader(fake_smi());
  EXPECT_EQ(reader.backend(), "nvidia-smi");
  GpuReading r = reader.read();
  ASSERT_TRUE(r.error.empty()) << r.error;
  EXPECT_TRUE(reader.last_warnings().empty());
  EXPECT_EQ(r.backend, "nvidia-smi");
  ASSERT_EQ(r.gpus.size(), 2u);
  const GpuSample& g = r.gpus[0];
  EXPECT_EQ(g.uuid, "GPU-0000aaaa");
  EXPECT_EQ(g.name, "NVIDIA GeForce RTX 3090");
  EXPECT_EQ(g.total, 24576 * MiB);
  EXPECT_EQ(g.used, 17408 * MiB);
  EXPECT_EQ(g.utilization_pct, 37.0);
  EXPECT_EQ(g.temperature_c, 55u);
  EXPECT_EQ(g.power_w, 123.45);
  ASSERT_EQ(g.processes.size(), 2u);
  EXPECT_EQ(g.processes[0].pid, 123);
  EXPECT_EQ(g.processes[0].name, "python3, main.py");
  EXPECT_EQ(g.processes[0].used, 16384 * MiB);
  EXPECT_EQ(g.processes[1].name, "C:\\Program Files (x86)\\a b.exe");
  EXPECT_EQ(g.processes[1].used, std::nullopt);
  EXPECT_EQ(r.gpus[1].utilization_pct, std::nullopt);
  EXPECT_EQ(r.gpus[1].power_w, std::nullopt);
  EXPECT_TRUE(r.gpus[1].processes.empty());
}

// With a schedule (core/process_scan.h) the `--query-compute-apps` run is left out while no
// GPU's memory moved by the threshold; the last lists stand in.
TEST(NvidiaSmiReader, TheProcessListRunsOnlyWhenDue) {
  SmiGpu gpu;
  gpu.write(state());
  NvidiaSmiReader reader(fake_smi());
  ProcessListSchedule lists({32 * MiB, std::chrono::seconds(10)});
  MonoTime t{};
  auto read = [&](bool force = false) {
    lists.begin(t, force);
    return reader.read(lists);
  };
  GpuReading first = read();
  ASSERT_TRUE(first.error.empty()) << first.error;
  EXPECT_TRUE(first.gpus[0].processes_listed);
  ASSERT_EQ(first.gpus[0].processes.size(), 2u);

  // 20 MiB more, under the threshold: the list is not run; the last one stands in.
  ASSERT_TRUE(add_fake_process(gpu.path(), 0, 4242, 20 * MiB).ok());
  t += std::chrono::seconds(1);
  GpuReading quiet = read();
  EXPECT_FALSE(quiet.gpus[0].processes_listed);
  EXPECT_EQ(quiet.gpus[0].processes.size(), 2u);
  EXPECT_EQ(quiet.gpus[0].used, 17408 * MiB + 20 * MiB);  // the cards are read every time
  // Forced (vramd did something): run, and the new process is there.
  GpuReading forced = read(/*force=*/true);
  EXPECT_TRUE(forced.gpus[0].processes_listed);
  EXPECT_EQ(forced.gpus[0].processes.size(), 3u);
  // 1 GiB more moves the card past the threshold: run without being asked.
  ASSERT_TRUE(add_fake_process(gpu.path(), 0, 4343, 1 * GiB).ok());
  t += std::chrono::seconds(1);
  GpuReading moved = read();
  EXPECT_TRUE(moved.gpus[0].processes_listed);
  EXPECT_EQ(moved.gpus[0].processes.size(), 4u);
}

TEST(NvidiaSmiReader, HeaderedOutputOfTheFakeParsesByColumnName) {
  SmiGpu gpu;
  gpu.write(state());
  ProcessOutput out = run_process(
      {fake_smi(), "--query-compute-apps=gpu_uuid,pid,process_name,used_memory", "--format=csv"},
      std::chrono::seconds(10));
  ASSERT_EQ(out.exit_code, 0) << out.err;
  Result<SmiApps> apps = parse_smi_compute_apps_headered(out.out);
  ASSERT_TRUE(apps.ok()) << apps.error();
  ASSERT_EQ(apps->apps.size(), 2u);
  EXPECT_EQ(apps->apps[0].process.used, 16384 * MiB);
  EXPECT_EQ(apps->apps[1].process.used, std::nullopt);
}

TEST(NvidiaSmiReader, NoDriverIsAReadingErrorWithTheToolsMessage) {
  SmiGpu gpu;  // no state file: the fake fails like a machine without a driver
  NvidiaSmiReader reader(fake_smi());
  GpuReading r = reader.read();
  EXPECT_NE(r.error.find("exit 9"), std::string::npos) << r.error;
  EXPECT_NE(r.error.find("couldn't communicate with the NVIDIA driver"), std::string::npos)
      << r.error;
  gpu.write(state());
  EXPECT_TRUE(reader.read().error.empty());
}

TEST(NvidiaSmiReader, HangingToolIsKilledAfterTheTimeout) {
  SmiGpu gpu;
  std::string script = gpu.dir() + "/nvidia-smi";
  {
    std::ofstream f(script);
    f << "#!/bin/sh\nexec sleep 30\n";
  }
  std::filesystem::permissions(script, std::filesystem::perms::owner_all);
  NvidiaSmiReader reader(script, std::chrono::milliseconds(200));
  auto start = std::chrono::steady_clock::now();
  GpuReading r = reader.read();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_NE(r.error.find("killed"), std::string::npos) << r.error;
}

TEST(NvidiaSmiReader, StderrFirstLineOnFailure) {
  SmiGpu gpu;
  std::string script = gpu.dir() + "/nvidia-smi";
  {
    std::ofstream f(script);
    f << "#!/bin/sh\necho 'Failed to initialize NVML: Driver/library version mismatch' >&2\n"
         "echo 'second line' >&2\nexit 18\n";
  }
  std::filesystem::permissions(script, std::filesystem::perms::owner_all);
  GpuReading r = NvidiaSmiReader(script).read();
  EXPECT_EQ(r.error,
            "nvidia-smi failed (exit 18): Failed to initialize NVML: Driver/library "
            "version mismatch");
}

TEST(FindNvidiaSmi, EnvironmentThenPath) {
  ::setenv("VRAMD_NVIDIA_SMI", fake_smi().c_str(), 1);
  Result<std::string> found = find_nvidia_smi();
  ASSERT_TRUE(found.ok()) << found.error();
  EXPECT_EQ(*found, fake_smi());
  ::setenv("VRAMD_NVIDIA_SMI", "/nonexistent/nvidia-smi", 1);
  ASSERT_FALSE(find_nvidia_smi().ok());
  EXPECT_NE(find_nvidia_smi().error().find("/nonexistent/nvidia-smi"), std::string::npos);
  ::unsetenv("VRAMD_NVIDIA_SMI");

  const char* old_path = std::getenv("PATH");
  std::string saved = old_path ? old_path : "";
  ::setenv("PATH", ("/nonexistent-a:" + vramd::test_paths::build_dir() + "/fake-bin").c_str(), 1);
  found = find_nvidia_smi();
  ::setenv("PATH", saved.c_str(), 1);
  ASSERT_TRUE(found.ok()) << found.error();
  EXPECT_EQ(*found, fake_smi());
}

TEST(NvidiaSmiReader, MigInstancesComeFromTheListingAndTheTable) {
  SmiGpu gpu;
  gpu.write(json::parse(R"({
    "gpus": [
      {"name": "NVIDIA H200", "uuid": "GPU-0000cccc", "total": 150754820096, "used": 17783848960,
       "mig_devices": [
         {"gi": 2, "ci": 0, "uuid": "MIG-aaaa", "profile": "3g.71gb", "total": 74893950976,
          "used": 17747148800, "processes": []},
         {"gi": 2, "ci": 1, "uuid": "MIG-aaab", "profile": "3g.71gb", "total": 74893950976,
          "used": 17747148800,
          "processes": [{"pid": 12267, "used": 14183038976, "name": "./gpu_burn"}]},
         {"gi": 9, "ci": 0, "uuid": "MIG-cccc", "profile": "1g.18gb", "total": 17179869184,
          "used": 9437184, "processes": [{"pid": 300, "used": 1048576, "name": "python3"}]}]}
    ]})"));
  NvidiaSmiReader reader(fake_smi());
  GpuReading r = reader.read();
  ASSERT_TRUE(r.error.empty()) << r.error;
  ASSERT_EQ(r.gpus.size(), 3u);
  EXPECT_TRUE(r.gpus[0].mig_enabled);
  EXPECT_TRUE(r.gpus[0].processes.empty());
  EXPECT_EQ(r.gpus[1].label, "0/2");
  EXPECT_EQ(r.gpus[1].uuid, "MIG-aaaa");
  EXPECT_EQ(r.gpus[1].mig_profile, "3g.71gb");
  EXPECT_EQ(r.gpus[1].total, 71424 * MiB);
  ASSERT_EQ(r.gpus[1].processes.size(), 1u);
  EXPECT_EQ(r.gpus[1].processes[0].pid, 12267);
  EXPECT_EQ(r.gpus[1].processes[0].used, 13526 * MiB);
  EXPECT_EQ(r.gpus[2].label, "0/9");
  ASSERT_EQ(r.gpus[2].processes.size(), 1u);
  EXPECT_EQ(r.gpus[2].processes[0].pid, 300);
  for (const auto& w : reader.last_warnings()) ADD_FAILURE() << w;
}

}  // namespace
}  // namespace vramd
