// Fault injection in the shell (issue 14, item 2): the real Daemon, in this process, on the test
// GPU, its backends wrapped by tests/integration/fault_injection.h. For each fault, one at a
// time: it becomes an event and a visible state, the API keeps answering (GET /v1/status's
// latency is measured and printed, never asserted), and when the fault clears vramd recovers
// without a restart. The figures go to bench/RESULTS.md.
#include <gtest/gtest.h>

#include <SQLiteCpp/SQLiteCpp.h>
#include <fmt/format.h>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>
#include <cstdlib>
#include <fstream>
#include <future>
#include <set>

#include "cli/client.h"
#include "core/units.h"
#include "daemon/daemon.h"
#include "host/linux_host_scanner.h"
#include "integration/daemon_fixture.h"
#include "integration/fault_injection.h"

namespace vramd::testing {
namespace {

namespace asio = boost::asio;

// The Daemon on its own loop thread, its world wrapped by the fault switches.
class FaultDaemon {
 public:
  FaultDaemon(const DaemonFixture& f, const std::string& services_toml,
              const std::string& daemon_toml = "")
      : sw(std::make_shared<FaultSwitches>()), port_(free_port()), dir_(f.dir.path()) {
    ::setenv("VRAMD_NVML_LIBRARY", fake_lib().c_str(), 1);
    ::setenv("FAKE_NVML_STATE", f.state.c_str(), 1);
    std::string text = fmt::format(
        "[daemon]\nlisten = \"127.0.0.1:{}\"\nstate_dir = \"{}\"\nsample_interval = \"200ms\"\n"
        "probe_interval = \"500ms\"\n{}\n[gpu]\nbackend = \"nvml\"\n\n{}",
        port_, dir_, daemon_toml, services_toml);
    auto config = parse_config(text, f.dir.file("vramd.toml"));
    if (!config) {
      ADD_FAILURE() << config.error();
      return;
    }
    auto reader = open_gpu_reader("nvml");
    if (!reader) {
      ADD_FAILURE() << reader.error();
      return;
    }
    DaemonWorld world;
    world.reader = std::make_unique<FaultyGpuReader>(std::move(*reader), sw);
    world.scanner = std::make_unique<FaultyHostScanner>(
        std::make_unique<LinuxHostScanner>("/proc", config->daemon.docker_socket), sw);
    world.runner = std::make_unique<FaultyProcessRunner>(
        io_, make_local_process_runner(io_, runner_pool_, dir_), sw);
    daemon_ = std::make_unique<Daemon>(io_, *config, std::move(world));
    if (auto s = daemon_->start(); !s) {
      ADD_FAILURE() << s.error();
      daemon_.reset();
      return;
    }
    loop_ = std::thread([this] { io_.run(); });
  }

  ~FaultDaemon() {
    // A read hung in the wrapper would keep the sampler's thread from joining.
    sw->set(sw->gpu_hang, false);
    if (daemon_) {
      std::promise<void> stopped;
      asio::post(io_, [&] {
        daemon_->stop();
        stopped.set_value();
      });
      stopped.get_future().wait();
    }
    work_.reset();
    io_.stop();
    if (loop_.joinable()) loop_.join();
    daemon_.reset();
    runner_pool_.join();
  }

  bool started() const { return daemon_ != nullptr; }
  std::string url() const { return fmt::format("http://127.0.0.1:{}", port_); }
  std::string db() const { return dir_ + "/vramd.db"; }

  json status() const {
    auto r = http_request({url()}, "GET", "/v1/status", "", 5000);
    if (!r || r->status != 200) return json::object();
    return json::parse(r->body, nullptr, false);
  }
  json get(const std::string& target) const {
    auto r = http_request({url()}, "GET", target, "", 10000);
    if (!r || r->status != 200) return json::object();
    return json::parse(r->body, nullptr, false);
  }
  std::pair<int, json> post(const std::string& target, const std::string& body = "") const {
    auto r = http_request({url()}, "POST", target, body, 30000);
    if (!r) return {0, json::object()};
    return {static_cast<int>(r->status), json::parse(r->body, nullptr, false)};
  }
  // The current fault of `backend` in /v1/status, or null.
  json fault(const std::string& backend) const {
    for (const auto& f : status().value("faults", json::array()))
      if (f["backend"] == backend) return f;
    return nullptr;
  }
  bool has_event(const std::string& type, const std::string& subject = "") const {
    for (const auto& e : get("/v1/events?limit=1000").value("events", json::array()))
      if (e["type"] == type && (subject.empty() || e["subject"] == subject)) return true;
    return false;
  }
  TimePoint sampled_at() const {
    json s = status();
    if (!s.contains("sampled_at") || s["sampled_at"].is_null()) return {};
    return *parse_rfc3339(s["sampled_at"].get<std::string>());
  }
  // Whether samples are being taken: sampled_at moves on within 3 s (by more than the 1 ms
  // its conversion from the monotonic clock may wobble).
  bool sampling() const {
    TimePoint before = sampled_at();
    return eventually([&] { return sampled_at() > before + std::chrono::milliseconds(100); },
                      std::chrono::seconds(3));
  }

  std::shared_ptr<FaultSwitches> sw;

 private:
  int port_;
  std::string dir_;
  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> work_{io_.get_executor()};
  asio::thread_pool runner_pool_{1};
  std::unique_ptr<Daemon> daemon_;
  std::thread loop_;
};

// Measures GET /v1/status while `during` runs; prints the figures for bench/RESULTS.md.
LatencyFigures measure(const FaultDaemon& d, const std::string& fault,
                       const std::function<void()>& during) {
  StatusLatencyProbe probe(d.url(), std::chrono::milliseconds(10));
  during();
  LatencyFigures f = probe.stop();
  std::printf(
      "[fault] %-16s GET /v1/status: %zu requests, %zu failed, p50 %.2f ms, p99 %.2f ms, "
      "max %.2f ms\n",
      fault.c_str(), f.requests, f.failed, f.p50_ms, f.p99_ms, f.max_ms);
  ::testing::Test::RecordProperty("p99_ms_" + fault, fmt::format("{:.2f}", f.p99_ms));
  return f;
}

// A string field, "" when absent or null.
std::string str(const json& j, const std::string& key) {
  return j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : std::string();
}
std::string error_code(const json& reply) {
  return reply.contains("error") && reply["error"].is_object() ? str(reply["error"], "code") : "";
}

void hold(std::chrono::milliseconds d) { std::this_thread::sleep_for(d); }

// Every lease id the store holds: active (leases) or ended (jobs).
std::set<uint64_t> stored_leases(const std::string& db) {
  std::set<uint64_t> out;
  SQLite::Database conn(db, SQLite::OPEN_READONLY);
  for (const char* sql : {"SELECT id FROM leases", "SELECT id FROM jobs"}) {
    SQLite::Statement q(conn, sql);
    while (q.executeStep()) out.insert(static_cast<uint64_t>(q.getColumn(0).getInt64()));
  }
  return out;
}

std::string integrity(const std::string& db) {
  SQLite::Database conn(db, SQLite::OPEN_READONLY);
  return conn.execAndGet("PRAGMA integrity_check").getString();
}

const char* kLease = R"({"vram": "1GiB", "holder": "fault-test", "label": "faults"})";

TEST(FaultE2E, NvmlFailingIsAnEventAndTheErrorInStatusUntilItReadsAgain) {
  DaemonFixture f;
  FaultDaemon d(f, "");
  ASSERT_TRUE(d.started());
  ASSERT_TRUE(eventually([&] { return d.status().value("gpus", json::array()).size() == 1; }));

  LatencyFigures lat = measure(d, "nvml_fails", [&] {
    d.sw->set(d.sw->gpu_fail, true);
    EXPECT_TRUE(eventually([&] {
      return str(d.status(), "error").find("injected") != std::string::npos;
    })) << d.status().dump(2);
    EXPECT_TRUE(eventually([&] { return d.has_event("gpu.error"); }));
    hold(std::chrono::seconds(2));
  });
  EXPECT_EQ(lat.failed, 0u);

  d.sw->set(d.sw->gpu_fail, false);
  EXPECT_TRUE(eventually([&] { return d.has_event("gpu.recovered"); }));
  json s = d.status();
  EXPECT_EQ(str(s, "error"), "") << s.dump(2);
  EXPECT_EQ(s.value("gpus", json::array()).size(), 1u);
}

TEST(FaultE2E, NvmlHangingIsShownAsAStalledSamplerWhileTheApiAnswersAndLeasesAreGranted) {
  DaemonFixture f;
  FaultDaemon d(f, "");
  ASSERT_TRUE(d.started());
  ASSERT_TRUE(d.sampling());

  LatencyFigures lat = measure(d, "nvml_hangs", [&] {
    d.sw->set(d.sw->gpu_hang, true);
    ASSERT_TRUE(eventually([&] { return d.sw->hung_reads > 0; }));
    // Reported while it hangs, not once it returns (5 s after the read began).
    EXPECT_TRUE(eventually([&] { return !d.fault("sampler").is_null(); }, std::chrono::seconds(10)))
        << d.status().dump(2);
    EXPECT_TRUE(d.has_event("backend.failed", "sampler"));
    EXPECT_FALSE(d.sampling());
    // Leases are the store's and the core's: a hung GPU read holds up neither.
    auto [code, lease] = d.post("/v1/leases", kLease);
    EXPECT_EQ(code, 201) << lease.dump(2);
  });
  EXPECT_EQ(lat.failed, 0u);

  d.sw->set(d.sw->gpu_hang, false);
  EXPECT_TRUE(eventually([&] { return d.fault("sampler").is_null(); })) << d.status().dump(2);
  EXPECT_TRUE(d.has_event("backend.recovered", "sampler"));
  EXPECT_TRUE(d.sampling());
}

TEST(FaultE2E, ProcUnreadableIsAHostFaultAndItsSamplesAreNotTakenForTheTruth) {
  DaemonFixture f;
  // A fake service whose process holds 8 GiB: with /proc gone it must not read as unowned.
  FakeService comfy(f, "comfyui", {"--model-bytes", "8GiB"});
  FaultDaemon d(f,
                fmt::format("[services.comfy]\nkind = \"comfyui\"\nurl = \"{}\"\n", comfy.url()));
  ASSERT_TRUE(d.started());
  auto comfy_bytes = [&] {
    json s = d.get("/v1/services/comfy");
    return s.value("bytes", int64_t{-1});
  };
  ASSERT_TRUE(eventually([&] { return comfy_bytes() == static_cast<int64_t>(8 * GiB); }))
      << d.get("/v1/services/comfy").dump(2);

  LatencyFigures lat = measure(d, "proc_fails", [&] {
    d.sw->set(d.sw->proc_fail, true);
    EXPECT_TRUE(eventually([&] { return !d.fault("host").is_null(); })) << d.status().dump(2);
    EXPECT_NE(str(d.fault("host"), "error").find("/proc"), std::string::npos);
    EXPECT_TRUE(d.has_event("backend.failed", "host"));
    hold(std::chrono::seconds(2));
    // What vramd last knew stands: the service still holds its memory.
    EXPECT_EQ(comfy_bytes(), static_cast<int64_t>(8 * GiB));
  });
  EXPECT_EQ(lat.failed, 0u);

  d.sw->set(d.sw->proc_fail, false);
  EXPECT_TRUE(eventually([&] { return d.fault("host").is_null(); }));
  EXPECT_TRUE(d.has_event("backend.recovered", "host"));
  EXPECT_TRUE(d.sampling());
}

// A full disk and a failing disk: the same story. Leases acknowledged before the fault stay; a
// lease asked for during it is refused (503), never acknowledged and then lost; the file is
// never corrupt; once writes work again, without a restart, everything is written.
class StoreFault : public ::testing::TestWithParam<FaultVfs::Mode> {};

TEST_P(StoreFault, IsRefusedNotAcknowledgedAndTheDatabaseStaysWhole) {
  FaultVfs vfs;  // before the daemon opens its stores
  std::string name = GetParam() == FaultVfs::Mode::full ? "sqlite_full" : "sqlite_ioerr";
  std::set<uint64_t> acknowledged;
  {
    DaemonFixture f;
    FaultDaemon d(f, "");
    ASSERT_TRUE(d.started());
    for (int i = 0; i < 3; ++i) {
      auto [code, lease] = d.post("/v1/leases", kLease);
      ASSERT_EQ(code, 201) << lease.dump(2);
      acknowledged.insert(lease["id"].get<uint64_t>());
    }
    uint64_t released = *acknowledged.begin();

    LatencyFigures lat = measure(d, name, [&] {
      vfs.set(GetParam());
      auto [code, refused] = d.post("/v1/leases", kLease);
      EXPECT_EQ(code, 503) << refused.dump(2);
      EXPECT_EQ(error_code(refused), "store") << refused.dump(2);
      EXPECT_TRUE(eventually([&] { return !d.fault("store").is_null(); })) << d.status().dump(2);
      // A release during the fault is kept in memory and written once the disk takes it.
      auto r = http_request({d.url()}, "DELETE", fmt::format("/v1/leases/{}", released), "", 10000);
      EXPECT_TRUE(r && r->status == 200);
    });
    EXPECT_EQ(lat.failed, 0u);
    EXPECT_GT(FaultVfs::refused_.load(), 0);
    EXPECT_EQ(integrity(d.db()), "ok");

    vfs.set(FaultVfs::Mode::none);
    EXPECT_TRUE(eventually([&] { return d.fault("store").is_null(); }, std::chrono::seconds(15)))
        << d.status().dump(2);
    EXPECT_TRUE(d.has_event("backend.failed", "store"));
    EXPECT_TRUE(d.has_event("backend.recovered", "store"));
    auto [code, lease] = d.post("/v1/leases", kLease);
    EXPECT_EQ(code, 201) << lease.dump(2);
    acknowledged.insert(lease["id"].get<uint64_t>());
    // The release made during the fault reached the disk: its job record is there.
    EXPECT_TRUE(eventually([&] {
      json j = d.get(fmt::format("/v1/jobs?label=faults"));
      for (const auto& job : j.value("jobs", json::array()))
        if (job.value("id", uint64_t{0}) == released) return true;
      return false;
    })) << d.get("/v1/jobs?label=faults").dump(2);
    EXPECT_EQ(integrity(d.db()), "ok");
    std::set<uint64_t> stored = stored_leases(d.db());
    for (uint64_t id : acknowledged) EXPECT_TRUE(stored.count(id)) << "lease #" << id << " lost";
  }
}

INSTANTIATE_TEST_SUITE_P(Disk, StoreFault,
                         ::testing::Values(FaultVfs::Mode::full, FaultVfs::Mode::ioerr),
                         [](const auto& info) {
                           return info.param == FaultVfs::Mode::full ? std::string("Full")
                                                                     : std::string("IoError");
                         });

TEST(FaultE2E, SqliteBusyFromAnotherWriterIsRefusedThenWrittenOnceTheLockGoes) {
  DaemonFixture f;
  FaultDaemon d(f, "");
  ASSERT_TRUE(d.started());
  auto [code0, first] = d.post("/v1/leases", kLease);
  ASSERT_EQ(code0, 201) << first.dump(2);

  // A real SQLITE_BUSY: another connection holds the write lock (past vramd's 5 s busy timeout).
  // It waits for the lock itself: the daemon's store thread may be writing the first lease's
  // events at this moment, and BEGIN EXCLUSIVE without a busy timeout then fails at once.
  SQLite::Database other(d.db(), SQLite::OPEN_READWRITE, /*busyTimeoutMs=*/10'000);
  other.exec("BEGIN EXCLUSIVE");
  LatencyFigures lat = measure(d, "sqlite_busy", [&] {
    auto [code, refused] = d.post("/v1/leases", kLease);
    EXPECT_EQ(code, 503) << refused.dump(2);
    EXPECT_TRUE(eventually([&] { return !d.fault("store").is_null(); }, std::chrono::seconds(15)));
    EXPECT_NE(str(d.fault("store"), "error").find("locked"), std::string::npos)
        << d.status().dump(2);
  });
  EXPECT_EQ(lat.failed, 0u);
  other.exec("ROLLBACK");

  EXPECT_TRUE(eventually([&] { return d.fault("store").is_null(); }, std::chrono::seconds(20)))
      << d.status().dump(2);
  auto [code, lease] = d.post("/v1/leases", kLease);
  EXPECT_EQ(code, 201) << lease.dump(2);
  std::set<uint64_t> stored = stored_leases(d.db());
  EXPECT_TRUE(stored.count(first["id"].get<uint64_t>()));
  EXPECT_TRUE(stored.count(lease["id"].get<uint64_t>()));
  EXPECT_EQ(integrity(d.db()), "ok");
}

TEST(FaultE2E, SpawnFailingFailsTheStartVisiblyAndTheNextStartWorks) {
  DaemonFixture f;
  int port = free_port();
  FaultDaemon d(f,
                fmt::format("[services.comfy]\nkind = \"comfyui\"\nurl = \"http://127.0.0.1:{}\"\n"
                            "start = [\"{}/fake-gpu-server\", \"--kind\", \"comfyui\", \"--port\", "
                            "\"{}\", \"--state\", "
                            "\"{}\", \"--model-bytes\", \"2GiB\"]\nstop_timeout = \"3s\"\n",
                            port, build_dir(), port, f.state));
  ASSERT_TRUE(d.started());

  LatencyFigures lat = measure(d, "spawn_fails", [&] {
    d.sw->set(d.sw->spawn_fail, true);
    auto [code, body] = d.post("/v1/services/comfy/start?wait=true");
    EXPECT_FALSE(body.value("ok", true)) << code << body.dump(2);
    EXPECT_TRUE(eventually([&] { return d.has_event("service.start_failed", "comfy"); }));
    json svc = d.get("/v1/services/comfy");
    EXPECT_NE(svc.dump().find("injected"), std::string::npos) << svc.dump(2);
    hold(std::chrono::seconds(2));
  });
  EXPECT_EQ(lat.failed, 0u);

  d.sw->set(d.sw->spawn_fail, false);
  auto [code, body] = d.post("/v1/services/comfy/start?wait=true");
  EXPECT_EQ(code, 200) << body.dump(2);
  EXPECT_TRUE(body.value("ok", false)) << body.dump(2);
  EXPECT_TRUE(eventually([&] { return d.has_event("service.started", "comfy"); }));
  d.post("/v1/services/comfy/stop?wait=true");
}

TEST(FaultE2E, AHungDockerSocketHoldsUpNeitherSamplesNorTheApiAndIsShownUntilItAnswers) {
  DaemonFixture f;
  HangingUnixServer docker(f.dir.file("docker.sock"));
  FakeService comfy(f, "comfyui", {"--model-bytes", "2GiB"});
  FaultDaemon d(f,
                fmt::format("[services.comfy]\nkind = \"comfyui\"\nurl = \"{}\"\n"
                            "[services.comfy.match]\ncontainer = \"comfy-1\"\n",
                            comfy.url()),
                fmt::format("docker_socket = \"{}\"", docker.path()));
  ASSERT_TRUE(d.started());

  LatencyFigures lat = measure(d, "docker_hangs", [&] {
    auto [code, body] = d.post("/v1/services/comfy/restart");
    EXPECT_TRUE(code == 200 || code == 202) << code << body.dump(2);
    ASSERT_TRUE(eventually([&] { return docker.accepted() > 0; }));
    EXPECT_TRUE(
        eventually([&] { return !d.fault("lifecycle").is_null(); }, std::chrono::seconds(10)))
        << d.status().dump(2);
    EXPECT_NE(str(d.fault("lifecycle"), "error").find("comfy-1"), std::string::npos);
    // The GPU is sampled on its own thread: the restart hung on Docker does not stop it.
    EXPECT_TRUE(d.sampling());
  });
  EXPECT_EQ(lat.failed, 0u);

  docker.release();  // dockerd goes away: the call fails at once
  EXPECT_TRUE(eventually([&] { return d.has_event("service.restart_failed", "comfy"); }))
      << d.get("/v1/events?limit=100").dump(2);
  EXPECT_TRUE(eventually([&] { return d.fault("lifecycle").is_null(); }));
  EXPECT_TRUE(d.sampling());
}

TEST(FaultE2E, AServiceAnsweringAfter30sIsUnreachableWhileTheApiAnswersAndIsSeenAgainAfter) {
  DaemonFixture f;
  auto slow =
      std::make_unique<FakeService>(f, "comfyui", std::vector<std::string>{"--slow", "30s"});
  int port = slow->port();
  FaultDaemon d(f,
                fmt::format("[services.comfy]\nkind = \"comfyui\"\nurl = \"{}\"\n", slow->url()));
  ASSERT_TRUE(d.started());
  auto state = [&] { return d.get("/v1/services/comfy").value("state", ""); };

  LatencyFigures lat = measure(d, "service_30s", [&] {
    EXPECT_TRUE(eventually([&] { return state() == "unreachable"; }, std::chrono::seconds(20)))
        << d.get("/v1/services/comfy").dump(2);
    EXPECT_TRUE(d.has_event("service.unreachable", "comfy"))
        << d.get("/v1/events?limit=100").dump(2);
  });
  EXPECT_EQ(lat.failed, 0u);

  slow.reset();  // the slow server goes; a prompt one comes up on the same port
  std::string log = f.dir.file("prompt.log");
  Child prompt({build_dir() + "/fake-gpu-server", "--kind", "comfyui", "--port",
                std::to_string(port), "--state", f.state},
               {}, log);
  ASSERT_TRUE(eventually([&] { return slurp(log).find("ready") != std::string::npos; }))
      << slurp(log);
  EXPECT_TRUE(eventually([&] { return d.has_event("service.reachable", "comfy"); },
                         std::chrono::seconds(20)))
      << d.get("/v1/services/comfy").dump(2);
  EXPECT_NE(state(), "unreachable");
}

}  // namespace
}  // namespace vramd::testing
