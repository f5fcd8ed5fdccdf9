// The services' side of the host alone: a lifecycle call answered through the hooks (and told as
// a failing backend while it hangs), a crash diagnosed from its run's log, a log read off the
// loop, and nothing reaching the loop once the watches are stopped.
#include "daemon/service_runtime.h"

#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>

#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>

#include <sys/wait.h>

#include "host/proc_table.h"
#include "testgpu/fake_gpu_state.h"
#include "test_paths.h"

namespace vramd {
namespace service_runtime_test {

namespace asio = boost::asio;
using namespace std::chrono_literals;

// A container engine of the test's own: each call waits while `hang`, then says it worked.
struct Engine {
  std::mutex mu;
  std::condition_variable cv;
  bool hang = false;
  int calls = 0;
};

class TestLifecycle : public LifecycleBackend {
 public:
  explicit TestLifecycle(Engine& e) : e_(e) {}
  LifecycleDone run(const Lifecycle& lc) override {
    std::unique_lock lock(e_.mu);
    ++e_.calls;
    e_.cv.wait(lock, [&] { return !e_.hang; });
    return LifecycleDone{lc.service, lc.action, true, "restarted " + lc.target};
  }

 private:
  Engine& e_;
};

struct Seen {
  std::vector<Event> fed;
  std::vector<std::string> health;  // "backend ok|failed: why"
};

struct Fixture {
  asio::io_context io;
  Engine engine;
  Seen seen;
  Config config;
  std::filesystem::path dir;
  std::unique_ptr<ServiceRuntime> runtime;

  Fixture() {
    dir = std::filesystem::temp_directory_path() /
          ("vramd-runtime-test-" + std::to_string(::getpid()) + "-" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    config.daemon.state_dir = dir.string();
    runtime = std::make_unique<ServiceRuntime>(
        io, config, nullptr, std::make_unique<TestLifecycle>(engine),
        ServiceRuntime::Hooks{[this](const Event& e) { seen.fed.push_back(e); },
                              [this](const std::string& b, bool ok, const std::string& why) {
                                seen.health.push_back(b + (ok ? " ok" : " failed: " + why));
                              }});
  }
  ~Fixture() {
    release();
    runtime.reset();
    std::filesystem::remove_all(dir);
  }
  void hold() {
    std::lock_guard lock(engine.mu);
    engine.hang = true;
  }
  void release() {
    {
      std::lock_guard lock(engine.mu);
      engine.hang = false;
    }
    engine.cv.notify_all();
  }
  bool run_until(const std::function<bool()>& done, Duration limit = 10s) {
    auto until = std::chrono::steady_clock::now() + limit;
    while (!done() && std::chrono::steady_clock::now() < until) {
      io.restart();
      io.run_for(5ms);
    }
    return done();
  }
  std::vector<LifecycleDone> done() const {
    std::vector<LifecycleDone> out;
    for (const auto& e : seen.fed)
      if (const auto* d = std::get_if<LifecycleDone>(&e)) out.push_back(*d);
    return out;
  }
};

Lifecycle restart_comfyui() {
  Lifecycle lc;
  lc.service = "comfyui";
  lc.action = Command::restart;
  lc.via = Control::container;
  lc.target = "comfyui-box";
  return lc;
}

TEST(ServiceRuntimeTest, ALifecycleCallIsAnsweredOnTheLoopAndToldWhileItHangs) {
  Fixture f;
  f.runtime->run_lifecycle(restart_comfyui(), 5s);
  ASSERT_TRUE(f.run_until([&] { return f.done().size() == 1; }));
  EXPECT_TRUE(f.done()[0].ok);
  EXPECT_EQ(f.done()[0].message, "restarted comfyui-box");
  EXPECT_EQ(f.seen.health, std::vector<std::string>{"lifecycle ok"});

  f.hold();
  f.runtime->run_lifecycle(restart_comfyui(), 50ms);
  ASSERT_TRUE(f.run_until([&] { return f.seen.health.size() == 2; }));
  EXPECT_EQ(f.seen.health[1], "lifecycle failed: restart comfyui-box (container) has not answered in 50ms");
  EXPECT_EQ(f.done().size(), 1u);  // still out
  f.release();
  ASSERT_TRUE(f.run_until([&] { return f.done().size() == 2; }));
  EXPECT_EQ(f.seen.health.back(), "lifecycle ok");  // it answers again
}

// [gpu] cuda_checkpoint is probed once, off the loop, and the core told what it offers: the
// fake utility's 570 form, or why nothing is offered (no such file; a 550 utility that cannot
// say a process's state).
TEST(ServiceRuntimeTest, SuspendIsProbedOffTheLoopAndToldToTheCore) {
  struct Case {
    std::string tool, faults;
    bool offered;
    std::string form, version, why;
  };
  const std::string fake = vramd::test_paths::build_dir() + "/fake-bin/cuda-checkpoint";
  const Case cases[] = {
      {fake, "", true, "action", "570.86.10", ""},
      {fake, "driver-550", true, "toggle", "550.90.07", ""},
      {fake, "driver-550-toggle-only", false, "", "", "--get-state"},
      {"/nonexistent/cuda-checkpoint", "", false, "", "", "/nonexistent/cuda-checkpoint"},
  };
  for (const Case& c : cases) {
    Fixture f;
    f.config.gpu.cuda_checkpoint = c.tool;
    ::setenv("FAKE_CUDA_CHECKPOINT", c.faults.c_str(), 1);  // the utility inherits it
    f.runtime->probe_suspend();
    auto probed = [&]() -> const SuspendProbed* {
      for (const auto& e : f.seen.fed)
        if (const auto* p = std::get_if<SuspendProbed>(&e)) return p;
      return nullptr;
    };
    ASSERT_TRUE(f.run_until([&] { return probed() != nullptr; })) << c.tool << " " << c.faults;
    ::unsetenv("FAKE_CUDA_CHECKPOINT");
    const SuspendOffer& o = probed()->offer;
    EXPECT_EQ(o.offered, c.offered) << c.faults << ": " << o.why;
    EXPECT_EQ(o.tool, c.tool);
    EXPECT_EQ(o.form, c.form);
    EXPECT_EQ(o.version, c.version);
    if (!c.offered) {
      EXPECT_TRUE(o.why.starts_with("suspend is not offered: ")) << o.why;
      EXPECT_NE(o.why.find(c.why), std::string::npos) << o.why;
      EXPECT_EQ(o.why.find('\n'), std::string::npos) << o.why;  // one line
    }
  }
}

// A preemptible lease's processes are suspended and resumed on the worker with the fake utility
// (its pid leaves the fake GPU and comes back), answered on the loop. A resume asked before the
// start's probe ran (a suspended lease restored at start) probes the utility itself.
TEST(ServiceRuntimeTest, ALeaseIsSuspendedAndResumedOnTheWorkerEvenBeforeTheProbe) {
  Fixture f;
  std::string state = (f.dir / "gpu.json").string();
  ASSERT_TRUE(write_fake_gpu_state(state, make_fake_gpu_state({{"NVIDIA GeForce RTX 3090", 24 * GiB}})).ok());
  ASSERT_TRUE(add_fake_process(state, 0, 4242, 16 * GiB).ok());
  ::setenv("FAKE_NVML_STATE", state.c_str(), 1);  // the utility inherits it
  f.config.gpu.cuda_checkpoint = vramd::test_paths::build_dir() + "/fake-bin/cuda-checkpoint";
  auto on_gpu = [&] {
    nlohmann::json gpus = read_fake_gpu_state(state).value();
    for (const auto& p : gpus["gpus"][0]["processes"])
      if (p["pid"] == 4242) return true;
    return false;
  };
  auto fed = [&]<typename T>(T*) {
    std::vector<T> out;
    for (const auto& e : f.seen.fed)
      if (const auto* d = std::get_if<T>(&e)) out.push_back(*d);
    return out;
  };
  ASSERT_TRUE(on_gpu());
  // Running already: the resume is a no-op, and it works without probe_suspend().
  f.runtime->resume_lease(ResumeLease{7, {4242}});
  ASSERT_TRUE(f.run_until([&] { return fed((LeaseResumeDone*)nullptr).size() == 1; }));
  EXPECT_TRUE(fed((LeaseResumeDone*)nullptr)[0].ok) << fed((LeaseResumeDone*)nullptr)[0].error;
  f.runtime->suspend_lease(SuspendLease{7, {4242}, 5s});
  ASSERT_TRUE(f.run_until([&] { return fed((LeaseSuspendDone*)nullptr).size() == 1; }));
  EXPECT_TRUE(fed((LeaseSuspendDone*)nullptr)[0].ok) << fed((LeaseSuspendDone*)nullptr)[0].error;
  EXPECT_FALSE(on_gpu()) << read_fake_gpu_state(state).value().dump();
  f.runtime->resume_lease(ResumeLease{7, {4242}});
  ASSERT_TRUE(f.run_until([&] { return fed((LeaseResumeDone*)nullptr).size() == 2; }));
  EXPECT_TRUE(fed((LeaseResumeDone*)nullptr)[1].ok) << fed((LeaseResumeDone*)nullptr)[1].error;
  EXPECT_TRUE(on_gpu()) << read_fake_gpu_state(state).value().dump();
  ::unsetenv("FAKE_NVML_STATE");
}

// A lease's holder is checked on the worker: one that runs stays, one that exited and one whose
// pid now names another process (other start ticks) are fed as HolderExited.
TEST(ServiceRuntimeTest, AHolderThatExitedOrWhosePidWasTakenIsFedAsExited) {
  Fixture f;
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    pause();
    _exit(0);
  }
  auto me = read_process("/proc", ::getpid());
  auto it = read_process("/proc", child);
  ASSERT_TRUE(me && it);
  auto exited = [&] {
    std::vector<uint64_t> ids;
    for (const auto& e : f.seen.fed)
      if (const auto* h = std::get_if<HolderExited>(&e)) ids.push_back(h->id);
    return ids;
  };
  f.runtime->check_holders({{1, ::getpid(), me->start_ticks},
                            {2, child, it->start_ticks},
                            {3, ::getpid(), me->start_ticks + 1}});  // the pid taken since
  f.runtime->check_holders({{4, child, it->start_ticks + 1}});     // one runs: dropped
  ASSERT_TRUE(f.run_until([&] { return !exited().empty(); }));
  f.run_until([] { return false; }, 100ms);
  EXPECT_EQ(exited(), std::vector<uint64_t>{3});

  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  f.runtime->check_holders({{1, ::getpid(), me->start_ticks}, {2, child, it->start_ticks}});
  ASSERT_TRUE(f.run_until([&] { return exited().size() == 2; }));
  EXPECT_EQ(exited(), (std::vector<uint64_t>{3, 2}));
}

TEST(ServiceRuntimeTest, ACrashIsDiagnosedFromWhatItsRunPrinted) {
  Fixture f;
  std::string log = f.runtime->log_path("comfyui");
  std::filesystem::create_directories(std::filesystem::path(log).parent_path());
  {
    std::ofstream out(log);
    out << "Starting server\n"
        << "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n";
  }
  RecordCrash crash;
  crash.service = "comfyui";
  crash.pid = 4242;
  crash.exit_code = 1;
  crash.gpu_holders = {{"ollama", 20 * GiB}};
  std::vector<CrashRule> rules;  // the built-in rules only
  std::optional<CrashRecord> got;
  std::mutex mu;
  f.runtime->diagnose(crash, rules, "0.3.40", "args-1", [&](CrashRecord rec) {
    std::lock_guard lock(mu);
    got = std::move(rec);  // on the worker thread
  });
  ASSERT_TRUE(f.run_until([&] {
    std::lock_guard lock(mu);
    return got.has_value();
  }));
  EXPECT_EQ(got->signature, "cuda-oom");
  EXPECT_EQ(got->version, "0.3.40");
  EXPECT_EQ(got->args_fp, "args-1");
  EXPECT_EQ(got->exit_code, 1);
  ASSERT_FALSE(got->log_tail.empty());
  EXPECT_NE(got->log_tail.back().find("CUDA out of memory"), std::string::npos);
  ASSERT_EQ(got->gpu_holders.size(), 1u);
}

TEST(ServiceRuntimeTest, ALogIsReadOffTheLoopFromWhereTheLastReadEnded) {
  Fixture f;
  std::string path = (f.dir / "some.log").string();
  {
    std::ofstream out(path);
    out << "one\ntwo\nthree\n";
  }
  std::optional<LogPage> page;
  asio::co_spawn(f.io, [&]() -> asio::awaitable<void> {
    auto op = f.runtime->read_log(path, 2, std::nullopt);
    page = co_await std::move(op);
  }, asio::detached);
  ASSERT_TRUE(f.run_until([&] { return page.has_value(); }));
  EXPECT_EQ(page->lines, (std::vector<std::string>{"two", "three"}));
}

TEST(ServiceRuntimeTest, OnceStoppedNothingMoreReachesTheLoop) {
  Fixture f;
  f.hold();
  f.runtime->run_lifecycle(restart_comfyui(), 5s);
  f.run_until([&] {
    std::lock_guard lock(f.engine.mu);
    return f.engine.calls == 1;
  });
  f.runtime->stop_watches();
  f.release();
  f.run_until([] { return false; }, 200ms);
  EXPECT_TRUE(f.done().empty());
  EXPECT_TRUE(f.seen.health.empty());
}

}  // namespace service_runtime_test
}  // namespace vramd
