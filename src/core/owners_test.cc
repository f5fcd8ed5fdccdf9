#include "core/owners.h"

#include <gtest/gtest.h>

namespace vramd {
namespace {

ProcessInfo proc(int pid, int ppid, std::string comm, std::string cmdline) {
  ProcessInfo p;
  p.pid = pid;
  p.ppid = ppid;
  p.comm = std::move(comm);
  p.cmdline = std::move(cmdline);
  return p;
}

ServiceConfig service(std::string name, std::string url, MatchRule m = {}) {
  ServiceConfig s;
  s.name = std::move(name);
  s.kind = "comfyui";
  s.url = std::move(url);
  s.match = std::move(m);
  return s;
}

TEST(Owners, UrlPort) {
  EXPECT_EQ(url_port("http://127.0.0.1:8188"), 8188);
  EXPECT_EQ(url_port("http://localhost:11434/api"), 11434);
  EXPECT_EQ(url_port("http://[::1]:8000/"), 8000);
  EXPECT_EQ(url_port("http://example"), 80);
  EXPECT_EQ(url_port("https://example/x"), 443);
  EXPECT_EQ(url_port("ftp://x:21"), 0);
  EXPECT_EQ(url_port("http://x:99999"), 0);
}

TEST(Owners, CmdlineRuleNamesTheProcessAndItsDescendants) {
  OwnerResolver r({service("comfyui", "http://127.0.0.1:8188", {.cmdline = "main\\.py.*--port 8188"})});
  HostSnapshot host;
  host.processes = {proc(100, 1, "python3", "python3 main.py --listen --port 8188"),
                    proc(101, 100, "python3", "python3 -c worker"),
                    proc(102, 101, "ffmpeg", "ffmpeg -i x"),
                    proc(200, 1, "python3", "python3 main.py --port 9999")};
  auto owners = r.resolve(host, {});
  EXPECT_EQ(owners[100].owner, (Owner{OwnerKind::service, "comfyui"}));
  EXPECT_EQ(owners[101].owner, (Owner{OwnerKind::service, "comfyui"}));
  EXPECT_EQ(owners[102].owner, (Owner{OwnerKind::service, "comfyui"}));
  EXPECT_EQ(owners[200].owner, (Owner{OwnerKind::process, "python3[200]"}));
  EXPECT_NE(owners[100].evidence.find("cmdline"), std::string::npos);
}

TEST(Owners, TheMpsServerIsAnOwnerOfItsOwnAndItsClientsAreTheirs) {
  // A service whose start script runs the MPS control daemon: the server (its child) is still
  // not the service's, while a client the service runs is.
  OwnerResolver r({service("comfyui", "http://127.0.0.1:8188", {.cmdline = "main\\.py"})});
  HostSnapshot host;
  host.processes = {proc(100, 1, "python3", "python3 main.py --port 8188"),
                    proc(110, 100, "nvidia-cuda-mps", "nvidia-cuda-mps-control -d"),
                    proc(111, 110, "nvidia-cuda-mps", "/usr/bin/nvidia-cuda-mps-server"),
                    proc(120, 100, "python3", "python3 worker.py")};
  auto owners = r.resolve(host, {});
  EXPECT_EQ(owners[111].owner, (Owner{OwnerKind::process, "nvidia-cuda-mps-server[111]"}));
  EXPECT_EQ(owners[120].owner, (Owner{OwnerKind::service, "comfyui"}));
  EXPECT_EQ(owners[110].owner, (Owner{OwnerKind::service, "comfyui"}));  // holds no GPU memory
  EXPECT_FALSE(is_mps_server(proc(1, 0, "nvidia-cuda-mps", "nvidia-cuda-mps-control -d")));
}

TEST(Owners, WithoutMatchTheListenerOnTheUrlPortIsTheService) {
  OwnerResolver r({service("ollama", "http://127.0.0.1:11434")});
  EXPECT_EQ(r.ports_wanted(), std::vector<int>{11434});
  HostSnapshot host;
  host.processes = {proc(50, 1, "ollama", "ollama serve"), proc(51, 50, "ollama_llama_se", "runner")};
  host.listeners = {{11434, 50}};
  auto owners = r.resolve(host, {});
  EXPECT_EQ(owners[51].owner.name, "ollama");
  EXPECT_EQ(owners[51].owner.kind, OwnerKind::service);
}

TEST(Owners, ContainerUnitAndComposeRules) {
  OwnerResolver r({service("a", "http://x:1", {.container = "comfy"}),
                   service("b", "http://x:2", {.compose_service = "ollama"}),
                   service("c", "http://x:3", {.unit = "vllm.service"}),
                   service("d", "http://x:4", {.pid_file = "/run/d.pid"})});
  HostSnapshot host;
  auto p1 = proc(1001, 1, "python3", "x");
  p1.cgroup.kind = CgroupIdentity::Kind::container;
  p1.cgroup.container_id = std::string(64, 'a');
  p1.cgroup.container_name = "comfy";
  auto p2 = proc(1002, 1, "ollama", "y");
  p2.cgroup.kind = CgroupIdentity::Kind::container;
  p2.cgroup.container_id = std::string(64, 'b');
  p2.cgroup.compose_service = "ollama";
  auto p3 = proc(1003, 1, "python3", "z");
  p3.cgroup.kind = CgroupIdentity::Kind::unit;
  p3.cgroup.unit = "vllm.service";
  auto p4 = proc(1004, 1, "llama-server", "w");
  host.processes = {p1, p2, p3, p4};
  host.pid_files = {{"d", 1004}};
  EXPECT_EQ(r.pid_files_wanted().size(), 1u);
  auto owners = r.resolve(host, {});
  EXPECT_EQ(owners[1001].owner.name, "a");
  EXPECT_EQ(owners[1002].owner.name, "b");
  EXPECT_EQ(owners[1003].owner.name, "c");
  EXPECT_EQ(owners[1004].owner.name, "d");
}

TEST(Owners, UnmatchedProcessesAreNamedByContainerThenUnitThenProcess) {
  OwnerResolver r({});
  HostSnapshot host;
  auto c = proc(1, 0, "python3", "x");
  c.cgroup.kind = CgroupIdentity::Kind::container;
  c.cgroup.container_id = "0123456789abcdef0123";
  auto named = proc(2, 0, "python3", "x");
  named.cgroup.kind = CgroupIdentity::Kind::container;
  named.cgroup.container_id = "ffff";
  named.cgroup.container_name = "whisperx";
  auto u = proc(3, 0, "python3", "x");
  u.cgroup.kind = CgroupIdentity::Kind::unit;
  u.cgroup.unit = "sdnext.service";
  auto priv = proc(4, 0, "python3", "x");
  priv.cgroup.kind = CgroupIdentity::Kind::private_ns;
  host.processes = {c, named, u, priv};
  auto owners = r.resolve(host, {});
  EXPECT_EQ(owners[1].owner, (Owner{OwnerKind::container, "0123456789ab"}));
  EXPECT_EQ(owners[2].owner, (Owner{OwnerKind::container, "whisperx"}));
  EXPECT_EQ(owners[3].owner, (Owner{OwnerKind::unit, "sdnext.service"}));
  EXPECT_EQ(owners[4].owner, (Owner{OwnerKind::process, "python3[4]"}));
  EXPECT_NE(owners[4].evidence.find("private cgroup namespace"), std::string::npos);
}

TEST(Owners, ManagedTreeBeatsMatchBeatsLease) {
  OwnerResolver r({service("comfyui", "http://x:1", {.cmdline = "main\\.py"})});
  HostSnapshot host;
  host.processes = {proc(10, 1, "vramd-child", "python3 main.py"), proc(11, 10, "python3", "python3 main.py"),
                    proc(20, 1, "job", "python3 main.py --job")};
  OwnerHints hints;
  hints.managed = {{"managed-svc", 10}};
  hints.lease_pids = {{"lease-7", 20}};
  auto owners = r.resolve(host, hints);
  EXPECT_EQ(owners[10].owner.name, "managed-svc");
  EXPECT_EQ(owners[11].owner.name, "managed-svc");
  EXPECT_EQ(owners[20].owner.name, "comfyui");  // the match rule is more specific than a lease
}

}  // namespace
}  // namespace vramd
