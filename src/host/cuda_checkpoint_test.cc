// CudaCheckpoint through the real subprocess path, against the fake cuda-checkpoint
// (tests/fake_nvml/fake_cuda_checkpoint.cc) on the test GPU's state file, read back through the
// fake NVML as vramd reads a card.
#include "host/cuda_checkpoint.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "gpu/gpu_reader.h"
#include "test_paths.h"
#include "testgpu/fake_gpu_state.h"

namespace vramd::cuda_checkpoint_test {

const std::string& fake_checkpoint() {
  static const std::string s = vramd::test_paths::build_dir() + "/fake-bin/cuda-checkpoint";
  return s;
}
constexpr int kJob = 4242;     // 16 GiB on GPU 0
constexpr int kOther = 4343;   // 2 GiB on GPU 0
constexpr int kHidden = 4444;  // GPU 1, its own figure N/A (3 GiB on the card)
constexpr Duration kLockTimeout{200};

// GPU 0: 24 GiB, the job and another process; GPU 1: 16 GiB, one process whose bytes NVML does
// not tell. FAKE_NVML_STATE and the fake NVML library point at it for the scope.
class CheckpointGpu {
 public:
  CheckpointGpu() {
    char tmpl[] = "/tmp/vramd-ckpt-test-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
    path_ = dir_ + "/state.json";
    ::setenv("FAKE_NVML_STATE", path_.c_str(), 1);
    ::setenv("VRAMD_NVML_LIBRARY",
             (vramd::test_paths::build_dir() + "/libnvidia-ml-fake.so").c_str(), 1);
    EXPECT_TRUE(
        write_fake_gpu_state(path_, make_fake_gpu_state({{"NVIDIA GeForce RTX 4090", 24 * GiB},
                                                         {"NVIDIA RTX A4000", 16 * GiB}}))
            .ok());
    EXPECT_TRUE(add_fake_process(path_, 0, kJob, 16 * GiB).ok());
    EXPECT_TRUE(add_fake_process(path_, 0, kOther, 2 * GiB).ok());
    EXPECT_TRUE(add_fake_process(path_, 1, kHidden, std::nullopt, 3 * GiB).ok());
  }
  ~CheckpointGpu() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
    ::unsetenv("FAKE_NVML_STATE");
    ::unsetenv("VRAMD_NVML_LIBRARY");
  }
  CheckpointGpu(const CheckpointGpu&) = delete;
  CheckpointGpu& operator=(const CheckpointGpu&) = delete;

  // The fake's failure modes (tests/fake_nvml/README.md); "" for none.
  void faults(const std::string& words) const {
    std::ofstream(path_ + ".cuda-checkpoint", std::ios::trunc) << words << "\n";
  }
  const std::string& path() const { return path_; }
  const std::string& dir() const { return dir_; }

  // The cards as vramd reads them.
  GpuReading read() const {
    Result<std::unique_ptr<GpuReader>> reader = open_gpu_reader("nvml");
    EXPECT_TRUE(reader.ok()) << (reader.ok() ? "" : reader.error());
    return reader.ok() ? (*reader)->read() : GpuReading{};
  }

 private:
  std::string dir_;
  std::string path_;
};

const ProcessMemory* find_pid(const GpuSample& g, int pid) {
  auto it = std::find_if(g.processes.begin(), g.processes.end(),
                         [&](const ProcessMemory& p) { return p.pid == pid; });
  return it == g.processes.end() ? nullptr : &*it;
}

constexpr CheckpointTimeouts kTimeouts{std::chrono::seconds(5), std::chrono::seconds(5)};

std::string state_of(const CudaCheckpoint& c, int pid) {
  Result<CudaProcessState> s = c.state(pid);
  return s.ok() ? std::string(to_string(*s)) : "error: " + s.error();
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(CudaCheckpointParse, StatesAndAnythingElse) {
  EXPECT_EQ(*parse_cuda_process_state("running\n"), CudaProcessState::running);
  EXPECT_EQ(*parse_cuda_process_state("locked"), CudaProcessState::locked);
  EXPECT_EQ(*parse_cuda_process_state(" checkpointed\n"), CudaProcessState::checkpointed);
  EXPECT_EQ(*parse_cuda_process_state("failed\n"), CudaProcessState::failed);
  Result<CudaProcessState> bad = parse_cuda_process_state("suspended-ish\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error(), "not a CUDA process state: \"suspended-ish\"");
  EXPECT_FALSE(parse_cuda_process_state("").ok());
  EXPECT_FALSE(parse_cuda_process_state("running locked").ok());
}

TEST(CudaCheckpointParse, HelpTellsTheForm) {
  Result<CheckpointHelp> h570 = parse_cuda_checkpoint_help(
      "CUDA checkpoint and restore utility.\nVersion 570.86.10. Copyright (C) 2025\n"
      "--get-state --pid <pid>\n--action lock | checkpoint | restore | unlock --pid <pid>\n"
      "--toggle --pid <pid>\n");
  ASSERT_TRUE(h570.ok()) << h570.error();
  EXPECT_EQ(h570->form, CheckpointForm::action);
  EXPECT_EQ(h570->version, "570.86.10");
  Result<CheckpointHelp> h550 =
      parse_cuda_checkpoint_help("Version 550.90.07.\n--toggle --pid <value>\n--get-state\n");
  ASSERT_TRUE(h550.ok()) << h550.error();
  EXPECT_EQ(h550->form, CheckpointForm::toggle);
  Result<CheckpointHelp> bare = parse_cuda_checkpoint_help("Version 550.54.09.\n--toggle\n");
  ASSERT_FALSE(bare.ok());
  EXPECT_TRUE(has(bare.error(), "no --get-state")) << bare.error();
  Result<CheckpointHelp> other = parse_cuda_checkpoint_help("usage: frobnicate [-x]\n");
  ASSERT_FALSE(other.ok());
  EXPECT_TRUE(has(other.error(), "\"usage: frobnicate [-x]\"")) << other.error();
}

TEST(CudaCheckpoint, ProbeTellsTheFormFromItsHelp) {
  CheckpointGpu gpu;
  Result<CudaCheckpoint> c = CudaCheckpoint::probe(fake_checkpoint(), kTimeouts);
  ASSERT_TRUE(c.ok()) << c.error();
  EXPECT_EQ(c->form(), CheckpointForm::action);
  EXPECT_EQ(c->version(), "570.86.10");
  EXPECT_EQ(c->path(), fake_checkpoint());
  gpu.faults("driver-550");
  Result<CudaCheckpoint> t = CudaCheckpoint::probe(fake_checkpoint(), kTimeouts);
  ASSERT_TRUE(t.ok()) << t.error();
  EXPECT_EQ(t->form(), CheckpointForm::toggle);
  EXPECT_EQ(t->version(), "550.90.07");
}

TEST(CudaCheckpoint, SuspendAndResumeMoveTheBytesOutAndBack) {
  CheckpointGpu gpu;
  Result<CudaCheckpoint> probed = CudaCheckpoint::probe(fake_checkpoint(), kTimeouts);
  ASSERT_TRUE(probed.ok()) << probed.error();
  const CudaCheckpoint& c = *probed;
  EXPECT_EQ(state_of(c, kJob), "running");

  Status s = c.suspend(kJob, kLockTimeout);
  ASSERT_TRUE(s.ok()) << s.error();
  EXPECT_EQ(state_of(c, kJob), "checkpointed");
  GpuReading r = gpu.read();
  ASSERT_TRUE(r.error.empty()) << r.error;
  ASSERT_EQ(r.gpus.size(), 2u);
  EXPECT_EQ(r.gpus[0].used, 2 * GiB);  // the job's 16 GiB left the card, the other's stayed
  EXPECT_EQ(find_pid(r.gpus[0], kJob), nullptr);
  ASSERT_NE(find_pid(r.gpus[0], kOther), nullptr);
  EXPECT_EQ(r.gpus[1].used, 3 * GiB);  // another GPU: untouched
  // Suspended again: nothing to do (and nothing toggled back).
  ASSERT_TRUE(c.suspend(kJob, kLockTimeout).ok());
  EXPECT_EQ(state_of(c, kJob), "checkpointed");

  s = c.resume(kJob);
  ASSERT_TRUE(s.ok()) << s.error();
  EXPECT_EQ(state_of(c, kJob), "running");
  r = gpu.read();
  EXPECT_EQ(r.gpus[0].used, 18 * GiB);
  ASSERT_NE(find_pid(r.gpus[0], kJob), nullptr);
  EXPECT_EQ(find_pid(r.gpus[0], kJob)->used, 16 * GiB);
  ASSERT_TRUE(c.resume(kJob).ok());  // running: nothing to do
  EXPECT_EQ(gpu.read().gpus[0].used, 18 * GiB);
}

TEST(CudaCheckpoint, ARestorePutsBackTheCardBytesOfAProcessNvmlCannotMeasure) {
  CheckpointGpu gpu;
  Result<CudaCheckpoint> probed = CudaCheckpoint::probe(fake_checkpoint(), kTimeouts);
  ASSERT_TRUE(probed.ok()) << probed.error();
  const CudaCheckpoint& c = *probed;
  ASSERT_TRUE(c.suspend(kHidden, kLockTimeout).ok());
  GpuReading r = gpu.read();
  EXPECT_EQ(r.gpus[1].used, 0u);
  EXPECT_EQ(find_pid(r.gpus[1], kHidden), nullptr);
  ASSERT_TRUE(c.resume(kHidden).ok());
  r = gpu.read();
  EXPECT_EQ(r.gpus[1].used, 3 * GiB);  // the same bytes, on the same GPU
  ASSERT_NE(find_pid(r.gpus[1], kHidden), nullptr);
  EXPECT_EQ(find_pid(r.gpus[1], kHidden)->used, std::nullopt);
  EXPECT_EQ(r.gpus[0].used, 18 * GiB);
}

// A process in a MIG instance: its entry and bytes leave the instance and the card, and come back
// to both (tests/gpu/run.sh runs its suspend check in a MIG instance when MIG is on).
TEST(CudaCheckpoint, AProcessInAMigInstanceLeavesItAndTheCardAndComesBack) {
  CheckpointGpu gpu;
  nlohmann::json state = nlohmann::json::parse(R"({"driver_version": "590.48.01",
    "gpus": [{"name": "NVIDIA H200", "uuid": "GPU-0", "total": 150754820096, "used": 5385486336,
      "mig_devices": [
        {"gi": 2, "ci": 0, "uuid": "MIG-a", "profile": "3g.71gb", "total": 74893950976,
         "used": 4311744512, "processes": [{"pid": 4242, "used": 4294967296}]},
        null,
        {"gi": 9, "ci": 0, "uuid": "MIG-c", "profile": "1g.18gb", "total": 17179869184,
         "used": 1073741824, "processes": [{"pid": 4343, "used": 1073741824}]}]}]})");
  ASSERT_TRUE(write_fake_gpu_state(gpu.path(), state).ok());
  Result<CudaCheckpoint> probed = CudaCheckpoint::probe(fake_checkpoint(), kTimeouts);
  ASSERT_TRUE(probed.ok()) << probed.error();
  const CudaCheckpoint& c = *probed;
  EXPECT_EQ(state_of(c, kJob), "running");
  ASSERT_TRUE(c.suspend(kJob, kLockTimeout).ok());
  EXPECT_EQ(state_of(c, kJob), "checkpointed");
  nlohmann::json after = read_fake_gpu_state(gpu.path()).value();
  const nlohmann::json& card = after["gpus"][0];
  EXPECT_TRUE(card["mig_devices"][0]["processes"].empty()) << after.dump(2);
  EXPECT_EQ(card["mig_devices"][0]["used"], 4311744512u - 4294967296u);
  EXPECT_EQ(card["used"], 5385486336u - 4294967296u);
  EXPECT_EQ(card["mig_devices"][2]["used"], 1073741824u);  // the other instance: untouched
  ASSERT_TRUE(c.resume(kJob).ok());
  EXPECT_EQ(state_of(c, kJob), "running");
  EXPECT_EQ(read_fake_gpu_state(gpu.path()).value(), state);  // exactly as it was
}

TEST(CudaCheckpoint, UvmMemoryRefusesTheCheckpointAndTheProcessIsUnlocked) {
  CheckpointGpu gpu;
  Result<CudaCheckpoint> probed = CudaCheckpoint::probe(fake_checkpoint(), kTimeouts);
  ASSERT_TRUE(probed.ok()) << probed.error();
  const CudaCheckpoint& c = *probed;
  gpu.faults("uvm");
  Status s = c.suspend(kJob, kLockTimeout);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(has(s.error(), "pid 4242: not suspended: "));
  EXPECT_TRUE(has(s.error(),
                  "--action checkpoint --pid 4242: Could not checkpoint on process ID "
                  "4242: \"operation not supported\" (exit 33)"))
      << s.error();
  EXPECT_TRUE(has(s.error(), "it was unlocked and runs again")) << s.error();
  EXPECT_EQ(state_of(c, kJob), "running");
  EXPECT_EQ(gpu.read().gpus[0].used, 18 * GiB);
}

TEST(CudaCheckpoint, ALockThatTimesOutLeavesItRunning) {
  CheckpointGpu gpu;
  Result<CudaCheckpoint> probed = CudaCheckpoint::probe(fake_checkpoint(), kTimeouts);
  ASSERT_TRUE(probed.ok()) << probed.error();
  const CudaCheckpoint& c = *probed;
  gpu.faults("lock-timeout");
  auto start = std::chrono::steady_clock::now();
  Status s = c.suspend(kJob, Duration(100));
  auto took = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(has(s.error(),
                  "--action lock --pid 4242 --timeout 100: Could not lock on process "
                  "ID 4242: \"the operation timed out\""))
      << s.error();
  EXPECT_TRUE(has(s.error(), "it is still running")) << s.error();
  EXPECT_GE(took, std::chrono::milliseconds(100));  // it waited the lock's timeout, no longer
  EXPECT_LT(took, std::chrono::seconds(4));
  EXPECT_EQ(state_of(c, kJob), "running");
  EXPECT_EQ(gpu.read().gpus[0].used, 18 * GiB);
}

TEST(CudaCheckpoint, ARestoreThatFailsLeavesItCheckpointedAndALaterResumeWorks) {
  CheckpointGpu gpu;
  Result<CudaCheckpoint> probed = CudaCheckpoint::probe(fake_checkpoint(), kTimeouts);
  ASSERT_TRUE(probed.ok()) << probed.error();
  const CudaCheckpoint& c = *probed;
  ASSERT_TRUE(c.suspend(kJob, kLockTimeout).ok());
  gpu.faults("restore-fails");
  Status s = c.resume(kJob);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(has(s.error(), "pid 4242: not resumed: "));
  EXPECT_TRUE(has(s.error(), "Could not restore on process ID 4242: \"out of memory\""))
      << s.error();
  EXPECT_TRUE(has(s.error(), "its CUDA state is checkpointed")) << s.error();
  EXPECT_EQ(gpu.read().gpus[0].used, 2 * GiB);
  gpu.faults("");
  ASSERT_TRUE(c.resume(kJob).ok());
  EXPECT_EQ(gpu.read().gpus[0].used, 18 * GiB);
}

TEST(CudaCheckpoint, NoRoomOnItsGpuMeansNoRestore) {
  CheckpointGpu gpu;
  Result<CudaCheckpoint> probed = CudaCheckpoint::probe(fake_checkpoint(), kTimeouts);
  ASSERT_TRUE(probed.ok()) << probed.error();
  const CudaCheckpoint& c = *probed;
  ASSERT_TRUE(c.suspend(kJob, kLockTimeout).ok());
  ASSERT_TRUE(add_fake_process(gpu.path(), 0, 5000, 12 * GiB).ok());  // 14 of 24 GiB in use
  Status s = c.resume(kJob);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(has(s.error(), "\"out of memory\"")) << s.error();
  EXPECT_EQ(state_of(c, kJob), "checkpointed");
  ASSERT_TRUE(remove_fake_process(gpu.path(), 5000).ok());
  ASSERT_TRUE(c.resume(kJob).ok());
  EXPECT_EQ(gpu.read().gpus[0].used, 18 * GiB);
}

TEST(CudaCheckpoint, APidNotOnTheGpuIsNotACudaProcess) {
  CheckpointGpu gpu;
  Result<CudaCheckpoint> probed = CudaCheckpoint::probe(fake_checkpoint(), kTimeouts);
  ASSERT_TRUE(probed.ok()) << probed.error();
  const CudaCheckpoint& c = *probed;
  int self = static_cast<int>(::getpid());  // alive, and holds no GPU memory
  std::string words = "Could not get state on process ID " + std::to_string(self) +
                      ": \"initialization error\" (exit 3)";
  Result<CudaProcessState> st = c.state(self);
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(has(st.error(), words)) << st.error();
  Status s = c.suspend(self, kLockTimeout);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(has(s.error(), "not suspended: ")) << s.error();
  EXPECT_TRUE(has(s.error(), words)) << s.error();
  EXPECT_FALSE(c.resume(self).ok());
  EXPECT_EQ(gpu.read().gpus[0].used, 18 * GiB);
}

TEST(CudaCheckpoint, A550UtilityTogglesOnlyTheWayAsked) {
  CheckpointGpu gpu;
  gpu.faults("driver-550");
  Result<CudaCheckpoint> probed = CudaCheckpoint::probe(fake_checkpoint(), kTimeouts);
  ASSERT_TRUE(probed.ok()) << probed.error();
  const CudaCheckpoint& c = *probed;
  ASSERT_EQ(c.form(), CheckpointForm::toggle);
  ASSERT_TRUE(c.suspend(kJob, kLockTimeout).ok());
  EXPECT_EQ(state_of(c, kJob), "checkpointed");
  EXPECT_EQ(gpu.read().gpus[0].used, 2 * GiB);
  // A second suspend must not toggle it back to running.
  ASSERT_TRUE(c.suspend(kJob, kLockTimeout).ok());
  EXPECT_EQ(state_of(c, kJob), "checkpointed");
  EXPECT_EQ(gpu.read().gpus[0].used, 2 * GiB);
  ASSERT_TRUE(c.resume(kJob).ok());
  ASSERT_TRUE(c.resume(kJob).ok());  // nor a second resume back to checkpointed
  EXPECT_EQ(state_of(c, kJob), "running");
  EXPECT_EQ(gpu.read().gpus[0].used, 18 * GiB);

  gpu.faults("driver-550 uvm");
  Status s = c.suspend(kJob, kLockTimeout);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(has(s.error(),
                  "--toggle --pid 4242: Could not toggle on process ID 4242: "
                  "\"operation not supported\""))
      << s.error();
  EXPECT_TRUE(has(s.error(), "it is still running")) << s.error();
  EXPECT_EQ(state_of(c, kJob), "running");
  EXPECT_EQ(gpu.read().gpus[0].used, 18 * GiB);
}

TEST(CudaCheckpoint, WithoutAUsableUtilitySuspendIsNotOffered) {
  CheckpointGpu gpu;
  auto not_offered = [](const std::string& path) {
    Result<CudaCheckpoint> c = CudaCheckpoint::probe(path);
    EXPECT_FALSE(c.ok()) << path;
    std::string why = c.ok() ? "" : c.error();
    EXPECT_EQ(why.rfind("suspend is not offered: ", 0), 0u) << why;
    EXPECT_EQ(why.find('\n'), std::string::npos) << why;  // one line
    return why;
  };
  EXPECT_TRUE(has(not_offered("/nonexistent/cuda-checkpoint"), "cannot run it"));
  EXPECT_TRUE(has(not_offered("vramd-no-such-cuda-checkpoint"), "cannot run it"));
  std::string plain = gpu.dir() + "/cuda-checkpoint";
  std::ofstream(plain) << "not a program\n";
  ::chmod(plain.c_str(), 0644);
  EXPECT_TRUE(has(not_offered(plain), "cannot run it"));
  EXPECT_TRUE(has(not_offered(""), "[gpu] cuda_checkpoint"));

  gpu.faults("old-driver");
  std::string why = not_offered(fake_checkpoint());
  EXPECT_TRUE(has(why, "--help failed: Insufficient driver (exit 1)")) << why;
  gpu.faults("driver-550-toggle-only");
  why = not_offered(fake_checkpoint());
  EXPECT_TRUE(has(why, "--toggle but no --get-state")) << why;
}

TEST(CudaCheckpoint, AHangingUtilityIsKilledAtItsTimeout) {
  CheckpointGpu gpu;
  Result<CudaCheckpoint> probed =
      CudaCheckpoint::probe(fake_checkpoint(), {std::chrono::seconds(5), Duration(300)});
  ASSERT_TRUE(probed.ok()) << probed.error();
  const CudaCheckpoint& c = *probed;
  gpu.faults("hang-checkpoint");
  auto start = std::chrono::steady_clock::now();
  Status s = c.suspend(kJob, kLockTimeout);
  auto took = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(has(s.error(),
                  "--action checkpoint --pid 4242 did not finish in 300 ms and was "
                  "killed"))
      << s.error();
  EXPECT_TRUE(has(s.error(), "it was unlocked and runs again")) << s.error();
  EXPECT_LT(took, std::chrono::seconds(4));  // the fake sleeps an hour
  EXPECT_EQ(state_of(c, kJob), "running");
  EXPECT_EQ(gpu.read().gpus[0].used, 18 * GiB);

  gpu.faults("");
  ASSERT_TRUE(c.suspend(kJob, kLockTimeout).ok());
  gpu.faults("hang-restore");
  s = c.resume(kJob);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(has(s.error(), "--action restore --pid 4242 did not finish in 300 ms")) << s.error();
  EXPECT_TRUE(has(s.error(), "its CUDA state is checkpointed")) << s.error();

  gpu.faults("hang-help");
  Result<CudaCheckpoint> hung =
      CudaCheckpoint::probe(fake_checkpoint(), {Duration(300), Duration(300)});
  ASSERT_FALSE(hung.ok());
  EXPECT_TRUE(has(hung.error(), "suspend is not offered: ")) << hung.error();
  EXPECT_TRUE(has(hung.error(), "--help did not answer in 300 ms")) << hung.error();
}

}  // namespace vramd::cuda_checkpoint_test
