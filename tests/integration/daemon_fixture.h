// A daemon on the test GPU and fake model servers beside it, for end-to-end tests.
#pragma once

#include <csignal>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/client.h"
#include "core/units.h"
#include "integration/test_util.h"
#include "testgpu/fake_gpu_state.h"

namespace vramd::testing {

using nlohmann::json;

inline std::string vramd_bin() { return testing::build_dir() + "/vramd"; }
inline std::string fake_lib() { return testing::build_dir() + "/libnvidia-ml-fake.so"; }

// A daemon on a fake 24 GiB GPU, sampling every 200 ms.
struct DaemonFixture {
  TempDir dir;
  std::string state = dir.file("gpu.json");
  int port = testing::free_port();
  std::string url = fmt::format("http://127.0.0.1:{}", port);
  std::unique_ptr<Child> daemon;

  DaemonFixture() {
    auto s = make_fake_gpu_state({{"NVIDIA GeForce RTX 3090", 24 * GiB}});
    s["gpus"][0]["used"] = 400 * MiB;
    EXPECT_TRUE(write_fake_gpu_state(state, s).ok());
  }
  // Services the daemon started outlive it by design (on_shutdown = "leave"): end them with the
  // test, from their pid files, or every run would leave servers behind on the machine.
  ~DaemonFixture() {
    daemon.reset();
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(dir.file("run"), ec)) {
      if (entry.path().extension() != ".pid") continue;
      std::ifstream in(entry.path());
      int pid = 0;
      if (in >> pid && pid > 1) ::kill(-pid, SIGKILL);  // its own process group (setsid)
    }
  }

  std::vector<std::string> env() const {
    std::vector<std::string> out = {"VRAMD_NVML_LIBRARY=" + fake_lib(), "FAKE_NVML_STATE=" + state};
    out.insert(out.end(), extra_env.begin(), extra_env.end());
    return out;
  }
  std::vector<std::string> extra_env;  // more "K=V" for the daemon (set before start)
  std::string daemon_toml;             // more [daemon] keys (set before start)
  std::string gpu_toml;                // more [gpu] keys (set before start)

  void start(const std::string& services_toml) {
    std::ofstream(dir.file("vramd.toml")) << fmt::format(
        "[daemon]\nlisten = \"127.0.0.1:{}\"\nstate_dir = \"{}\"\nsample_interval = \"200ms\"\n{}\n"
        "[gpu]\nbackend = \"nvml\"\n{}\n{}",
        port, dir.path(), daemon_toml, gpu_toml, services_toml);
    daemon = std::make_unique<Child>(
        std::vector<std::string>{vramd_bin(), "serve", "--config", dir.file("vramd.toml")}, env(),
        dir.file("daemon.log"));
    ASSERT_TRUE(eventually([&] { return status().contains("gpus") && !status()["sampled_at"].is_null(); }))
        << log();
  }

  json status(const std::string& where = "") const {
    auto r = http_request({where.empty() ? url : where}, "GET", "/v1/status");
    if (!r || r->status != 200) return json::object();
    return json::parse(r->body);
  }

  std::string log() const {
    std::ifstream f(dir.file("daemon.log"));
    return std::string(std::istreambuf_iterator<char>(f), {});
  }
};

// GET target's JSON from the fixture's daemon; an empty object when it did not answer 200.
inline json get(const DaemonFixture& f, const std::string& target) {
  auto r = http_request({f.url}, "GET", target, "", 5000);
  if (!r || r->status != 200) return json::object();
  return json::parse(r->body, nullptr, false);
}

// The stored events of one type, oldest first.
inline std::vector<json> events_of(const DaemonFixture& f, const std::string& type) {
  std::vector<json> out;
  for (const auto& e : get(f, "/v1/events?limit=1000").value("events", json::array()))
    if (e["type"] == type) out.push_back(e);
  return out;
}

inline const json* holding(const json& status, const std::string& owner) {
  if (!status.contains("gpus")) return nullptr;
  for (const auto& h : status["gpus"][0]["holdings"])
    if (h["owner"] == owner) return &h;
  return nullptr;
}

inline TimePoint sampled_at(const json& status) {
  if (!status.contains("sampled_at") || status["sampled_at"].is_null()) return {};
  return *parse_rfc3339(status["sampled_at"].get<std::string>());
}

inline TimePoint wall_now() {
  return std::chrono::time_point_cast<std::chrono::milliseconds>(std::chrono::system_clock::now());
}

inline std::string slurp(const std::string& path) {
  std::ifstream f(path);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// One fake-gpu-server (tests/fakes) holding its "VRAM" in the fixture's test GPU.
class FakeService {
 public:
  FakeService(const DaemonFixture& f, const std::string& kind, std::vector<std::string> extra = {})
      : port_(free_port()), log_(f.dir.file(fmt::format("fake-{}.log", port_))) {
    std::vector<std::string> argv = {build_dir() + "/fake-gpu-server", "--kind", kind, "--port",
                                     std::to_string(port_), "--state", f.state};
    argv.insert(argv.end(), extra.begin(), extra.end());
    child_ = std::make_unique<Child>(argv, std::vector<std::string>{}, log_);
    EXPECT_TRUE(eventually([&] { return slurp(log_).find(fmt::format("ready {}", port_)) != std::string::npos; }))
        << slurp(log_);
  }
  int port() const { return port_; }
  std::string url() const { return fmt::format("http://127.0.0.1:{}", port_); }
  pid_t pid() const { return child_->pid(); }
  // GET /fake/state: loaded, busy, unload_calls, ...
  json state() const {
    auto r = http_request({url()}, "GET", "/fake/state", "", 2000);
    if (!r || r->status != 200) return json::object();
    return json::parse(r->body, nullptr, false);
  }

 private:
  int port_;
  std::string log_;
  std::unique_ptr<Child> child_;
};

// Runs the CLI and returns (exit status, stdout, stderr).
struct CliResult {
  int code;
  std::string out, err;
};
inline CliResult run_cli(const std::vector<std::string>& args, const std::vector<std::string>& env,
                  const TempDir& dir) {
  std::string cmd;
  for (const auto& e : env) cmd += e + " ";
  cmd += vramd_bin();
  for (const auto& a : args) cmd += " '" + a + "'";
  cmd += " >" + dir.file("out") + " 2>" + dir.file("err");
  int status = std::system(cmd.c_str());
  auto slurp = [](const std::string& p) {
    std::ifstream f(p);
    return std::string(std::istreambuf_iterator<char>(f), {});
  };
  return {WEXITSTATUS(status), slurp(dir.file("out")), slurp(dir.file("err"))};
}

}  // namespace vramd::testing
