// Containers through a real Docker Engine (docker_engine.h): vramd names a container's GPU
// memory by its name and by its compose service, its stop/start/restart act on the real
// container, and `vramd discover` finds a server in a container and writes a config that works.
#include <unistd.h>

#include <fstream>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "daemon/config_file.h"
#include "docker/docker_engine.h"
#include "integration/daemon_fixture.h"
#include "integration/test_util.h"

namespace vramd {
namespace {

using nlohmann::json;
using testing::DaemonFixture;
using testing::docker_engine;
using testing::eventually;
using testing::get;
using testing::holding;
using testing::run_cli;
using testing::slurp;
using namespace std::chrono_literals;

// A fake GPU server (tests/fakes) in a container of the private engine. It shares the host's
// pid and network namespaces (as `pid: host` / `network_mode: host` do) so that its pid is the
// one the test GPU's state file lists, and the fixture's directory, where that file lives.
class FakeContainer {
 public:
  FakeContainer(const DaemonFixture& f, std::string name, const std::string& kind,
                std::vector<std::string> docker_args = {}, std::vector<std::string> server_args = {})
      : name_(std::move(name)), port_(testing::free_port()) {
    std::vector<std::string> args = {"run", "-d", "--name", name_, "--network", "host",
                                     "--pid", "host", "-v", f.dir.path() + ":" + f.dir.path()};
    args.insert(args.end(), docker_args.begin(), docker_args.end());
    for (const auto& a : std::vector<std::string>{
             testing::DockerEngine::kImage, "/opt/fake-gpu-server", "--kind", kind, "--port",
             std::to_string(port_), "--state", f.state})
      args.push_back(a);
    args.insert(args.end(), server_args.begin(), server_args.end());
    auto r = docker_engine().cli(args);
    EXPECT_EQ(r.code, 0) << r.out;
    EXPECT_TRUE(ready()) << logs();
  }
  ~FakeContainer() { docker_engine().cli({"rm", "-f", name_}); }

  const std::string& name() const { return name_; }
  int port() const { return port_; }
  std::string url() const { return fmt::format("http://127.0.0.1:{}", port_); }
  std::string logs() const { return docker_engine().cli({"logs", name_}).out; }
  json inspect() const { return docker_engine().inspect(name_); }
  bool running() const { return inspect()["State"].value("Running", false); }
  // Up and serving: its last start printed "ready PORT" and the port answers.
  bool ready() const {
    return eventually([&] {
      return running() && http_request({url()}, "GET", "/fake/state", "", 1000).ok();
    });
  }

 private:
  std::string name_;
  int port_;
};

// What `owner` holds on the test GPU by the daemon's status (0: nothing).
Bytes held(const DaemonFixture& f, const std::string& owner) {
  json status = f.status();
  const json* h = holding(status, owner);
  return h ? (*h)["bytes"].get<Bytes>() : 0;
}

// /v1/services/NAME's `process` (an empty object until the engine has told its state).
json process_of(const DaemonFixture& f, const std::string& service) {
  json p = get(f, "/v1/services/" + service).value("process", json());
  return p.is_object() ? p : json::object();
}

std::string socket_toml() {
  return fmt::format("docker_socket = \"{}\"\n", docker_engine().socket());
}

class DockerE2E : public ::testing::Test {
 protected:
  void SetUp() override { docker_engine().remove_all_containers(); }
};

TEST_F(DockerE2E, AContainersMemoryIsNamedByItsNameAndByItsComposeService) {
  DaemonFixture f;
  f.daemon_toml = socket_toml();
  FakeContainer comfy(f, "vt-comfy", "comfyui", {}, {"--model-bytes", "12GiB"});
  FakeContainer whisper(f, "proj-whisper-1", "comfyui",
                        {"--label", "com.docker.compose.service=whisper", "--label",
                         "com.docker.compose.project=proj"},
                        {"--model-bytes", "3GiB"});
  f.start(fmt::format(
      "[services.comfy]\nkind = \"comfyui\"\nurl = \"{}\"\nmatch = {{ container = \"vt-comfy\" }}\n\n"
      "[services.stt]\nkind = \"comfyui\"\nurl = \"{}\"\nmatch = {{ compose_service = \"whisper\" }}\n",
      comfy.url(), whisper.url()));
  json status;
  EXPECT_TRUE(eventually([&] {
    status = f.status();
    const json* c = holding(status, "comfy");
    const json* w = holding(status, "stt");
    return c && w && (*c)["bytes"] == 12 * GiB && (*w)["bytes"] == 3 * GiB;
  })) << status.dump(2) << f.log();
  // The services say which container they are.
  EXPECT_TRUE(eventually([&] { return get(f, "/v1/services/comfy").value("state", "") == "up"; }))
      << get(f, "/v1/services/comfy").dump(2);
  EXPECT_EQ(get(f, "/v1/services/comfy").value("can_restart", ""), "container")
      << get(f, "/v1/services/comfy").dump(2);
}

TEST_F(DockerE2E, StopStartAndRestartActOnTheRealContainerAndWaitForIt) {
  DaemonFixture f;
  f.daemon_toml = socket_toml();
  FakeContainer comfy(f, "vt-life", "comfyui", {}, {"--model-bytes", "8GiB"});
  f.start(fmt::format(
      "[services.comfy]\nkind = \"comfyui\"\nurl = \"{}\"\nmatch = {{ container = \"vt-life\" }}\n"
      "stop_timeout = \"5s\"\n",
      comfy.url()));
  ASSERT_TRUE(eventually([&] { return held(f, "comfy") == 8 * GiB; })) << f.log();

  // --wait: the answer comes once Docker has stopped it and its memory is gone.
  auto r = run_cli({"stop", "comfy", "--wait", "--url", f.url}, {}, f.dir);
  ASSERT_EQ(r.code, 0) << r.out << r.err << f.log();
  EXPECT_FALSE(comfy.running()) << comfy.inspect().dump(2);
  EXPECT_EQ(held(f, "comfy"), 0) << f.status().dump(2);
  EXPECT_NE(r.out.find("stopped comfy"), std::string::npos) << r.out;
  // The stop was asked with the service's stop_timeout, and was not a crash.
  auto asked = testing::events_of(f, "service.stop");
  ASSERT_EQ(asked.size(), 1u) << f.log();
  EXPECT_NE(asked[0]["message"].get<std::string>().find("(t=5)"), std::string::npos) << asked[0].dump();
  EXPECT_TRUE(testing::events_of(f, "service.crashed").empty());

  // start --wait: the answer comes once the container answers its health check.
  r = run_cli({"start", "comfy", "--wait", "--url", f.url}, {}, f.dir);
  ASSERT_EQ(r.code, 0) << r.out << r.err << f.log();
  EXPECT_TRUE(comfy.running());
  EXPECT_TRUE(http_request({comfy.url()}, "GET", "/system_stats", "", 2000).ok());
  std::string started = comfy.inspect()["State"].value("StartedAt", "");
  // Its logs come from the engine; the offset (the engine's timestamp) follows them (logs -f).
  json logs = get(f, "/v1/services/comfy/logs?lines=10");
  ASSERT_TRUE(logs.contains("offset")) << logs.dump(2);
  EXPECT_NE(logs["lines"].dump().find(fmt::format("ready {}", comfy.port())), std::string::npos)
      << logs.dump(2);
  uint64_t offset = logs["offset"].get<uint64_t>();

  r = run_cli({"restart", "comfy", "--wait", "--url", f.url}, {}, f.dir);
  ASSERT_EQ(r.code, 0) << r.out << r.err << f.log();
  EXPECT_NE(comfy.inspect()["State"].value("StartedAt", ""), started) << comfy.inspect().dump(2);
  EXPECT_TRUE(comfy.running());
  EXPECT_TRUE(http_request({comfy.url()}, "GET", "/system_stats", "", 2000).ok());
  EXPECT_TRUE(eventually([&] { return held(f, "comfy") == 8 * GiB; })) << f.log();
  json after = get(f, fmt::format("/v1/services/comfy/logs?after={}", offset));
  ASSERT_TRUE(after.contains("lines")) << after.dump(2);
  EXPECT_EQ(after["lines"], json::array({fmt::format("ready {}", comfy.port())})) << after.dump(2);
  EXPECT_GT(after["offset"].get<uint64_t>(), offset);
  json svc = get(f, "/v1/services/comfy");
  EXPECT_EQ(svc["process"].value("state", ""), "running") << svc.dump(2);
  EXPECT_EQ(svc["process"].value("docker_restart_policy", ""), "no") << svc.dump(2);
  EXPECT_TRUE(testing::events_of(f, "service.crashed").empty()) << f.log();
}

// A ComfyUI-shaped crash (tests/integration/supervisor_e2e_test.cc has the same for a process
// vramd runs), in a container: it waits for the test's word, prints the traceback, exits 1.
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

std::vector<std::string> container_args(const DaemonFixture& f, const std::string& name,
                                        std::vector<std::string> extra) {
  std::vector<std::string> args = {"run", "-d", "--name", name, "--network", "none", "-v",
                                   f.dir.path() + ":" + f.dir.path()};
  args.insert(args.end(), extra.begin(), extra.end());
  args.push_back(testing::DockerEngine::kImage);
  return args;
}

TEST_F(DockerE2E, ACrashIsRestartedPerPolicyAndDiagnosedFromTheContainersLogs) {
  DaemonFixture f;
  f.daemon_toml = socket_toml();
  auto args = container_args(f, "vt-crash", {});
  args.insert(args.end(), {"/bin/sh", crash_script(f)});
  auto run = docker_engine().cli(args);
  ASSERT_EQ(run.code, 0) << run.out;
  f.start(fmt::format("[services.flaky]\nkind = \"comfyui\"\nurl = \"http://127.0.0.1:{}\"\n"
                      "match = {{ container = \"vt-crash\" }}\nmax_restarts = 1\n",
                      testing::free_port()));
  ASSERT_TRUE(eventually([&] {
    return process_of(f, "flaky").value("state", "") == "running";
  })) << get(f, "/v1/services/flaky").dump(2) << f.log();
  std::ofstream(f.dir.file("go")) << "crash now\n";

  // It crashes, vramd starts it again after 1 s, it crashes again: over max_restarts, failed.
  json svc;
  ASSERT_TRUE(eventually([&] {
    svc = get(f, "/v1/services/flaky");  // one read: the state and what the test checks of it
    return svc.value("process", json::object()).is_object() &&
           svc["process"].value("state", "") == "failed";
  }, 30s)) << svc.dump(2) << f.log();
  EXPECT_EQ(svc["process"].value("restarts", 0), 1) << svc.dump(2);
  EXPECT_EQ(testing::events_of(f, "service.restarting").size(), 1u) << f.log();
  json doctor;
  ASSERT_TRUE(eventually([&] {
    doctor = get(f, "/v1/doctor?service=flaky");
    return !doctor["services"].empty() && !doctor["services"][0]["crashes"].empty() &&
           doctor["services"][0]["crashes"][0]["count"] == 2;
  })) << doctor.dump(2) << f.log();
  const json& c = doctor["services"][0]["crashes"][0];
  EXPECT_EQ(c["signature"], "cuda-async-offload") << c.dump(2);
  json crashes = get(f, "/v1/services/flaky/crashes?limit=1");
  ASSERT_EQ(crashes["crashes"].size(), 1u);
  EXPECT_EQ(crashes["crashes"][0]["exit_code"], 1);
  // Its real logs, stderr included, without the stream headers.
  std::string tail = crashes["crashes"][0]["log_tail"].dump();
  EXPECT_NE(tail.find("Traceback (most recent call last):"), std::string::npos) << tail;
  EXPECT_NE(tail.find("\"torch.AcceleratorError: CUDA error: unknown error\""), std::string::npos)
      << tail;
  auto r = run_cli({"doctor", "flaky", "--url", f.url}, {}, f.dir);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("x2"), std::string::npos) << r.out;
  // stdout and stderr are two pipes: the engine may order their last lines either way.
  auto logs = run_cli({"logs", "flaky", "-n", "8", "--url", f.url}, {}, f.dir);
  EXPECT_EQ(logs.code, 0) << logs.err;
  EXPECT_NE(logs.out.find("torch.AcceleratorError: CUDA error: unknown error"), std::string::npos)
      << logs.out;
  EXPECT_NE(r.out.find("--disable-async-offload"), std::string::npos) << r.out;
}

TEST_F(DockerE2E, DockersOwnRestartPolicyIsRespectedAndShown) {
  DaemonFixture f;
  f.daemon_toml = socket_toml();
  auto args = container_args(f, "vt-policy", {"--restart", "unless-stopped"});
  args.insert(args.end(), {"/bin/sh", crash_script(f)});
  auto run = docker_engine().cli(args);
  ASSERT_EQ(run.code, 0) << run.out;
  f.start(fmt::format("[services.flaky]\nkind = \"comfyui\"\nurl = \"http://127.0.0.1:{}\"\n"
                      "match = {{ container = \"vt-policy\" }}\n",
                      testing::free_port()));
  ASSERT_TRUE(eventually([&] {
    return process_of(f, "flaky").value("state", "") == "running";
  })) << f.log();
  EXPECT_EQ(process_of(f, "flaky").value("docker_restart_policy", ""),
            "unless-stopped");
  std::ofstream(f.dir.file("go")) << "crash now\n";
  // Docker restarts it (100 ms, 200 ms, ...): each exit is a crash, none restarted by vramd.
  ASSERT_TRUE(eventually([&] {
    return docker_engine().inspect("vt-policy").value("RestartCount", 0) >= 2 &&
           testing::events_of(f, "service.crashed").size() >= 2;
  }, 30s)) << docker_engine().inspect("vt-policy").dump(2) << f.log();
  auto crashed = testing::events_of(f, "service.crashed").size();
  EXPECT_GE(testing::events_of(f, "service.docker_restarts").size(), crashed) << f.log();
  EXPECT_TRUE(testing::events_of(f, "service.restarting").empty()) << f.log();
  EXPECT_TRUE(testing::events_of(f, "service.backoff").empty()) << f.log();
}

TEST_F(DockerE2E, DockerKillIsSeenAsAnExitFromTheEnginesEvents) {
  DaemonFixture f;
  f.daemon_toml = socket_toml();
  FakeContainer comfy(f, "vt-kill", "comfyui", {}, {"--model-bytes", "4GiB"});
  // Health checks far apart: the exit can only come from the engine's events.
  f.start(fmt::format(
      "[services.comfy]\nkind = \"comfyui\"\nurl = \"{}\"\nmatch = {{ container = \"vt-kill\" }}\n"
      "restart = \"never\"\nhealth_interval = \"1h\"\n",
      comfy.url()));
  ASSERT_TRUE(eventually([&] {
    return process_of(f, "comfy").value("state", "") == "running";
  })) << f.log();
  auto k = docker_engine().cli({"kill", "vt-kill"});
  ASSERT_EQ(k.code, 0) << k.out;
  json svc;
  ASSERT_TRUE(eventually([&] {
    svc = get(f, "/v1/services/comfy");  // one read: the state and what the test checks of it
    return svc.value("process", json::object()).is_object() &&
           svc["process"].value("state", "") == "failed";
  })) << svc.dump(2) << f.log();
  EXPECT_EQ(svc["process"]["last_exit_code"], 137) << svc.dump(2);
  auto crashed = testing::events_of(f, "service.crashed");
  ASSERT_EQ(crashed.size(), 1u) << f.log();
  EXPECT_NE(crashed[0]["message"].get<std::string>().find("status 137"), std::string::npos)
      << crashed[0].dump();
  EXPECT_FALSE(comfy.running());  // restart = "never": vramd left it down
}

bool has_fault(const json& status, const std::string& backend) {
  for (const auto& f : status.value("faults", json::array()))
    if (f.value("backend", "") == backend) return true;
  return false;
}

TEST_F(DockerE2E, AnEngineThatIsNotThereIsAFaultUntilTheWatchReachesIt) {
  DaemonFixture f;
  // The socket vramd is given appears only later (an engine that starts after vramd).
  std::string link = f.dir.file("engine.sock");
  f.daemon_toml = fmt::format("docker_socket = \"{}\"\n", link);
  FakeContainer comfy(f, "vt-later", "comfyui", {}, {"--model-bytes", "2GiB"});
  f.start(fmt::format(
      "[services.comfy]\nkind = \"comfyui\"\nurl = \"{}\"\nmatch = {{ container = \"vt-later\" }}\n",
      comfy.url()));
  json status;
  ASSERT_TRUE(eventually([&] {
    status = f.status();
    return has_fault(status, "docker");
  })) << status.dump(2) << f.log();
  EXPECT_TRUE(get(f, "/v1/services/comfy").value("process", json::object()).is_null());  // its state is not known
  ASSERT_EQ(::symlink(docker_engine().socket().c_str(), link.c_str()), 0);
  // Reconnected (with backoff): the fault is gone and the container's state read.
  EXPECT_TRUE(eventually([&] {
    status = f.status();
    return !has_fault(status, "docker") &&
           process_of(f, "comfy").value("state", "") == "running";
  }, 30s)) << status.dump(2) << f.log();
  EXPECT_FALSE(testing::events_of(f, "backend.failed").empty());
}

TEST_F(DockerE2E, DiscoverFindsAServerInAContainerAndWritesAConfigThatWorks) {
  DaemonFixture f;
  FakeContainer comfy(f, "vt-found", "comfyui", {}, {"--model-bytes", "10GiB"});
  // discover reads the engine's socket from a config.
  std::string cli_config = f.dir.file("cli.toml");
  std::ofstream(cli_config) << "[daemon]\n" << socket_toml() << "\n[gpu]\nbackend = \"nvml\"\n";

  auto r = run_cli({"discover", "--json", "--config", cli_config}, f.env(), f.dir);
  ASSERT_EQ(r.code, 0) << r.err;
  json out = json::parse(r.out, nullptr, false);
  ASSERT_TRUE(out.is_object()) << r.out;
  ASSERT_EQ(out["services"].size(), 1u) << out.dump(2);
  const json& s = out["services"][0];
  EXPECT_EQ(s["kind"], "comfyui");
  EXPECT_EQ(s["url"], comfy.url());
  EXPECT_EQ(s["bytes"], 10 * GiB);
  EXPECT_EQ(s["match"], json({{"container", "vt-found"}})) << s.dump(2);

  std::string path = f.dir.file("discovered.toml");
  auto w = run_cli({"discover", "--write", path, "--config", cli_config}, f.env(), f.dir);
  ASSERT_EQ(w.code, 0) << w.err;
  auto config = load_config(path);
  ASSERT_TRUE(config.ok()) << config.error() << "\n" << slurp(path);
  ASSERT_EQ(config->services.size(), 1u) << slurp(path);
  f.daemon_toml = socket_toml();
  f.start(slurp(path));
  EXPECT_TRUE(eventually([&] {
    json svc = get(f, "/v1/services/vt-found");
    return svc.value("state", "") == "up" && svc.value("bytes", Bytes{0}) == 10 * GiB;
  })) << slurp(path) << get(f, "/v1/services").dump(2) << f.log();
  // And it manages the container it names.
  auto stop = run_cli({"stop", "vt-found", "--url", f.url}, {}, f.dir);
  EXPECT_EQ(stop.code, 0) << stop.out << stop.err;
  EXPECT_TRUE(eventually([&] { return !comfy.running(); }, 30s)) << comfy.inspect().dump(2);
}

}  // namespace
}  // namespace vramd
