// systemd units (match.unit) through the real vramd binary, against the fake systemctl and
// journalctl (tests/fakes/systemd: no systemd runs on this machine or on CI's). The fakes run real
// processes (a fake GPU server holding test-GPU memory, a script that crashes), so what the
// daemon shows follows a real process: stop/start/restart --wait, a crash restarted per policy
// and diagnosed from the journal, systemd's own Restart= respected, logs and logs -f offsets.
#include <sys/stat.h>

#include <fstream>

#include "integration/daemon_fixture.h"

namespace vramd::testing {
namespace {

using namespace std::chrono_literals;

// The fake systemd of one test: $dir/bin/systemctl and journalctl, units in $dir/units.
class FakeSystemd {
 public:
  explicit FakeSystemd(DaemonFixture& f) : dir_(f.dir.file("systemd")) {
    std::filesystem::create_directories(dir_ + "/bin");
    std::filesystem::create_directories(dir_ + "/units");
    for (const char* tool : {"systemctl", "journalctl"})
      std::filesystem::create_symlink(build_dir() + "/fake-systemd", dir_ + "/bin/" + tool);
    f.extra_env.push_back("FAKE_SYSTEMD_DIR=" + dir_);
    f.daemon_toml += fmt::format("systemctl = \"{0}/bin/systemctl\"\njournalctl = \"{0}/bin/journalctl\"\n",
                                 dir_);
  }
  // Every unit's manager and process go with the test.
  ~FakeSystemd() {
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(dir_ + "/state", ec)) {
      std::ifstream in(e.path());
      std::string line;
      while (std::getline(in, line)) {
        int pid = 0;
        if (line.starts_with("ManagerPID=")) pid = std::atoi(line.c_str() + 11);
        if (pid <= 1) continue;
        // Its process group (the session the fake systemctl made; the manager is not its
        // leader): the manager and the unit's processes.
        pid_t group = ::getpgid(pid);
        if (group > 1) ::kill(-group, SIGKILL);
        ::kill(pid, SIGKILL);
      }
    }
  }
  void unit(const std::string& name, const std::string& body) {
    std::ofstream(dir_ + "/units/" + name) << body;
  }
  // The fake systemctl, as a person would run it.
  CliResult systemctl(const std::string& args) const {
    std::string out = dir_ + "/out", err = dir_ + "/err";
    std::string cmd = fmt::format("FAKE_SYSTEMD_DIR={0} {0}/bin/systemctl {1} >{2} 2>{3}", dir_,
                                  args, out, err);
    int status = std::system(cmd.c_str());
    return {WEXITSTATUS(status), slurp(out), slurp(err)};
  }
  std::string show(const std::string& unit, const std::string& prop) const {
    auto r = systemctl(fmt::format("show -p {} --value {}", prop, unit));
    std::string v = r.out;
    while (!v.empty() && v.back() == '\n') v.pop_back();
    return v;
  }
  std::string calls() const { return slurp(dir_ + "/calls"); }

 private:
  std::string dir_;
};

Bytes held(const DaemonFixture& f, const std::string& owner) {
  json status = f.status();
  const json* h = holding(status, owner);
  return h ? (*h)["bytes"].get<Bytes>() : 0;
}

json process_of(const DaemonFixture& f, const std::string& service) {
  json p = get(f, "/v1/services/" + service).value("process", json());
  return p.is_object() ? p : json::object();
}

std::string server_unit(const DaemonFixture& f, int port, const std::string& extra = "") {
  return fmt::format("ExecStart={} --kind comfyui --port {} --state {} --model-bytes 8GiB\n{}",
                     build_dir() + "/fake-gpu-server", port, f.state, extra);
}

TEST(UnitsE2E, StopStartAndRestartActOnTheUnitAndWaitForIt) {
  DaemonFixture f;
  FakeSystemd sd(f);
  int port = free_port();
  sd.unit("comfyui.service", server_unit(f, port, "TimeoutStopSec=5\n"));
  ASSERT_EQ(sd.systemctl("start comfyui.service").code, 0);
  f.start(fmt::format("[services.comfy]\nkind = \"comfyui\"\nurl = \"http://127.0.0.1:{}\"\n"
                      "match = {{ unit = \"comfyui.service\" }}\nstop_timeout = \"5s\"\n",
                      port));
  // Its memory is named by the unit's MainPID (the fake's cgroup is not the unit's).
  ASSERT_TRUE(eventually([&] { return held(f, "comfy") == 8 * GiB; })) << f.status().dump(2) << f.log();
  ASSERT_TRUE(eventually([&] { return process_of(f, "comfy").value("state", "") == "running"; }))
      << f.log();
  json svc = get(f, "/v1/services/comfy");
  EXPECT_EQ(svc.value("can_restart", ""), "unit") << svc.dump(2);
  EXPECT_EQ(svc["process"]["pid"], std::stoi(sd.show("comfyui.service", "MainPID")));
  EXPECT_EQ(svc["process"]["systemd_restart"], "no");

  // --wait: the answer comes once systemd has stopped it and its memory is gone.
  auto r = run_cli({"stop", "comfy", "--wait", "--url", f.url}, {}, f.dir);
  ASSERT_EQ(r.code, 0) << r.out << r.err << f.log();
  EXPECT_EQ(sd.show("comfyui.service", "ActiveState"), "inactive");
  EXPECT_EQ(held(f, "comfy"), 0) << f.status().dump(2);
  EXPECT_NE(r.out.find("stopped comfy"), std::string::npos) << r.out;
  EXPECT_NE(sd.calls().find("systemctl stop -- comfyui.service"), std::string::npos) << sd.calls();
  EXPECT_TRUE(events_of(f, "service.crashed").empty()) << f.log();
  // A second stop changes nothing and says so.
  r = run_cli({"stop", "comfy", "--wait", "--url", f.url}, {}, f.dir);
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("not running"), std::string::npos) << r.out;

  // start --wait: once it answers its health check.
  r = run_cli({"start", "comfy", "--wait", "--url", f.url}, {}, f.dir);
  ASSERT_EQ(r.code, 0) << r.out << r.err << f.log();
  EXPECT_EQ(sd.show("comfyui.service", "ActiveState"), "active");
  EXPECT_TRUE(http_request({fmt::format("http://127.0.0.1:{}", port)}, "GET", "/system_stats", "",
                           2000).ok());
  std::string invocation = sd.show("comfyui.service", "InvocationID");
  // Its logs come from the journal; the offset (the entry's realtime µs) follows them (logs -f).
  json logs = get(f, "/v1/services/comfy/logs?lines=10");
  ASSERT_TRUE(logs.contains("offset")) << logs.dump(2);
  EXPECT_EQ(logs["unit"], "comfyui.service");
  EXPECT_NE(logs["lines"].dump().find(fmt::format("ready {}", port)), std::string::npos)
      << logs.dump(2);
  uint64_t offset = logs["offset"].get<uint64_t>();

  r = run_cli({"restart", "comfy", "--wait", "--url", f.url}, {}, f.dir);
  ASSERT_EQ(r.code, 0) << r.out << r.err << f.log();
  EXPECT_NE(sd.show("comfyui.service", "InvocationID"), invocation);  // a new run
  EXPECT_TRUE(eventually([&] { return held(f, "comfy") == 8 * GiB; })) << f.log();
  json after = get(f, fmt::format("/v1/services/comfy/logs?after={}", offset));
  ASSERT_TRUE(after.contains("lines")) << after.dump(2);
  EXPECT_NE(after["lines"].dump().find(fmt::format("ready {}", port)), std::string::npos)
      << after.dump(2);
  EXPECT_EQ(after["lines"].dump().find("Started comfyui.service"),
            after["lines"].dump().rfind("Started comfyui.service"))  // once: nothing read twice
      << after.dump(2);
  EXPECT_GT(after["offset"].get<uint64_t>(), offset);
  EXPECT_EQ(process_of(f, "comfy").value("state", ""), "running");
  EXPECT_TRUE(events_of(f, "service.crashed").empty()) << f.log();
}

// The ComfyUI-shaped crash of the docker and supervisor tests, as a unit's ExecStart.
std::string crash_script(const DaemonFixture& f) {
  std::string script = f.dir.file("crash.sh");
  std::ofstream(script) << "#!/bin/sh\n"
                           "echo 'Using async weight offloading with 2 streams'\n"
                           "while [ ! -e " << f.dir.file("go") << " ]; do sleep 0.1; done\n"
                           "echo 'Traceback (most recent call last):'\n"
                           "echo '  File \"/opt/ComfyUI/comfy/ops.py\", line 112, in cast_bias_weight'\n"
                           "echo '  File \"/opt/ComfyUI/comfy/model_management.py\", line 1080, in sync_stream'\n"
                           "echo 'torch.AcceleratorError: CUDA error: unknown error' >&2\n"
                           "exit 1\n";
  return script;
}

TEST(UnitsE2E, ACrashIsRestartedPerPolicyAndDiagnosedFromTheJournal) {
  DaemonFixture f;
  FakeSystemd sd(f);
  sd.unit("flaky.service", "ExecStart=/bin/sh " + crash_script(f) + "\n");
  ASSERT_EQ(sd.systemctl("start flaky.service").code, 0);
  f.start(fmt::format("[services.flaky]\nkind = \"comfyui\"\nurl = \"http://127.0.0.1:{}\"\n"
                      "match = {{ unit = \"flaky.service\" }}\nmax_restarts = 1\n",
                      free_port()));
  ASSERT_TRUE(eventually([&] { return process_of(f, "flaky").value("state", "") == "running"; }))
      << get(f, "/v1/services/flaky").dump(2) << f.log();
  std::ofstream(f.dir.file("go")) << "crash now\n";

  // It crashes, vramd starts it again after 1 s (systemctl start), it crashes again: failed.
  json svc;
  ASSERT_TRUE(eventually([&] {
    svc = get(f, "/v1/services/flaky");  // one read: the state and what the test checks of it
    return svc.value("process", json::object()).is_object() &&
           svc["process"].value("state", "") == "failed";
  }, 30s)) << svc.dump(2) << f.log();
  EXPECT_EQ(svc["process"].value("restarts", 0), 1) << svc.dump(2);
  EXPECT_EQ(svc["process"]["last_exit_code"], 1) << svc.dump(2);
  EXPECT_EQ(events_of(f, "service.restarting").size(), 1u) << f.log();
  EXPECT_NE(sd.calls().find("systemctl start -- flaky.service"), std::string::npos) << sd.calls();
  EXPECT_EQ(sd.show("flaky.service", "ActiveState"), "failed");
  json doctor;
  ASSERT_TRUE(eventually([&] {
    doctor = get(f, "/v1/doctor?service=flaky");
    return !doctor["services"].empty() && !doctor["services"][0]["crashes"].empty() &&
           doctor["services"][0]["crashes"][0]["count"] == 2;
  }, 30s)) << doctor.dump(2) << f.log();
  EXPECT_EQ(doctor["services"][0]["crashes"][0]["signature"], "cuda-async-offload")
      << doctor.dump(2);
  json crashes = get(f, "/v1/services/flaky/crashes?limit=1");
  ASSERT_EQ(crashes["crashes"].size(), 1u);
  EXPECT_EQ(crashes["crashes"][0]["exit_code"], 1);
  // The journal's lines, stderr included (and systemd's own lines about the unit).
  std::string tail = crashes["crashes"][0]["log_tail"].dump();
  EXPECT_NE(tail.find("Traceback (most recent call last):"), std::string::npos) << tail;
  EXPECT_NE(tail.find("\"torch.AcceleratorError: CUDA error: unknown error\""), std::string::npos)
      << tail;
  EXPECT_NE(sd.calls().find("journalctl -u flaky.service -n 2000 -o cat --no-pager --until=@"),
            std::string::npos)
      << sd.calls();
  auto r = run_cli({"doctor", "flaky", "--url", f.url}, {}, f.dir);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("x2"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--disable-async-offload"), std::string::npos) << r.out;
  auto logs = run_cli({"logs", "flaky", "-n", "8", "--url", f.url}, {}, f.dir);
  EXPECT_EQ(logs.code, 0) << logs.err;
  EXPECT_NE(logs.out.find("torch.AcceleratorError: CUDA error: unknown error"), std::string::npos)
      << logs.out;
}

TEST(UnitsE2E, SystemdsOwnRestartIsRespectedAndShown) {
  DaemonFixture f;
  FakeSystemd sd(f);
  // RestartSec long enough that the watch sees it between runs, and short enough for a test.
  sd.unit("policy.service",
          "ExecStart=/bin/sh " + crash_script(f) + "\nRestart=on-failure\nRestartSec=300ms\n");
  ASSERT_EQ(sd.systemctl("start policy.service").code, 0);
  f.start(fmt::format("[services.flaky]\nkind = \"comfyui\"\nurl = \"http://127.0.0.1:{}\"\n"
                      "match = {{ unit = \"policy.service\" }}\n",
                      free_port()));
  ASSERT_TRUE(eventually([&] { return process_of(f, "flaky").value("state", "") == "running"; }))
      << f.log();
  EXPECT_EQ(process_of(f, "flaky").value("systemd_restart", ""), "on-failure");
  std::ofstream(f.dir.file("go")) << "crash now\n";
  // systemd restarts it again and again: each exit is a crash, none restarted by vramd.
  ASSERT_TRUE(eventually([&] {
    return std::stoi(sd.show("policy.service", "NRestarts")) >= 2 &&
           events_of(f, "service.crashed").size() >= 2;
  }, 30s)) << sd.show("policy.service", "NRestarts") << f.log();
  auto crashed = events_of(f, "service.crashed").size();
  EXPECT_GE(events_of(f, "service.systemd_restarts").size(), crashed) << f.log();
  EXPECT_TRUE(events_of(f, "service.restarting").empty()) << f.log();
  EXPECT_TRUE(events_of(f, "service.backoff").empty()) << f.log();
  EXPECT_EQ(sd.calls().find("systemctl start -- policy.service"), std::string::npos)
      << sd.calls();  // vramd never started it
}

TEST(UnitsE2E, AKillIsSeenAsAnExitFromTheUnitsState) {
  DaemonFixture f;
  FakeSystemd sd(f);
  int port = free_port();
  sd.unit("comfyui.service", server_unit(f, port));
  ASSERT_EQ(sd.systemctl("start comfyui.service").code, 0);
  // Health checks far apart: the exit can only come from systemd's state.
  f.start(fmt::format("[services.comfy]\nkind = \"comfyui\"\nurl = \"http://127.0.0.1:{}\"\n"
                      "match = {{ unit = \"comfyui.service\" }}\nrestart = \"never\"\n"
                      "health_interval = \"1h\"\n",
                      port));
  ASSERT_TRUE(eventually([&] { return process_of(f, "comfy").value("state", "") == "running"; }))
      << f.log();
  int pid = std::stoi(sd.show("comfyui.service", "MainPID"));
  ASSERT_GT(pid, 1);
  ::kill(pid, SIGKILL);
  json svc;
  ASSERT_TRUE(eventually([&] {
    svc = get(f, "/v1/services/comfy");  // one read: the state and what the test checks of it
    return svc.value("process", json::object()).is_object() &&
           svc["process"].value("state", "") == "failed";
  })) << svc.dump(2) << f.log();
  EXPECT_EQ(svc["process"]["last_signal"], SIGKILL) << svc.dump(2);
  auto crashed = events_of(f, "service.crashed");
  ASSERT_EQ(crashed.size(), 1u) << f.log();
  EXPECT_NE(crashed[0]["message"].get<std::string>().find("SIGKILL"), std::string::npos)
      << crashed[0].dump();
  EXPECT_EQ(sd.show("comfyui.service", "ActiveState"), "failed");  // vramd left it down
}

TEST(UnitsE2E, AStartSystemdRefusesIsAFailureWithItsReason) {
  DaemonFixture f;
  FakeSystemd sd(f);
  f.start(fmt::format("[services.comfy]\nkind = \"comfyui\"\nurl = \"http://127.0.0.1:{}\"\n"
                      "match = {{ unit = \"comfyui.service\" }}\n",
                      free_port()));
  // No unit file: systemctl show answers (not-found, inactive); a start fails with its reason.
  ASSERT_TRUE(eventually([&] { return process_of(f, "comfy").value("state", "") == "stopped"; }))
      << f.log();
  auto r = run_cli({"start", "comfy", "--wait", "--url", f.url}, {}, f.dir);
  EXPECT_NE(r.code, 0) << r.out;
  EXPECT_NE((r.out + r.err).find("Unit comfyui.service not found"), std::string::npos)
      << r.out << r.err;
  EXPECT_EQ(process_of(f, "comfy").value("state", ""), "failed");
}

TEST(UnitsE2E, UserUnitsAreAskedOfTheUsersManager) {
  DaemonFixture f;
  FakeSystemd sd(f);
  f.daemon_toml += "systemd_user = true\n";
  int port = free_port();
  sd.unit("comfyui.service", server_unit(f, port));
  f.start(fmt::format("[services.comfy]\nkind = \"comfyui\"\nurl = \"http://127.0.0.1:{}\"\n"
                      "match = {{ unit = \"comfyui.service\" }}\n",
                      port));
  auto r = run_cli({"start", "comfy", "--wait", "--url", f.url}, {}, f.dir);
  ASSERT_EQ(r.code, 0) << r.out << r.err << f.log();
  EXPECT_TRUE(eventually([&] { return held(f, "comfy") == 8 * GiB; })) << f.log();
  json logs = get(f, "/v1/services/comfy/logs?lines=5");
  EXPECT_NE(logs["lines"].dump().find(fmt::format("ready {}", port)), std::string::npos)
      << logs.dump(2);
  std::string calls = sd.calls();
  EXPECT_NE(calls.find("systemctl --user start -- comfyui.service"), std::string::npos) << calls;
  EXPECT_NE(calls.find("systemctl --user show -p "), std::string::npos) << calls;
  EXPECT_NE(calls.find("journalctl --user -u comfyui.service"), std::string::npos) << calls;
  EXPECT_EQ(calls.find("systemctl show"), std::string::npos) << calls;  // never the system's
}

TEST(UnitsE2E, NoSystemctlIsAFaultThatTheStatusShows) {
  DaemonFixture f;
  f.extra_env.push_back("FAKE_SYSTEMD_DIR=" + f.dir.file("none"));
  f.daemon_toml = fmt::format("systemctl = \"{}\"\n", f.dir.file("no-such-systemctl"));
  f.start(fmt::format("[services.comfy]\nkind = \"comfyui\"\nurl = \"http://127.0.0.1:{}\"\n"
                      "match = {{ unit = \"comfyui.service\" }}\n",
                      free_port()));
  json status;
  ASSERT_TRUE(eventually([&] {
    status = f.status();
    for (const auto& x : status.value("faults", json::array()))
      if (x.value("backend", "") == "systemd") return true;
    return false;
  })) << status.dump(2) << f.log();
  EXPECT_NE(status.dump().find("no-such-systemctl"), std::string::npos) << status.dump(2);
}

}  // namespace
}  // namespace vramd::testing
