#include "host/cgroup.h"

#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>
#include "test_paths.h"

namespace vramd {
namespace {

using Kind = CgroupIdentity::Kind;

std::string fixture(const std::string& name) {
  std::ifstream in(vramd::test_paths::source_dir() + "/tests/fixtures/cgroup/" + name);
  EXPECT_TRUE(in) << name;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

CgroupIdentity parse_fixture(const std::string& name) { return parse_cgroup(fixture(name)); }

void expect_container(const CgroupIdentity& c, const std::string& runtime, const std::string& id,
                      const std::string& pod_uid = "") {
  EXPECT_EQ(c.kind, Kind::container) << c.path;
  EXPECT_EQ(c.runtime, runtime) << c.path;
  EXPECT_EQ(c.container_id, id) << c.path;
  EXPECT_EQ(c.pod_uid, pod_uid) << c.path;
}

TEST(CgroupTest, DockerCgroupfsV1) {
  auto c = parse_fixture("v1-docker-cgroupfs.txt");
  expect_container(c, "docker", "2a6be028323df68a432e83bef839dd03aa9d5cbbfea297e7affd3e80e17fb9dc");
  EXPECT_EQ(c.path, "/docker/2a6be028323df68a432e83bef839dd03aa9d5cbbfea297e7affd3e80e17fb9dc");
}

TEST(CgroupTest, DockerCgroupfsNestedLastIdWins) {
  expect_container(parse_fixture("v1-docker-nested.txt"), "docker",
                   "6d16b1cf3fdd52b8fbbdc7c25dca3a806abde09c49c92c0911ea6271e3a102ba");
}

TEST(CgroupTest, DockerSystemdV1WithCombinedControllers) {
  expect_container(parse_fixture("v1-docker-systemd.txt"), "docker",
                   "914b644323f9b6ece482b72199caaf88d15e3673944e8c818211cc1f92fb1989");
}

TEST(CgroupTest, DockerSystemdV2) {
  auto c = parse_fixture("v2-docker-systemd.txt");
  expect_container(c, "docker", "59576565839ef5e9ce9b224250d30ea9f8113fee83f0a04d83bbc501284623d9");
  EXPECT_EQ(c.unit, "");
}

TEST(CgroupTest, HostV1AllRootIgnoresLookalikeName) {
  auto c = parse_fixture("v1-host.txt");
  EXPECT_EQ(c.kind, Kind::host);
  EXPECT_EQ(c.path, "/");
}

TEST(CgroupTest, HostV2) {
  auto c = parse_fixture("v2-host.txt");
  EXPECT_EQ(c.kind, Kind::host);
  EXPECT_EQ(c.path, "/");
}

TEST(CgroupTest, PodmanRootful) {
  auto c = parse_fixture("v2-podman-rootful.txt");
  expect_container(c, "podman", "5cdb0a8eca44eb893b72d94ff77d750b0024136e88561bfe87911a6cb0d1a50b");
  expect_container(parse_fixture("v2-podman-rootful-noleaf.txt"), "podman",
                   "5cdb0a8eca44eb893b72d94ff77d750b0024136e88561bfe87911a6cb0d1a50b");
}

TEST(CgroupTest, PodmanConmonIsNotTheContainer) {
  auto c = parse_fixture("v2-podman-conmon.txt");
  EXPECT_EQ(c.kind, Kind::unit);
  EXPECT_EQ(c.container_id, "");
  EXPECT_EQ(c.unit,
            "libpod-conmon-f5835457b5883deeed78aa67bfd9c880421caa71c3d1c6a08eebf62c305f4f0b.scope");
}

TEST(CgroupTest, PodmanRootless) {
  auto c = parse_fixture("v2-podman-rootless.txt");
  expect_container(c, "podman", "3bea85fdd51c1f2ac73955707d6782ed6ac6db85890c38ff9924d5dfcb706e25");
  EXPECT_EQ(c.unit, "");  // user@1000.service is not its direct parent
}

TEST(CgroupTest, PodmanRootlessWithoutTheContainerLeafAndItsConmon) {
  auto c = parse_fixture("v2-podman-rootless-noleaf.txt");
  expect_container(c, "podman", "3bea85fdd51c1f2ac73955707d6782ed6ac6db85890c38ff9924d5dfcb706e25");
  auto conmon = parse_fixture("v2-podman-rootless-conmon.txt");
  EXPECT_EQ(conmon.kind, Kind::unit);
  EXPECT_EQ(conmon.container_id, "");
}

// Podman 4.3 with `--cgroup-manager cgroupfs` (no systemd), as it ran on this project's build
// machine: the container under /libpod_parent/libpod-<id> in every hierarchy, conmon beside it.
TEST(CgroupTest, PodmanCgroupfsManagerHybrid) {
  auto c = parse_fixture("hybrid-podman-cgroupfs.txt");
  expect_container(c, "podman", "2a801fce2850105459408eaa4ca40aea886b447283c4c157ab42765624728472");
  auto conmon = parse_fixture("hybrid-podman-cgroupfs-conmon.txt");
  EXPECT_NE(conmon.kind, Kind::container);
  EXPECT_EQ(conmon.container_id, "");
}

TEST(CgroupTest, PodmanQuadletRecordsUnit) {
  auto c = parse_fixture("v2-podman-quadlet.txt");
  expect_container(c, "podman", "979846c862efe3f4b8c4040609f0f74ede03b72c11829de0051590c36439cfaf");
  EXPECT_EQ(c.unit, "llama-server.service");
}

TEST(CgroupTest, KubernetesSystemdContainerdV2) {
  expect_container(parse_fixture("v2-k8s-containerd.txt"), "containerd",
                   "7e8d336982666877b938386acdc560752f15507cedd46d9f6c1604226bc367b9",
                   "0f9e8d7c-6b5a-4321-9fed-cba987654321");
}

TEST(CgroupTest, KubernetesSystemdCrioV1) {
  expect_container(parse_fixture("v1-k8s-systemd-crio.txt"), "cri-o",
                   "5bd7eb7811d2cc454952a46beb4790e03188fb749cbf22c7b00978c83282eb46",
                   "1a7b3c5d-9e0f-4a2b-8c6d-e4f5a6b7c8d9");
}

TEST(CgroupTest, KubernetesContainerd14ColonForm) {
  auto c = parse_fixture("v1-k8s-containerd-colon.txt");
  expect_container(c, "containerd",
                   "65d06fd502d02ac0b197569f2a8129a2a3caae33813677782c9ed1a19ff99552",
                   "9e2d4c61-3b8a-4f05-a7c2-6d1e8b0f5c39");
  // The name=systemd line was chosen: it is the one under containerd.service.
  EXPECT_TRUE(c.path.starts_with("/system.slice/containerd.service/")) << c.path;
}

TEST(CgroupTest, KubernetesCgroupfs) {
  expect_container(parse_fixture("v1-k8s-cgroupfs.txt"), "",
                   "4b729e455408979b89f8981c93ee8fc684785b841c5cb2381eb7e27d66b2a3bf",
                   "5c1f0a2e-7d3b-4e9a-8f21-0b6c9d4e3a17");
}

TEST(CgroupTest, KubernetesCgroupfsGuaranteedHasNoQos) {
  expect_container(parse_fixture("v1-k8s-cgroupfs-guaranteed.txt"), "",
                   "5aa85de82fe880412af35ea5517478939191a954054227dddc7b6dda7b0827e2",
                   "3e4f5a6b-7c8d-4e9f-a0b1-c2d3e4f5a6b7");
}

TEST(CgroupTest, KindNestedLastContainerWins) {
  expect_container(parse_fixture("v2-kind-nested.txt"), "containerd",
                   "906677bda3bde9beb41e3cbeee79659f5e0baf8424d33328e018fd16b39bd99d",
                   "7d6c5b4a-3f2e-41d0-9c8b-a7f6e5d4c3b2");
}

TEST(CgroupTest, PrivateNamespaceIsNotGuessed) {
  auto c = parse_fixture("v2-private-ns.txt");
  EXPECT_EQ(c.kind, Kind::private_ns);
  EXPECT_EQ(c.container_id, "");
  EXPECT_TRUE(c.path.starts_with("/../docker-"));
}

TEST(CgroupTest, SystemdService) {
  auto c = parse_fixture("v2-systemd-service.txt");
  EXPECT_EQ(c.kind, Kind::unit);
  EXPECT_EQ(c.unit, "comfyui.service");
}

TEST(CgroupTest, Session) {
  auto c = parse_fixture("v2-session.txt");
  EXPECT_EQ(c.kind, Kind::session);
  EXPECT_EQ(c.unit, "session-3.scope");
}

TEST(CgroupTest, UserUnit) {
  auto c = parse_fixture("v2-user-unit.txt");
  EXPECT_EQ(c.kind, Kind::unit);
  EXPECT_EQ(c.unit, "ollama.service");
}

TEST(CgroupTest, HybridPrefersSystemdLine) {
  auto c = parse_fixture("hybrid-service.txt");
  EXPECT_EQ(c.kind, Kind::unit);
  EXPECT_EQ(c.unit, "vllm.service");
}

TEST(CgroupTest, V1MemoryLineWhenNoSystemdLine) {
  expect_container(parse_fixture("v1-memory-only.txt"), "docker",
                   "2a6be028323df68a432e83bef839dd03aa9d5cbbfea297e7affd3e80e17fb9dc");
}

TEST(CgroupTest, EmptyAndMalformedInputIsHost) {
  for (const char* text : {"", "\n", "garbage", "0:", "x:y", "1:memory:relative/path\n", ":::\n"}) {
    auto c = parse_cgroup(text);
    EXPECT_EQ(c.kind, Kind::host) << text;
    EXPECT_EQ(c.container_id, "") << text;
  }
}

TEST(CgroupTest, MalformedLinesAreSkipped) {
  auto c = parse_cgroup("junk\n0::/system.slice/sshd.service\r\n");
  EXPECT_EQ(c.kind, Kind::unit);
  EXPECT_EQ(c.unit, "sshd.service");
}

TEST(CgroupTest, ShortHexSegmentIsNotAContainer) {
  EXPECT_EQ(classify_cgroup_path("/docker/abc123").kind, Kind::host);
  EXPECT_EQ(classify_cgroup_path("/system.slice").kind, Kind::host);
}

TEST(CgroupTest, InitScopeIsAUnit) {
  auto c = classify_cgroup_path("/init.scope");
  EXPECT_EQ(c.kind, Kind::unit);
  EXPECT_EQ(c.unit, "init.scope");
}

}  // namespace
}  // namespace vramd
