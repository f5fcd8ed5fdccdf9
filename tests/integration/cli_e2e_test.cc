// The CLI as a user runs it, against a real daemon or a canned one: `status --watch`, the shared
// daemon call (error texts and exit codes), `start --force`, and the services table.
#include <netinet/in.h>
#include <sys/socket.h>

#include <csignal>
#include <fstream>
#include <mutex>
#include <regex>
#include <thread>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "integration/daemon_fixture.h"
#include "integration/test_util.h"

namespace vramd {
namespace {

using nlohmann::json;
using testing::Child;
using testing::DaemonFixture;
using testing::eventually;
using testing::run_cli;
using testing::slurp;
using testing::TempDir;
using testing::vramd_bin;

size_t count_of(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size()))
    ++n;
  return n;
}

std::string dead_url() { return fmt::format("http://127.0.0.1:{}", testing::free_port()); }

// A daemon stand-in that answers every request with one canned response and records the
// request lines ("POST /v1/services/x/start?force=true HTTP/1.1").
class CannedDaemon {
 public:
  CannedDaemon(unsigned status, std::string body) : status_(status), body_(std::move(body)) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    EXPECT_EQ(listen(fd_, 8), 0);
    getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  ~CannedDaemon() {
    shutdown(fd_, SHUT_RDWR);
    close(fd_);
    thread_.join();
  }
  std::string url() const { return fmt::format("http://127.0.0.1:{}", port_); }
  std::vector<std::string> requests() const {
    std::lock_guard lock(mutex_);
    return requests_;
  }

 private:
  void serve() {
    for (;;) {
      int c = accept(fd_, nullptr, nullptr);
      if (c < 0) return;
      std::string in;
      char buf[4096];
      // The CLI sends small requests: the head (and an empty or tiny body) arrive together.
      while (in.find("\r\n\r\n") == std::string::npos) {
        ssize_t n = recv(c, buf, sizeof buf, 0);
        if (n <= 0) break;
        in.append(buf, static_cast<size_t>(n));
      }
      {
        std::lock_guard lock(mutex_);
        requests_.push_back(in.substr(0, in.find("\r\n")));
      }
      std::string out = fmt::format(
          "HTTP/1.1 {} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\n"
          "Connection: close\r\n\r\n{}",
          status_, body_.size(), body_);
      (void)!send(c, out.data(), out.size(), MSG_NOSIGNAL);
      close(c);
    }
  }

  unsigned status_;
  std::string body_;
  int fd_ = -1;
  int port_ = 0;
  std::thread thread_;
  mutable std::mutex mutex_;
  std::vector<std::string> requests_;
};

TEST(CliStatusWatch, PipePrintsCountSnapshotsSeparatedByBlankLines) {
  DaemonFixture f;
  f.start("");
  auto r = run_cli({"status", "--watch", "--interval", "0.2", "--count", "3", "--url", f.url},
                   f.env(), f.dir);
  ASSERT_EQ(r.code, 0) << r.err << r.out;
  EXPECT_EQ(count_of(r.out, "Every 0.2s: vramd status, " + f.url), 3u) << r.out;
  EXPECT_EQ(count_of(r.out, "GPU 0  NVIDIA GeForce RTX 3090"), 3u) << r.out;
  EXPECT_EQ(count_of(r.out, "\n\nEvery 0.2s"), 2u) << r.out;  // a blank line before each later one
  EXPECT_TRUE(r.out.starts_with("Every 0.2s")) << r.out;
  EXPECT_EQ(r.out.find('\033'), std::string::npos) << "no terminal codes into a pipe";
  EXPECT_EQ(r.err, "");
}

TEST(CliStatusWatch, UnreachableDaemonIsShownAndTriedAgainNoLocalSample) {
  DaemonFixture f;  // its fake GPU could be read directly: the watch must not do that
  std::string url = dead_url();
  auto r = run_cli({"status", "-w", "-n", "0.1", "--count", "2", "--url", url}, f.env(), f.dir);
  EXPECT_EQ(r.code, 3) << r.err << r.out;
  EXPECT_EQ(count_of(r.out, "vramd: the daemon is not reachable at " + url), 2u) << r.out;
  EXPECT_EQ(count_of(r.out, "Every 0.1s"), 2u) << r.out;
  EXPECT_EQ(r.out.find("NVIDIA"), std::string::npos) << r.out;
  EXPECT_EQ(r.err.find("one sample taken directly"), std::string::npos) << r.err;
}

TEST(CliStatusWatch, JsonPrintsOneObjectPerRefresh) {
  DaemonFixture f;
  f.start("");
  auto r =
      run_cli({"status", "--watch", "--json", "--interval", "0.1", "--count", "2", "--url", f.url},
              f.env(), f.dir);
  ASSERT_EQ(r.code, 0) << r.err;
  std::istringstream lines(r.out);
  std::string line;
  int n = 0;
  while (std::getline(lines, line)) {
    json st = json::parse(line, nullptr, false);
    ASSERT_TRUE(st.is_object() && st.contains("gpus")) << line;
    ++n;
  }
  EXPECT_EQ(n, 2) << r.out;
}

TEST(CliStatusWatch, CtrlCEndsItCleanly) {
  DaemonFixture f;
  f.start("");
  std::string out = f.dir.file("watch.out");
  Child watch({testing::vramd_bin(), "status", "--watch", "--interval", "0.2", "--url", f.url}, {},
              out);
  ASSERT_TRUE(eventually([&] { return count_of(slurp(out), "Every 0.2s") >= 2; })) << slurp(out);
  int status = watch.kill(SIGINT);
  ASSERT_TRUE(WIFEXITED(status)) << "killed by signal "
                                 << (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST(CliStatusWatch, WatchOptionsAreUsageErrorsWithoutWatchOrOutOfRange) {
  TempDir dir;
  auto r = run_cli({"status", "--count", "2"}, {}, dir);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--watch"), std::string::npos) << r.err;
  EXPECT_EQ(run_cli({"status", "--interval", "1"}, {}, dir).code, 2);
  EXPECT_EQ(run_cli({"status", "--watch", "--interval", "0"}, {}, dir).code, 2);
  EXPECT_EQ(run_cli({"status", "--watch", "--interval", "soon"}, {}, dir).code, 2);
  EXPECT_EQ(run_cli({"status", "--watch", "--count", "0"}, {}, dir).code, 2);
}

TEST(CliRun, OnLeaseLostChoicesAreCheckedBeforeAnyLeaseIsAsked) {
  TempDir dir;  // no daemon: each is refused before a call
  auto r = run_cli({"run", "--vram", "1GiB", "--on-lease-lost", "pause", "--", "true"}, {}, dir);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--on-lease-lost: expected stop or keep, got 'pause'"), std::string::npos) << r.err;
  r = run_cli({"run", "--vram", "1GiB", "--on-lease-lost", "suspend", "--", "true"}, {}, dir);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("needs CUDA checkpointing"), std::string::npos) << r.err;
  r = run_cli({"run", "--vram", "1GiB", "--on-lease-lost", "keep", "--on-host-lost", "requeue", "--",
               "true"},
              {}, dir);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("could run the command twice"), std::string::npos) << r.err;
  r = run_cli({"run", "--vram", "1GiB", "--stop-timeout", "soon", "--", "true"}, {}, dir);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--stop-timeout"), std::string::npos) << r.err;
}

TEST(CliRun, TheCommandGetsItsTokenAndASignalReachesItsWholeProcessGroup) {
  DaemonFixture f;
  f.start("");
  auto r = run_cli({"run", "--url", f.url, "--vram", "1GiB", "--", "sh", "-c",
                    "echo token=$VRAMD_LEASE_TOKEN"},
                   f.env(), f.dir);
  ASSERT_EQ(r.code, 0) << r.err;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.out, m, std::regex("token=([0-9]+)"))) << r.out;
  EXPECT_GT(std::stoull(m[1]), 0u);
  // A second grant, a larger token.
  auto again = run_cli({"run", "--url", f.url, "--vram", "1GiB", "--", "sh", "-c",
                        "echo token=$VRAMD_LEASE_TOKEN"},
                       f.env(), f.dir);
  std::smatch m2;
  ASSERT_TRUE(std::regex_search(again.out, m2, std::regex("token=([0-9]+)"))) << again.out;
  EXPECT_GT(std::stoull(m2[1]), std::stoull(m[1]));

  // The command starts a child of its own; a SIGTERM to `vramd run` reaches both.
  std::string pid_file = f.dir.file("grandchild.pid");
  Child run({vramd_bin(), "run", "--url", f.url, "--vram", "1GiB", "--", "sh", "-c",
             fmt::format("sleep 300 & echo $! > {}; wait", pid_file)},
            f.env(), f.dir.file("run.log"));
  int grandchild = 0;
  ASSERT_TRUE(eventually([&] {
    std::ifstream in(pid_file);
    return static_cast<bool>(in >> grandchild) && grandchild > 0;
  })) << slurp(f.dir.file("run.log"));
  ::kill(run.pid(), SIGTERM);
  EXPECT_NE(run.wait_exit(std::chrono::seconds(10)), -1);
  EXPECT_TRUE(eventually([&] { return ::kill(grandchild, 0) != 0; }))
      << "the command's own child outlived the signal";
}

TEST(CliDaemonCall, ApiErrorsPrintTheApiMessageAndExit1) {
  DaemonFixture f;
  f.start("");
  auto r = run_cli({"start", "nosuch", "--url", f.url}, f.env(), f.dir);
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err, "vramd start: no service named 'nosuch'\n");
  r = run_cli({"logs", "nosuch", "--url", f.url}, f.env(), f.dir);
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err, "vramd logs: no service named 'nosuch'\n");
  r = run_cli({"free", "nosuch", "--url", f.url}, f.env(), f.dir);
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err, "vramd: no service named 'nosuch'\n");
}

TEST(CliDaemonCall, EveryClientCommandSaysUnreachableAndExits3) {
  TempDir dir;
  std::string url = dead_url();
  for (std::vector<std::string> args : {std::vector<std::string>{"services"},
                                        {"events"},
                                        {"leases"},
                                        {"jobs"},
                                        {"doctor"},
                                        {"logs", "x"},
                                        {"start", "x"},
                                        {"stop", "x"},
                                        {"free", "x"},
                                        {"run", "--vram", "1GiB", "--", "true"}}) {
    args.insert(args.begin() + 1, {"--url", url});  // before run's "--"
    auto r = run_cli(args, {}, dir);
    EXPECT_EQ(r.code, 3) << args[0] << ": " << r.err;
    EXPECT_NE(r.err.find("vramd: the daemon is not reachable at " + url), std::string::npos)
        << args[0] << ": " << r.err;
  }
}

// `vramd run --vram 12` was granted 12 bytes: a size without a unit is refused before any call.
TEST(CliRun, SizeWithoutAUnitIsRefusedWithTheHint) {
  TempDir dir;
  auto r = run_cli({"run", "--url", dead_url(), "--vram", "12", "--", "true"}, {}, dir);
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_EQ(r.err, "vramd run: --vram: 12: give a unit, e.g. 12GiB\n");
  r = run_cli({"run", "--url", dead_url(), "--vram", "1GiB", "--ram", "8", "--", "true"}, {}, dir);
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_EQ(r.err, "vramd run: --ram: 8: give a unit, e.g. 8GiB\n");
}

TEST(CliDaemonCall, BodyThatIsNotJsonIsAFailure) {
  CannedDaemon d(502, "<html>bad gateway</html>");
  TempDir dir;
  auto r = run_cli({"services", "--url", d.url()}, {}, dir);
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err, "vramd: the daemon answered HTTP 502 with a body that is not JSON\n");
  r = run_cli({"start", "x", "--url", d.url()}, {}, dir);
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err, "vramd: the daemon answered HTTP 502 with a body that is not JSON\n");
}

TEST(CliStart, ForceAsksTheDaemonNotToWaitForGpuRoom) {
  CannedDaemon d(
      200,
      R"({"service":"comfy","action":"start","done":true,"ok":true,"message":"comfy is up","state":"running"})");
  TempDir dir;
  auto r = run_cli({"start", "comfy", "--force", "--url", d.url()}, {}, dir);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "comfy: comfy is up\n");
  r = run_cli({"start", "comfy", "--force", "--wait", "--url", d.url()}, {}, dir);
  EXPECT_EQ(r.code, 0) << r.err;
  r = run_cli({"start", "comfy", "--url", d.url()}, {}, dir);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(d.requests(),
            (std::vector<std::string>{"POST /v1/services/comfy/start?force=true HTTP/1.1",
                                      "POST /v1/services/comfy/start?wait=true&force=true HTTP/1.1",
                                      "POST /v1/services/comfy/start HTTP/1.1"}));
  // Only start waits for GPU room.
  EXPECT_EQ(run_cli({"stop", "comfy", "--force", "--url", d.url()}, {}, dir).code, 2);
}

TEST(CliStart, QueuedStartSaysWhyAndHowNotToWait) {
  CannedDaemon d(
      202,
      R"({"service":"comfy","action":"start","done":false,"ok":false,"message":"","state":"queued"})");
  TempDir dir;
  auto r = run_cli({"start", "comfy", "--url", d.url()}, {}, dir);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("comfy: start under way (state: queued)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("vramd start comfy --force"), std::string::npos) << r.out;
}

TEST(CliServices, ServiceVramdRunsShowsProbeAndProcessState) {
  DaemonFixture f;
  int port = testing::free_port();
  f.start(
      fmt::format("[services.comfy]\nkind = \"comfyui\"\nurl = \"http://127.0.0.1:{}\"\n"
                  "start = [\"{}/fake-gpu-server\", \"--kind\", \"comfyui\", \"--port\", \"{}\", "
                  "\"--state\", \"{}\", "
                  "\"--model-bytes\", \"2GiB\"]\nstop_timeout = \"3s\"\n",
                  port, testing::build_dir(), port, f.state));
  auto r = run_cli({"services", "--url", f.url}, f.env(), f.dir);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("comfy            comfyui    stopped"), std::string::npos) << r.out;
  r = run_cli({"start", "comfy", "--wait", "--url", f.url}, f.env(), f.dir);
  ASSERT_EQ(r.code, 0) << r.err << f.log();
  EXPECT_TRUE(r.out.starts_with("comfy: ")) << r.out;
  ASSERT_TRUE(eventually([&] {
    r = run_cli({"services", "--url", f.url}, f.env(), f.dir);
    return r.out.find("up · running") != std::string::npos;
  })) << r.out;
  r = run_cli({"stop", "comfy", "--wait", "--url", f.url}, f.env(), f.dir);
  EXPECT_EQ(r.code, 0) << r.err;
}

}  // namespace
}  // namespace vramd
