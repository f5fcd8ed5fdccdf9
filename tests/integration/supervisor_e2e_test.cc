// Supervision end to end with real child processes: fake GPU servers (and shell scripts) that
// vramd starts, health-checks, stops, restarts after crashes, diagnoses and adopts again after
// a kill -9 of vramd.
#include <csignal>
#include <fstream>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/client.h"
#include "core/units.h"
#include "supervisor/children.h"
#include "host/proc_table.h"
#include "integration/daemon_fixture.h"
#include "integration/test_util.h"
#include "testgpu/fake_gpu_state.h"

namespace vramd {
namespace {

using nlohmann::json;
using testing::Child;
using testing::DaemonFixture;
using testing::eventually;
using testing::get;
using testing::events_of;
using testing::FakeService;
using testing::slurp;
using namespace std::chrono_literals;

std::pair<unsigned, json> post(const DaemonFixture& f, const std::string& target) {
  auto r = http_request({f.url}, "POST", target, "", 60000);
  if (!r) return {0, json::object()};
  return {r->status, json::parse(r->body, nullptr, false)};
}

// A managed fake ComfyUI holding `bytes` on the fixture's test GPU.
std::string managed_fake(const DaemonFixture& f, const std::string& name, int port,
                         const std::string& bytes, const std::string& extra = "") {
  return fmt::format(
      "[services.{}]\nkind = \"comfyui\"\nurl = \"http://127.0.0.1:{}\"\n"
      "start = [\"{}/fake-gpu-server\", \"--kind\", \"comfyui\", \"--port\", \"{}\", \"--state\", \"{}\", "
      "\"--model-bytes\", \"{}\"]\nstop_timeout = \"3s\"\n{}\n",
      name, port, testing::build_dir(), port, f.state, bytes, extra);
}

json process_of(const DaemonFixture& f, const std::string& name) {
  json s = get(f, "/v1/services/" + name);
  return s.contains("process") ? s["process"] : json::object();
}

TEST(SupervisorE2E, StartIsHealthyOwnsItsMemoryAndStopChecksTheMemoryWent) {
  DaemonFixture f;
  int port = testing::free_port();
  f.start(managed_fake(f, "comfy", port, "8GiB"));
  auto [status, body] = post(f, "/v1/services/comfy/start?wait=true");
  ASSERT_EQ(status, 200u) << body.dump(2) << f.log();
  EXPECT_TRUE(body["ok"].get<bool>());
  json p = process_of(f, "comfy");
  EXPECT_EQ(p["state"], "running");
  ASSERT_TRUE(p["pid"].is_number());
  // Its memory is the service's, named because vramd started it.
  ASSERT_TRUE(eventually([&] { return get(f, "/v1/services/comfy").value("bytes", Bytes{0}) == 8 * GiB; }))
      << get(f, "/v1/status").dump(2);
  // Its output is in its log.
  json logs = get(f, "/v1/services/comfy/logs?lines=20");
  std::string all;
  for (const auto& l : logs["lines"]) all += l.get<std::string>() + "\n";
  EXPECT_NE(all.find(fmt::format("ready {}", port)), std::string::npos) << all;
  EXPECT_NE(all.find("---- vramd: starting comfy"), std::string::npos) << all;

  auto [stop_status, stop] = post(f, "/v1/services/comfy/stop?wait=true");
  ASSERT_EQ(stop_status, 200u) << stop.dump(2);
  EXPECT_NE(stop["message"].get<std::string>().find("stopped comfy: 8.0 GiB → 0 B"), std::string::npos)
      << stop.dump(2);
  EXPECT_EQ(process_of(f, "comfy")["state"], "stopped");
  EXPECT_EQ(kill(p["pid"].get<int>(), 0), -1);  // gone
}

TEST(SupervisorE2E, CrashesAreDiagnosedRestartedWithBackoffThenFailed) {
  DaemonFixture f;
  // A ComfyUI-shaped crash: async offload at boot, then the CUDA error, exit 1.
  std::string script = f.dir.file("crash.sh");
  std::ofstream(script) << "#!/bin/sh\n"
                           "echo 'Using async weight offloading with 2 streams'\n"
                           "sleep 0.2\n"
                           "echo 'Traceback (most recent call last):'\n"
                           "echo '  File \"/opt/ComfyUI/comfy/ops.py\", line 112, in cast_bias_weight'\n"
                           "echo '  File \"/opt/ComfyUI/comfy/model_management.py\", line 1080, in sync_stream'\n"
                           "echo 'torch.AcceleratorError: CUDA error: unknown error'\n"
                           "exit 1\n";
  chmod(script.c_str(), 0755);
  f.start(fmt::format("[services.flaky]\nkind = \"process\"\nstart = [\"{}\"]\nmax_restarts = 2\n", script));
  auto [status, body] = post(f, "/v1/services/flaky/start");
  EXPECT_TRUE(status == 200u || status == 202u) << body.dump(2);
  // 1 s and 2 s of backoff, then the third crash in the window makes it failed.
  ASSERT_TRUE(eventually([&] { return process_of(f, "flaky")["state"] == "failed"; }, 20s))
      << get(f, "/v1/services/flaky").dump(2) << get(f, "/v1/events").dump(2);
  json doctor;
  ASSERT_TRUE(eventually([&] {
    doctor = get(f, "/v1/doctor?service=flaky");
    return !doctor["services"].empty() && !doctor["services"][0]["crashes"].empty() &&
           doctor["services"][0]["crashes"][0]["count"] == 3;
  })) << doctor.dump(2);
  const json& c = doctor["services"][0]["crashes"][0];
  EXPECT_EQ(c["signature"], "cuda-async-offload") << c.dump(2);
  EXPECT_NE(c["suggestion"].get<std::string>().find("--disable-async-offload"), std::string::npos);
  EXPECT_NE(doctor["services"][0]["reason"].get<std::string>().find("3 times"), std::string::npos)
      << doctor.dump(2);
  json crashes = get(f, "/v1/services/flaky/crashes?limit=1");
  ASSERT_EQ(crashes["crashes"].size(), 1u);
  EXPECT_EQ(crashes["crashes"][0]["exit_code"], 1);
  EXPECT_FALSE(crashes["crashes"][0]["log_tail"].empty());
  // The CLI says the same.
  auto r = testing::run_cli({"doctor", "flaky", "--url", f.url}, {}, f.dir);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("x3"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--disable-async-offload"), std::string::npos) << r.out;
}

TEST(SupervisorE2E, ChildrenOutliveKillDashNineAndAreAdoptedAgainButNotAReusedPid) {
  DaemonFixture f;
  int port = testing::free_port();
  std::string toml = managed_fake(f, "comfy", port, "4GiB");
  f.start(toml);
  auto [status, body] = post(f, "/v1/services/comfy/start?wait=true");
  ASSERT_EQ(status, 200u) << body.dump(2);
  int pid = process_of(f, "comfy")["pid"];
  f.daemon->kill(SIGKILL);
  EXPECT_EQ(kill(pid, 0), 0);  // still runs
  f.start(toml);
  json p;
  ASSERT_TRUE(eventually([&] {
    p = process_of(f, "comfy");
    return p["state"] == "running";
  })) << p.dump(2);
  EXPECT_EQ(p["pid"], pid);
  EXPECT_TRUE(p["adopted"].get<bool>());
  // A stop still works on an adopted child (no exit status: it is not vramd's child now).
  auto [s2, stop] = post(f, "/v1/services/comfy/stop?wait=true");
  EXPECT_EQ(s2, 200u) << stop.dump(2);
  f.daemon->kill(SIGKILL);

  // A pid file naming a live process with another start time (pid reuse) is not adopted.
  Child stranger({"sleep", "3800"});
  ASSERT_TRUE(write_pid_file(f.dir.file("run/comfy.pid"), {stranger.pid(), 12345}).ok());
  f.start(toml);
  std::this_thread::sleep_for(500ms);
  EXPECT_EQ(process_of(f, "comfy")["state"], "stopped");
  EXPECT_EQ(kill(stranger.pid(), 0), 0);
}

TEST(SupervisorE2E, AStartWhosePortIsTakenIsRefusedNamingTheProcess) {
  DaemonFixture f;
  FakeService squatter(f, "comfyui", {"--model-bytes", "1GiB"});
  f.start(managed_fake(f, "comfy", squatter.port(), "4GiB"));
  auto [status, body] = post(f, "/v1/services/comfy/start?wait=true");
  EXPECT_EQ(status, 409u) << body.dump(2);
  std::string message = body["message"];
  EXPECT_NE(message.find(fmt::format("port {} is taken by fake-gpu-serve", squatter.port())), std::string::npos)
      << message;
  EXPECT_NE(message.find(std::to_string(squatter.pid())), std::string::npos) << message;
}

TEST(SupervisorE2E, ExclusiveGroupStartingBLeavesOnlyBOnTheGpu) {
  DaemonFixture f;
  int pa = testing::free_port(), pb = testing::free_port();
  f.start(managed_fake(f, "a", pa, "6GiB", "group = \"heavy\"") +
          managed_fake(f, "b", pb, "5GiB", "group = \"heavy\""));
  ASSERT_EQ(post(f, "/v1/services/a/start?wait=true").first, 200u);
  ASSERT_TRUE(eventually([&] { return get(f, "/v1/services/a").value("bytes", Bytes{0}) == 6 * GiB; }));
  ASSERT_EQ(post(f, "/v1/services/b/start?wait=true").first, 200u);
  ASSERT_TRUE(eventually([&] {
    json st = get(f, "/v1/status");
    return testing::holding(st, "a") == nullptr && testing::holding(st, "b") != nullptr;
  })) << get(f, "/v1/status").dump(2);
  EXPECT_EQ(process_of(f, "a")["state"], "stopped");
  EXPECT_EQ(process_of(f, "b")["state"], "running");
}

TEST(SupervisorE2E, StartAdmissionUnloadsTheIdleHolderBeforeItStarts) {
  DaemonFixture f;
  FakeService other(f, "comfyui", {"--model-bytes", "16GiB"});
  int port = testing::free_port();
  f.start(fmt::format("[services.other]\nkind = \"comfyui\"\nurl = \"{}\"\nmin_idle = \"0s\"\n\n", other.url()) +
          managed_fake(f, "comfy", port, "12GiB", "vram_estimate = \"12GiB\""));
  ASSERT_TRUE(eventually([&] { return get(f, "/v1/services/other").value("bytes", Bytes{0}) == 16 * GiB; }));
  // 24 GiB − 0.4 baseline − 16 held: 12 GiB do not fit until `other` is unloaded for it.
  auto [status, body] = post(f, "/v1/services/comfy/start?wait=true");
  ASSERT_EQ(status, 200u) << body.dump(2) << f.log();
  EXPECT_EQ(process_of(f, "comfy")["state"], "running");
  EXPECT_EQ(other.state()["unload_calls"], 1);
  // In that order: queued, the eviction, its memory gone, then the start (the unload's verdict
  // waits for the memory to hold still; the start need not).
  json events = get(f, "/v1/events?limit=500")["events"];
  int queued = -1, unloading = -1, gone = -1, started = -1;
  for (int i = 0; i < static_cast<int>(events.size()); ++i) {
    std::string type = events[i]["type"];
    if (type == "service.queued" && events[i]["subject"] == "comfy") queued = i;
    if (type == "unload.started" && events[i]["subject"] == "other") unloading = i;
    if (type == "owner.gone" && events[i]["subject"] == "other") gone = i;
    if (type == "service.started" && events[i]["subject"] == "comfy") started = i;
  }
  EXPECT_TRUE(queued >= 0 && unloading > queued && gone > unloading && started > gone) << events.dump(2);
  ASSERT_TRUE(eventually([&] { return !events_of(f, "unload.freed").empty(); }));
  // The start lease ended once comfy was up; nothing is left queued.
  EXPECT_TRUE(get(f, "/v1/leases")["leases"].empty()) << get(f, "/v1/leases").dump(2);
}

TEST(SupervisorE2E, AStartThatCannotFitWaitsWithAReasonAndForceStartsItAnyway) {
  DaemonFixture f;
  FakeService pinned(f, "comfyui", {"--model-bytes", "16GiB"});
  int port = testing::free_port();
  f.start(fmt::format("[services.big]\nkind = \"comfyui\"\nurl = \"{}\"\npinned = true\n\n", pinned.url()) +
          managed_fake(f, "comfy", port, "2GiB", "vram_estimate = \"12GiB\""));
  ASSERT_TRUE(eventually([&] { return get(f, "/v1/services/big").value("bytes", Bytes{0}) == 16 * GiB; }));
  auto [status, body] = post(f, "/v1/services/comfy/start");
  EXPECT_EQ(status, 202u) << body.dump(2);
  EXPECT_EQ(body["state"], "queued");
  ASSERT_TRUE(eventually([&] {
    return process_of(f, "comfy").value("reason", std::string()).find("big holds 16.0 GiB, pinned") != std::string::npos;
  })) << process_of(f, "comfy").dump(2);
  json leases = get(f, "/v1/leases")["leases"];
  ASSERT_EQ(leases.size(), 1u);
  EXPECT_TRUE(leases[0]["start"].get<bool>());
  EXPECT_EQ(leases[0]["service"], "comfy");
  EXPECT_EQ(pinned.state()["unload_calls"], 0);  // pinned: never evicted
  auto [forced, fbody] = post(f, "/v1/services/comfy/start?force=true&wait=true");
  ASSERT_EQ(forced, 200u) << fbody.dump(2);
  EXPECT_EQ(process_of(f, "comfy")["state"], "running");
  EXPECT_TRUE(get(f, "/v1/leases")["leases"].empty());
}

TEST(SupervisorE2E, ALeaseForAServiceThatIsDownStartsIt) {
  DaemonFixture f;
  int port = testing::free_port();
  f.start(managed_fake(f, "comfy", port, "6GiB"));
  auto r = http_request({f.url}, "POST", "/v1/leases",
                        R"({"vram": "8GiB", "gpu": 0, "service": "comfy", "holder": "flux-worker"})", 5000);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->status / 100, 2u) << r->body;
  json lease = json::parse(r->body);
  EXPECT_EQ(lease["state"], "granted");
  ASSERT_TRUE(eventually([&] { return process_of(f, "comfy").value("state", "") == "running"; }))
      << process_of(f, "comfy").dump(2) << f.log();
  // comfy's 6 GiB count as the lease's own.
  ASSERT_TRUE(eventually([&] {
    json l = get(f, fmt::format("/v1/leases/{}", lease["id"].get<uint64_t>()));
    return l.value("held_bytes", Bytes{0}) == 6 * GiB;
  })) << get(f, "/v1/leases").dump(2);
}

// Gone, or a zombie nobody has reaped yet: either way it runs no more.
bool gone(int pid) {
  std::ifstream in(fmt::format("/proc/{}/stat", pid));
  std::string stat((std::istreambuf_iterator<char>(in)), {});
  if (stat.empty()) return true;
  auto close = stat.rfind(')');
  return close != std::string::npos && close + 2 < stat.size() && stat[close + 2] == 'Z';
}

TEST(SupervisorE2E, ReclaimPortEndsASquatterThatMatchRecognisesAndRefusesOneItDoesNot) {
  DaemonFixture f;
  FakeService squatter(f, "comfyui", {"--model-bytes", "1GiB"});
  FakeService stranger(f, "comfyui", {"--model-bytes", "1GiB"});
  f.start(managed_fake(f, "comfy", squatter.port(), "2GiB",
                       fmt::format("reclaim_port = true\nmatch = {{ cmdline = \"fake-gpu-server.*--port {}\" }}",
                                   squatter.port())) +
          managed_fake(f, "other", stranger.port(), "2GiB",
                       "reclaim_port = true\nmatch = { cmdline = \"^python3 main\\\\.py\" }"));
  // The squatter is this service's own kind of process (match), of vramd's user: ended, then started.
  auto [status, body] = post(f, "/v1/services/comfy/start?wait=true");
  ASSERT_EQ(status, 200u) << body.dump(2) << f.log();
  EXPECT_TRUE(eventually([&] { return gone(squatter.pid()); }));
  EXPECT_NE(process_of(f, "comfy")["pid"].get<int>(), squatter.pid());
  // match does not recognise the other port's process: refused, and it is left alone.
  auto [refused, rbody] = post(f, "/v1/services/other/start?wait=true");
  EXPECT_EQ(refused, 409u) << rbody.dump(2);
  EXPECT_NE(rbody["message"].get<std::string>().find("not recognised by match"), std::string::npos)
      << rbody.dump(2);
  EXPECT_FALSE(gone(stranger.pid()));
}

TEST(SupervisorE2E, OnShutdownStopEndsTheChildWithVramdAndLeaveDoesNot) {
  DaemonFixture f;
  int p1 = testing::free_port(), p2 = testing::free_port();
  f.start(managed_fake(f, "stops", p1, "1GiB", "on_shutdown = \"stop\"") +
          managed_fake(f, "stays", p2, "1GiB"));
  ASSERT_EQ(post(f, "/v1/services/stops/start?wait=true").first, 200u);
  ASSERT_EQ(post(f, "/v1/services/stays/start?wait=true").first, 200u);
  int stops = process_of(f, "stops")["pid"], stays = process_of(f, "stays")["pid"];
  f.daemon->kill(SIGTERM);  // a clean shutdown of vramd
  EXPECT_TRUE(eventually([&] { return gone(stops); }));
  EXPECT_FALSE(gone(stays));
  ::kill(stays, SIGKILL);
}

TEST(SupervisorE2E, UserRunsTheChildAsThatUser) {
  if (geteuid() != 0) GTEST_SKIP() << "`user` needs vramd to run as root";
  DaemonFixture f;
  f.start("[services.job]\nkind = \"process\"\nuser = \"nobody\"\ncwd = \"/\"\n"
          "start = [\"/bin/sh\", \"-c\", \"id -un; exec sleep 30\"]\n");
  auto [status, body] = post(f, "/v1/services/job/start?wait=true");
  ASSERT_EQ(status, 200u) << body.dump(2) << f.log();
  ASSERT_TRUE(eventually([&] {
    json logs = get(f, "/v1/services/job/logs?lines=5");
    for (const auto& l : logs.value("lines", json::array()))
      if (l == "nobody") return true;
    return false;
  })) << get(f, "/v1/services/job/logs").dump(2);
  int pid = process_of(f, "job")["pid"];
  std::ifstream status_file(fmt::format("/proc/{}/status", pid));
  std::string line, uid;
  while (std::getline(status_file, line))
    if (line.starts_with("Uid:")) uid = line;
  EXPECT_EQ(uid.find("\t0\t"), std::string::npos) << uid;  // not root
  post(f, "/v1/services/job/stop?wait=true");
}

TEST(Children, LogRotationKeepsOneOlderFileAndTailsReadAcrossIt) {
  testing::TempDir dir;
  std::string log = dir.file("svc.log");
  {
    std::ofstream out(log);
    for (int i = 0; i < 1000; ++i) out << "line " << i << "\n";
  }
  rotate_log(log, 1024);
  EXPECT_EQ(std::filesystem::file_size(log), 0u);
  EXPECT_GT(std::filesystem::file_size(log + ".1"), 1024u);
  {
    std::ofstream out(log, std::ios::app);
    out << "new 1\nnew 2\n";
  }
  auto tail = log_tail(log, 4);
  EXPECT_EQ(tail, (std::vector<std::string>{"line 998", "line 999", "new 1", "new 2"}));
  rotate_log(log, 1024);  // small: stays
  EXPECT_GT(std::filesystem::file_size(log), 0u);
  auto [lines, offset] = log_since(log, 0);
  EXPECT_EQ(lines.size(), 2u);
  EXPECT_EQ(offset, std::filesystem::file_size(log));
}

}  // namespace
}  // namespace vramd
