#include "supervisor/crash_rules.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <set>
#include "test_paths.h"

namespace vramd {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::vector<std::string> fixture_lines(const std::string& name) {
  std::ifstream in(vramd::test_paths::source_dir() + "/tests/fixtures/crashes/" + name);
  EXPECT_TRUE(in.good()) << name;
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// What the supervisor hands over: the first lines since the start and the last lines of the log.
CrashInput from_log(const std::string& name, std::size_t boot_lines = 40,
                    std::size_t tail_lines = 200) {
  std::vector<std::string> lines = fixture_lines(name);
  CrashInput in;
  in.boot_log.assign(lines.begin(), lines.begin() + std::min(boot_lines, lines.size()));
  in.log_tail.assign(lines.end() - std::min(tail_lines, lines.size()), lines.end());
  return in;
}

const std::string& line_containing(const std::vector<std::string>& lines, std::string_view text) {
  auto it = std::find_if(lines.begin(), lines.end(),
                         [&](const std::string& l) { return l.find(text) != std::string::npos; });
  EXPECT_NE(it, lines.end()) << text;
  static const std::string none;
  return it == lines.end() ? none : *it;
}

bool contains(const std::vector<std::string>& lines, std::string_view text) {
  return std::any_of(lines.begin(), lines.end(),
                     [&](const std::string& l) { return l.find(text) != std::string::npos; });
}

TEST(CrashRules, BuiltinsAreValidWithUniqueSignatures) {
  std::set<std::string> seen;
  for (const CrashRule& r : builtin_crash_rules()) {
    EXPECT_EQ(check_crash_rule(r), std::nullopt) << r.signature;
    EXPECT_TRUE(seen.insert(r.signature).second) << "duplicate " << r.signature;
    EXPECT_FALSE(r.explanation.empty()) << r.signature;
    EXPECT_FALSE(r.suggestion.empty()) << r.signature;
  }
  for (const char* s : {"cuda-async-offload", "cuda-oom", "cuda-illegal-memory-access",
                        "cublas-error", "nccl-error", "cuda-error"}) {
    EXPECT_TRUE(seen.count(s)) << s;
  }
  EXPECT_EQ(&builtin_crash_rules(), &builtin_crash_rules());
}

// Each built-in rule fires on a log shaped like the real error, over the generic traceback
// fallback that every one of these logs would also allow.
TEST(CrashRules, EveryBuiltinFiresOnItsFixture) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"comfyui-async-offload.log", "cuda-async-offload"},
      {"diffusers-cuda-oom.log", "cuda-oom"},
      {"comfyui-oom-malloc-async.log", "cuda-oom"},
      {"vllm-gpu-memory-utilization.log", "vllm-gpu-memory-utilization"},
      {"vllm-illegal-memory-access.log", "cuda-illegal-memory-access"},
      {"cublas-execution-failed.log", "cublas-error"},
      {"nccl-watchdog-timeout.log", "nccl-timeout"},
      {"nccl-unhandled-cuda-error.log", "nccl-error"},
      {"comfyui-driver-mismatch.log", "cuda-driver"},
      {"comfyui-unknown-error-no-async.log", "cuda-error"},
      {"comfyui-port-in-use.log", "port-in-use"},
      {"comfyui-unrecognized-argument.log", "bad-arguments"},
  };
  std::set<std::string> fired;
  for (const auto& [file, signature] : cases) {
    CrashInput in = from_log(file);
    in.exit_code = 1;
    CrashDiagnosis d = diagnose_crash(in, {});
    EXPECT_EQ(d.signature, signature) << file;
    EXPECT_FALSE(d.evidence.empty()) << file;
    fired.insert(d.signature);
  }
  for (const CrashRule& r : builtin_crash_rules()) {
    EXPECT_TRUE(fired.count(r.signature)) << "no fixture for " << r.signature;
  }
}

TEST(CrashDiagnosis, AsyncOffloadFindsTheBootLineOutsideTheTail) {
  // vramd killed the wedged service after its health checks failed; the log still names why.
  CrashInput in = from_log("comfyui-async-offload.log", 40, 100);
  in.signal = SIGKILL;
  ASSERT_FALSE(contains(in.log_tail, "Using async weight offloading"));
  CrashDiagnosis d = diagnose_crash(in, {});
  EXPECT_EQ(d.signature, "cuda-async-offload");
  EXPECT_EQ(d.title, "CUDA error in async weight offloading");
  EXPECT_THAT(d.suggestion, HasSubstr("--disable-async-offload"));
  EXPECT_EQ(d.evidence, (std::vector<std::string>{
                            "Using async weight offloading with 2 streams",
                            "!!! Exception during processing !!! CUDA error: unknown error",
                            "torch.AcceleratorError: CUDA error: unknown error",
                        }));
}

TEST(CrashDiagnosis, AsyncOffloadNeedsTheBootLine) {
  CrashInput in = from_log("comfyui-async-offload.log");
  auto drop = [](std::vector<std::string>& lines) {
    std::erase_if(lines, [](const std::string& l) {
      return l.find("Using async weight offloading") != std::string::npos;
    });
  };
  drop(in.boot_log);
  drop(in.log_tail);
  in.exit_code = 1;
  CrashDiagnosis d = diagnose_crash(in, {});
  EXPECT_EQ(d.signature, "cuda-error");
  EXPECT_EQ(d.title, "CUDA error: unknown error");
  EXPECT_THAT(d.explanation, HasSubstr("(unknown error)"));
  EXPECT_EQ(d.evidence, (std::vector<std::string>{
                            "!!! Exception during processing !!! CUDA error: unknown error",
                            "torch.AcceleratorError: CUDA error: unknown error",
                        }));

  // An older ComfyUI without async offloading: the same error is a generic CUDA error.
  CrashInput old = from_log("comfyui-unknown-error-no-async.log");
  old.exit_code = 1;
  EXPECT_EQ(diagnose_crash(old, {}).signature, "cuda-error");
}

TEST(CrashDiagnosis, CudaOomNamesWhoHeldTheGpu) {
  CrashInput in = from_log("diffusers-cuda-oom.log");
  in.exit_code = 1;
  in.gpu_holders = {{"comfyui", 16 * GiB}, {"flux#7", 6 * GiB}};
  CrashDiagnosis d = diagnose_crash(in, {});
  EXPECT_EQ(d.signature, "cuda-oom");  // not python-exception:torch.OutOfMemoryError
  EXPECT_EQ(d.title, "Out of GPU memory");
  EXPECT_THAT(d.explanation, HasSubstr("comfyui held 16.0 GiB, flux#7 held 6.0 GiB."));
  ASSERT_EQ(d.evidence.size(), 1u);
  EXPECT_THAT(d.evidence[0],
              HasSubstr("torch.OutOfMemoryError: CUDA out of memory. Tried to "
                        "allocate 2.00 GiB. GPU 0 has a total capacity of 23.55 GiB"));
}

TEST(CrashDiagnosis, CudaOomFromCudaMallocAsyncAndManyOrNoHolders) {
  CrashInput in = from_log("comfyui-oom-malloc-async.log");
  in.signal = SIGTERM;
  CrashDiagnosis d = diagnose_crash(in, {});
  EXPECT_EQ(d.signature, "cuda-oom");
  EXPECT_THAT(d.explanation, HasSubstr("at that moment: none recorded."));
  EXPECT_EQ(d.evidence, std::vector<std::string>{"torch.OutOfMemoryError: Allocation on device "});

  for (int i = 0; i < 7; ++i) in.gpu_holders.push_back({"job" + std::to_string(i), GiB});
  d = diagnose_crash(in, {});
  EXPECT_THAT(d.explanation, HasSubstr("job4 held 1.0 GiB, and 2 more held 2.0 GiB."));
  EXPECT_THAT(d.explanation, Not(HasSubstr("job5 held")));
}

TEST(CrashDiagnosis, VllmShortOfItsMemoryShareNamesHolders) {
  CrashInput in = from_log("vllm-gpu-memory-utilization.log");
  in.exit_code = 1;
  in.gpu_holders = {{"comfyui", 16 * GiB}, {"vllm", 512 * MiB}};
  CrashDiagnosis d = diagnose_crash(in, {});
  EXPECT_EQ(d.signature, "vllm-gpu-memory-utilization");
  EXPECT_THAT(d.explanation, HasSubstr("comfyui held 16.0 GiB, vllm held 512 MiB."));
  EXPECT_THAT(d.suggestion, HasSubstr("--gpu-memory-utilization"));
  ASSERT_EQ(d.evidence.size(), 2u);  // the engine's log record and its process's traceback
  EXPECT_THAT(d.evidence[0], HasSubstr("[core.py:708] ValueError: Free memory on device"));
  EXPECT_THAT(d.evidence[1], HasSubstr("(EngineCore_DP0 pid=2990) ValueError: Free memory"));
}

TEST(CrashDiagnosis, IllegalMemoryAccess) {
  CrashInput in = from_log("vllm-illegal-memory-access.log");
  in.exit_code = 1;
  std::vector<std::string> lines = fixture_lines("vllm-illegal-memory-access.log");
  CrashDiagnosis d = diagnose_crash(in, {});
  EXPECT_EQ(d.signature, "cuda-illegal-memory-access");
  EXPECT_THAT(d.suggestion, HasSubstr("CUDA_LAUNCH_BLOCKING=1"));
  EXPECT_EQ(d.evidence,
            std::vector<std::string>{line_containing(
                lines, "torch.AcceleratorError: CUDA error: an illegal memory access")});
}

TEST(CrashDiagnosis, CublasStatusNamedInTitle) {
  CrashInput in = from_log("cublas-execution-failed.log");
  in.exit_code = 1;
  CrashDiagnosis d = diagnose_crash(in, {});
  EXPECT_EQ(d.signature, "cublas-error");  // not the generic "CUDA error:" the line also has
  EXPECT_EQ(d.title, "cuBLAS failed: CUBLAS_STATUS_EXECUTION_FAILED");
  EXPECT_THAT(d.explanation, HasSubstr("failed with CUBLAS_STATUS_EXECUTION_FAILED."));
  ASSERT_EQ(d.evidence.size(), 1u);
  EXPECT_TRUE(d.evidence[0].starts_with(
      "RuntimeError: CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasGemmEx("));
}

TEST(CrashDiagnosis, NcclErrorAndNcclTimeout) {
  CrashInput in = from_log("nccl-unhandled-cuda-error.log");
  in.exit_code = 1;
  CrashDiagnosis d = diagnose_crash(in, {});
  EXPECT_EQ(d.signature, "nccl-error");
  EXPECT_THAT(d.suggestion, HasSubstr("NCCL_P2P_DISABLE=1"));
  EXPECT_EQ(d.evidence,
            (std::vector<std::string>{
                "[rank1]: torch.distributed.DistBackendError: NCCL error in: "
                "../torch/csrc/distributed/c10d/NCCLUtils.hpp:317, unhandled cuda error (run with "
                "NCCL_DEBUG=INFO for details), NCCL version 2.21.5",
                "[rank1]: ncclUnhandledCudaError: Call to CUDA function failed.",
                "[rank1]: Cuda failure 'peer access is not supported between these two devices'",
            }));

  // The watchdog aborts the process: the log names the cause better than SIGABRT does.
  CrashInput timeout = from_log("nccl-watchdog-timeout.log");
  timeout.signal = SIGABRT;
  d = diagnose_crash(timeout, {});
  EXPECT_EQ(d.signature, "nccl-timeout");
  ASSERT_EQ(d.evidence.size(), 3u);
  EXPECT_THAT(d.evidence[0], HasSubstr("[Rank 1] Watchdog caught collective operation timeout"));
  EXPECT_THAT(d.evidence[2], HasSubstr("what():"));
}

TEST(CrashDiagnosis, DriverPortAndArgumentErrors) {
  CrashInput driver = from_log("comfyui-driver-mismatch.log");
  driver.exit_code = 1;
  CrashDiagnosis d = diagnose_crash(driver, {});
  EXPECT_EQ(d.signature, "cuda-driver");
  EXPECT_THAT(d.evidence.at(0), HasSubstr("Error 803: system has unsupported display driver"));

  CrashInput port = from_log("comfyui-port-in-use.log");
  port.exit_code = 1;
  d = diagnose_crash(port, {});
  EXPECT_EQ(d.signature, "port-in-use");
  EXPECT_EQ(d.evidence, std::vector<std::string>{
                            "OSError: [Errno 98] error while attempting to bind on address "
                            "('127.0.0.1', 8188): address already in use"});

  CrashInput args = from_log("comfyui-unrecognized-argument.log");
  args.exit_code = 2;
  d = diagnose_crash(args, {});
  EXPECT_EQ(d.signature, "bad-arguments");
  EXPECT_THAT(
      d.explanation,
      HasSubstr("rejected its command line: unrecognized arguments: --disable-async-offload."));
}

TEST(CrashDiagnosis, PythonTracebackLastExceptionLine) {
  CrashInput in = from_log("python-valueerror.log");
  in.exit_code = 1;
  CrashDiagnosis d = diagnose_crash(in, {});
  EXPECT_EQ(d.signature, "python-exception:ValueError");
  EXPECT_EQ(d.title, "ValueError: invalid literal for int() with base 10: 'auto'");
  EXPECT_THAT(d.explanation,
              HasSubstr("uncaught ValueError (File \"/srv/whisperx/worker.py\", line 31, in "
                        "parse_batch_size): invalid literal"));
  EXPECT_EQ(d.evidence, (std::vector<std::string>{
                            "  File \"/srv/whisperx/worker.py\", line 31, in parse_batch_size",
                            "ValueError: invalid literal for int() with base 10: 'auto'",
                        }));
}

// vLLM prefixes every line with its process, interleaves processes, and ends with the API
// server's "See root cause above": the root cause is the engine's ValueError.
TEST(CrashDiagnosis, PythonTracebackPrefixedVllmRootCause) {
  CrashInput in = from_log("vllm-bf16-valueerror.log");
  in.exit_code = 1;
  CrashDiagnosis d = diagnose_crash(in, {});
  EXPECT_EQ(d.signature, "python-exception:ValueError");
  EXPECT_TRUE(d.title.starts_with("ValueError: Bfloat16 is only supported on GPUs"));
  EXPECT_LE(d.title.size(), 160u);
  EXPECT_THAT(d.explanation,
              HasSubstr("(File \"/opt/vllm/.venv/lib/python3.12/site-packages/vllm/"
                        "platforms/cuda.py\", line 529, in check_if_supports_dtype)"));
  ASSERT_EQ(d.evidence.size(), 2u);
  EXPECT_TRUE(d.evidence[0].starts_with("(EngineCore_DP0 pid=2990)   File "));
  EXPECT_TRUE(d.evidence[1].starts_with("(EngineCore_DP0 pid=2990) ValueError: Bfloat16"));
}

TEST(CrashDiagnosis, KernelOomKillerIsHostRam) {
  CrashInput in = from_log("comfyui-host-oom.log");
  in.signal = SIGKILL;
  in.oom_killed = true;
  in.gpu_holders = {{"comfyui", 11 * GiB}};
  CrashDiagnosis d = diagnose_crash(in, {});
  EXPECT_EQ(d.signature, "host-oom");
  EXPECT_THAT(d.title, HasSubstr("host RAM"));
  EXPECT_THAT(d.explanation, HasSubstr("not GPU memory"));
  EXPECT_EQ(d.evidence, std::vector<std::string>{"model_type FLOW"});

  // The kernel's record of the kill outranks an older error in the log.
  CrashInput noisy = from_log("comfyui-async-offload.log");
  noisy.signal = SIGKILL;
  noisy.oom_killed = true;
  EXPECT_EQ(diagnose_crash(noisy, {}).signature, "host-oom");

  // Without the kernel's record, SIGKILL is only a signal.
  in.oom_killed = false;
  d = diagnose_crash(in, {});
  EXPECT_EQ(d.signature, "signal:SIGKILL");
  EXPECT_THAT(d.suggestion, HasSubstr("dmesg"));
}

TEST(CrashDiagnosis, SegfaultOutranksAnOlderTraceback) {
  CrashInput in = from_log("comfyui-segfault.log");
  in.signal = SIGSEGV;
  CrashDiagnosis d = diagnose_crash(in, {});
  EXPECT_EQ(d.signature, "signal:SIGSEGV");
  EXPECT_EQ(d.title, "Segmentation fault");
  EXPECT_EQ(d.evidence,
            (std::vector<std::string>{
                "Fatal Python error: Segmentation fault",
                "  File \"/opt/ComfyUI/custom_nodes/ComfyUI-FastKernels/kernels.py\", line 88 in "
                "fused_rmsnorm",
            }));

  // Behind a shell or container runtime the same crash is exit status 128+11.
  in.signal.reset();
  in.exit_code = 139;
  CrashDiagnosis wrapped = diagnose_crash(in, {});
  EXPECT_EQ(wrapped.signature, "exit:139");
  EXPECT_EQ(wrapped.title, "Exited with status 139 (128+SIGSEGV)");
  EXPECT_EQ(wrapped.evidence, d.evidence);
}

TEST(CrashDiagnosis, ExitCodeFallbacks) {
  CrashInput in = from_log("plain-exit.log");
  in.exit_code = 3;
  CrashDiagnosis d = diagnose_crash(in, {});
  EXPECT_EQ(d.signature, "exit:3");
  EXPECT_EQ(d.title, "Exited with status 3");
  EXPECT_EQ(d.evidence, std::vector<std::string>{in.log_tail.back()});

  // Status 0 is not a crash, whatever traceback an earlier request left in the log.
  CrashInput clean = from_log("python-valueerror.log");
  clean.exit_code = 0;
  d = diagnose_crash(clean, {});
  EXPECT_EQ(d.signature, "exit:0");
  EXPECT_THAT(d.suggestion, HasSubstr("foreground"));

  // Nothing recorded about the exit: the traceback still speaks; without one, "unknown".
  clean.exit_code.reset();
  EXPECT_EQ(diagnose_crash(clean, {}).signature, "python-exception:ValueError");
  EXPECT_EQ(diagnose_crash(from_log("plain-exit.log"), {}).signature, "unknown");
  EXPECT_EQ(diagnose_crash(CrashInput{}, {}).signature, "unknown");

  CrashInput odd;
  odd.signal = 40;  // a real-time signal has no name here
  EXPECT_EQ(diagnose_crash(odd, {}).signature, "signal:40");
  odd.signal = SIGUSR1;
  EXPECT_EQ(diagnose_crash(odd, {}).title, "Killed by SIGUSR1");
}

TEST(CrashDiagnosis, ConfigRuleOverridesBuiltin) {
  CrashInput in = from_log("diffusers-cuda-oom.log");
  in.exit_code = 1;
  in.gpu_holders = {{"comfyui", 16 * GiB}};
  std::vector<CrashRule> config = {{
      .title = "Flux batch ran out of VRAM",
      .pattern = R"(Tried to allocate ([0-9.]+ [GM]iB))",
      .explanation = "It needed {1} more while {holders}.",
      .suggestion = "lower --batch below {9}4",  // no group 9: empty
  }};
  CrashDiagnosis d = diagnose_crash(in, config);
  EXPECT_EQ(d.signature, "flux-batch-ran-out-of-vram");
  EXPECT_EQ(d.explanation, "It needed 2.00 GiB more while comfyui held 16.0 GiB.");
  EXPECT_EQ(d.suggestion, "lower --batch below 4");
  EXPECT_EQ(d.evidence.size(), 1u);

  // A config rule whose requires_pattern is absent does not fire: the built-in does.
  config[0].signature = "flux-oom";
  config[0].requires_pattern = "job flux#8:";
  EXPECT_EQ(diagnose_crash(in, config).signature, "cuda-oom");
  config[0].requires_pattern = "job flux#7:";
  EXPECT_EQ(diagnose_crash(in, config).signature, "flux-oom");

  // One that does not compile is skipped.
  config.insert(config.begin(), CrashRule{.signature = "broken", .title = "x", .pattern = "(("});
  EXPECT_EQ(diagnose_crash(in, config).signature, "flux-oom");
}

TEST(CrashDiagnosis, ColourCodesAndHugeLines) {
  CrashInput in;
  in.exit_code = 1;
  in.log_tail = {
      "\x1b[1;31mRuntimeError: CUDA error: an illegal \x1b[0mmemory access was "
      "encountered\x1b[0m\r"};
  CrashDiagnosis d = diagnose_crash(in, {});
  EXPECT_EQ(d.signature, "cuda-illegal-memory-access");
  EXPECT_EQ(d.evidence, in.log_tail);  // verbatim

  // A progress bar of 200k characters neither crashes the matcher nor hides an error at its start.
  in.log_tail = {"CUDA error: misaligned address " + std::string(200000, '#')};
  d = diagnose_crash(in, {});
  EXPECT_EQ(d.signature, "cuda-error");
  EXPECT_TRUE(d.title.starts_with("CUDA error: misaligned address ###"));
  EXPECT_LE(d.title.size(), 160u);
}

// Over every fixture and every way a process can end: a verdict, and evidence that is a
// handful of lines, each exactly as logged, none twice.
TEST(CrashDiagnosis, InvariantsOverAllFixturesAndExits) {
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(vramd::test_paths::source_dir() +
                                                           "/tests/fixtures/crashes")) {
    files.push_back(e.path().filename().string());
  }
  ASSERT_GE(files.size(), 15u);
  struct Exit {
    std::optional<int> code, signal;
    bool oom;
  };
  const std::vector<Exit> exits = {{0, {}, false},       {1, {}, false},      {137, {}, false},
                                   {{}, SIGSEGV, false}, {{}, SIGKILL, true}, {{}, {}, false}};
  for (const std::string& f : files) {
    for (std::size_t boot : {0, 40}) {
      for (const Exit& e : exits) {
        CrashInput in = from_log(f, boot, 200);
        in.exit_code = e.code;
        in.signal = e.signal;
        in.oom_killed = e.oom;
        CrashDiagnosis d = diagnose_crash(in, {});
        SCOPED_TRACE(f + " -> " + d.signature);
        EXPECT_FALSE(d.signature.empty());
        EXPECT_FALSE(d.title.empty());
        EXPECT_FALSE(d.explanation.empty());
        EXPECT_LE(d.evidence.size(), 5u);
        std::set<std::string> unique(d.evidence.begin(), d.evidence.end());
        EXPECT_EQ(unique.size(), d.evidence.size());
        for (const std::string& line : d.evidence) {
          bool logged = std::count(in.log_tail.begin(), in.log_tail.end(), line) ||
                        std::count(in.boot_log.begin(), in.boot_log.end(), line);
          EXPECT_TRUE(logged) << line;
        }
      }
    }
  }
}

TEST(CrashRuleCheck, RejectsWhatCannotWork) {
  CrashRule good{.title = "Flux OOM", .pattern = "CUDA out of memory"};
  EXPECT_EQ(check_crash_rule(good), std::nullopt);

  CrashRule bad_pattern = good;
  bad_pattern.pattern = "Tried to allocate ([0-9.]+";
  std::optional<std::string> e = check_crash_rule(bad_pattern);
  ASSERT_TRUE(e);
  EXPECT_THAT(*e, HasSubstr("pattern \"Tried to allocate ([0-9.]+\" is not a valid regular"));

  CrashRule bad_requires = good;
  bad_requires.requires_pattern = "[unclosed";
  e = check_crash_rule(bad_requires);
  ASSERT_TRUE(e);
  EXPECT_THAT(*e, HasSubstr("requires \"[unclosed\" is not a valid regular expression"));

  EXPECT_EQ(check_crash_rule({.pattern = "x"}), "a crash rule needs a title");
  EXPECT_EQ(check_crash_rule({.title = "x"}), "a crash rule needs a pattern");
  e = check_crash_rule({.signature = "My OOM", .title = "x", .pattern = "x"});
  ASSERT_TRUE(e);
  EXPECT_THAT(*e, HasSubstr("like \"my-oom\""));
}

TEST(CrashRuleCheck, SignatureFromTitle) {
  EXPECT_EQ(crash_signature_from_title("CUDA error in async weight offloading"),
            "cuda-error-in-async-weight-offloading");
  EXPECT_EQ(crash_signature_from_title("  Flux #7: OOM!! "), "flux-7-oom");
  EXPECT_EQ(crash_signature_from_title("***"), "custom");
  EXPECT_EQ(crash_signature_from_title(std::string(100, 'a')).size(), 64u);
}

}  // namespace
}  // namespace vramd
