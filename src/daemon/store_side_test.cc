// The daemon's store side against a real SQLite file: it names the host, writes on its own
// thread what the core's actions say (learned peaks, wake times, demand, crashes, lease changes),
// and reads them back off the loop; what it wrote is there for the next daemon on the same
// state directory. With SQLite it is no shared store and starts no link to other hosts.
#include "daemon/store_side.h"

#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>

#include <unistd.h>

#include "integration/test_util.h"

namespace vramd {
namespace store_side_test {

namespace asio = boost::asio;
using namespace std::chrono_literals;

const Now kNow{MonoTime(100s), TimePoint(1'700'000'000s)};

class Fixture {
 public:
  explicit Fixture(const std::string& dir, const std::string& host = "") {
    config.state_dir = dir;
    config.host = host;
  }
  Status open() {
    return side.open(config, LeaseWriter::Hooks{
                                 [] { return kNow; },
                                 [this](uint64_t id) { return leases.count(id) ? &leases[id] : nullptr; },
                                 [this](const Status& s) { writes.push_back(s.ok() ? "ok" : s.error()); },
                                 {}});
  }
  // Runs the loop until `done` (or 5 s).
  void run_until(const std::function<bool()>& done) {
    auto until = std::chrono::steady_clock::now() + 5s;
    while (!done() && std::chrono::steady_clock::now() < until) {
      io.restart();
      io.run_for(10ms);
    }
  }
  // Runs `read` (an awaitable of the store side) to its answer.
  template <typename T>
  T read(std::function<asio::awaitable<T>()> read) {
    std::optional<T> out;
    asio::co_spawn(io, [&]() -> asio::awaitable<void> { out = co_await read(); }, asio::detached);
    run_until([&] { return out.has_value(); });
    EXPECT_TRUE(out.has_value()) << "no answer within 5 s";
    return out ? std::move(*out) : T(make_error("no answer"));
  }

  DaemonConfig config;
  asio::io_context io;
  StoreSide side{io};
  std::map<uint64_t, Lease> leases;
  std::vector<std::string> writes;
};

TEST(StoreSide, NamesTheHostAndWithSqliteIsNoSharedStore) {
  testing::TempDir dir;
  Fixture named(dir.path(), "gpu7");
  ASSERT_TRUE(named.open().ok());
  EXPECT_EQ(named.side.host(), "gpu7");
  EXPECT_FALSE(named.side.shared());
  bool started = false;
  named.side.start_cluster(30s, ClusterLink::Hooks{[&] {
                                                    started = true;
                                                    return kNow;
                                                  },
                                                  {}, {}, {}, {}, {}});
  EXPECT_EQ(named.side.cluster(), nullptr) << "SQLite knows one host: no heartbeats, no claims";
  EXPECT_FALSE(started);

  testing::TempDir other;
  Fixture unnamed(other.path());
  ASSERT_TRUE(unnamed.open().ok());
  char name[256] = {};
  ASSERT_EQ(::gethostname(name, sizeof name - 1), 0);
  EXPECT_EQ(unnamed.side.host(), name[0] ? std::string(name) : "localhost");
}

TEST(StoreSide, AStateDirThatCannotHoldTheDatabaseIsAnError) {
  testing::TempDir dir;
  Fixture f(dir.file("missing/deeper"));
  Status s = f.open();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().find("missing/deeper"), std::string::npos) << s.error();
}

TEST(StoreSide, WhatItWritesOnItsThreadIsReadBackAndKeptForTheNextDaemon) {
  testing::TempDir dir;
  {
    Fixture f(dir.path(), "gpu1");
    ASSERT_TRUE(f.open().ok());
    f.side.save_peak(LoadPeak{"ollama", "llama3:8b", 6 * GiB}, kNow.wall);
    f.side.save_wake(WakeTime{"ollama", "llama3:8b", SleepDepth::sleep1, 1200ms}, kNow.wall);
    CrashRecord crash;
    crash.service = "comfyui";
    crash.at = kNow.wall;
    crash.pid = 4242;
    crash.signature = "cuda_oom";
    crash.title = "CUDA out of memory";
    std::vector<std::string> told;  // on the loop, once written
    f.side.add_crash(crash, [&](const CrashRecord& rec) { told.push_back(rec.title); });
    f.run_until([&] { return !told.empty(); });
    EXPECT_EQ(told, std::vector<std::string>{"CUDA out of memory"});

    auto crashes = f.read<Result<std::vector<CrashRecord>>>([&] { return f.side.crashes("comfyui", 10); });
    ASSERT_TRUE(crashes.ok()) << crashes.error();
    ASSERT_EQ(crashes->size(), 1u);
    EXPECT_EQ((*crashes)[0].pid, 4242);
    EXPECT_EQ((*crashes)[0].signature, "cuda_oom");

    // A lease's end, through the lease writer on the same thread: a job to read back.
    Lease l;
    l.id = 9;
    l.state = LeaseState::released;
    l.request.vram = 2 * GiB;
    l.request.label = "flux";
    l.requested_at = MonoTime(90s);
    l.granted_at = MonoTime(91s);
    l.ended_at = MonoTime(99s);
    l.gpu = 0;
    f.leases[9] = l;
    f.side.leases().save(l);
    f.run_until([&] { return f.side.leases().written(9); });
    EXPECT_EQ(f.writes, std::vector<std::string>{"ok"});
    auto job = f.read<Result<std::optional<JobRecord>>>([&] { return f.side.job(9); });
    ASSERT_TRUE(job.ok()) << job.error();
    ASSERT_TRUE(job->has_value());
    EXPECT_EQ((*job)->label, "flux");
    auto jobs = f.read<Result<std::vector<JobRecord>>>([&] { return f.side.jobs("flux", 10); });
    ASSERT_TRUE(jobs.ok()) << jobs.error();
    EXPECT_EQ(jobs->size(), 1u);
    f.side.stop_leases();
    f.side.join();
  }
  // The next daemon on the same directory reads what was learned.
  Fixture next(dir.path(), "gpu1");
  ASSERT_TRUE(next.open().ok());
  auto peaks = next.side.stores().peaks->all();
  ASSERT_TRUE(peaks.ok()) << peaks.error();
  ASSERT_EQ(peaks->size(), 1u);
  EXPECT_EQ((*peaks)[0].bytes, 6 * GiB);
  auto wakes = next.side.stores().peaks->wake_times();
  ASSERT_TRUE(wakes.ok()) << wakes.error();
  ASSERT_EQ(wakes->size(), 1u);
  EXPECT_EQ((*wakes)[0].took, Duration(1200ms));
}

}  // namespace store_side_test
}  // namespace vramd
