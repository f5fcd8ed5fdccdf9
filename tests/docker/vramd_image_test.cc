// vramd itself in a container (packaging/docker/): the image is built by `docker build` from
// the project's Dockerfile on a locally imported base (no registry), and `vramd status` and
// `vramd discover` run in it with the host's pid namespace against the test GPU.
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "docker/docker_engine.h"
#include "integration/daemon_fixture.h"
#include "integration/test_util.h"

namespace vramd {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::DaemonFixture;
using testing::docker_engine;
using testing::eventually;

// The binary the image ships: `make dist`'s when there is one, else this build's (stripped:
// the image is copied whole by the vfs driver).
std::string vramd_for_image(const std::string& dir) {
  std::string dist = testing::source_dir() + "/dist/vramd";
  if (fs::exists(dist)) return dist;
  std::string out = dir + "/vramd";
  std::string cmd = fmt::format("strip -o '{}' '{}/vramd' 2>&1", out, testing::build_dir());
  if (std::system(cmd.c_str()) != 0) fs::copy_file(testing::build_dir() + "/vramd", out);
  return out;
}

// The JSON object in a command's output (its stderr, here with it, may say more around it).
json object_in(const std::string& out) {
  auto first = out.find('{'), last = out.rfind('}');
  if (first == std::string::npos || last == std::string::npos || last < first) return json();
  return json::parse(out.substr(first, last - first + 1), nullptr, false);
}

TEST(VramdImage, BuildsFromTheDockerfileAndNamesTheHostsContainersFromInside) {
  auto& engine = docker_engine();
  engine.remove_all_containers();
  testing::TempDir work;
  std::string binary = vramd_for_image(work.path());
  // The base: a bare root with what this vramd binary and the fake NVML link (dist/vramd needs
  // only glibc; debian:bookworm-slim has that).
  std::string fake_nvml = testing::build_dir() + "/libnvidia-ml-fake.so";
  ASSERT_EQ(engine.import_rootfs("vramd-test:base", {binary, fake_nvml}), "");
  // The build context, laid out as the repository is.
  fs::path ctx = work.path() + "/ctx";
  fs::create_directories(ctx / "dist");
  fs::create_directories(ctx / "packaging/docker");
  fs::copy_file(binary, ctx / "dist/vramd");
  for (const char* f : {"Dockerfile", "vramd.toml"})
    fs::copy_file(testing::source_dir() + "/packaging/docker/" + f, ctx / "packaging/docker" / f);
  auto built = engine.cli({"build", "-q", "--build-arg", "BASE=vramd-test:base", "-t",
                           "vramd-test:vramd", "-f", (ctx / "packaging/docker/Dockerfile").string(),
                           ctx.string()});
  ASSERT_EQ(built.code, 0) << built.out;

  // A GPU service in a container beside it.
  DaemonFixture f;
  int port = testing::free_port();
  auto run = engine.cli({"run", "-d", "--name", "vt-beside", "--network", "host", "--pid", "host",
                         "-v", f.dir.path() + ":" + f.dir.path(), testing::DockerEngine::kImage,
                         "/opt/fake-gpu-server", "--kind", "comfyui", "--port",
                         std::to_string(port), "--state", f.state, "--model-bytes", "6GiB"});
  ASSERT_EQ(run.code, 0) << run.out;
  ASSERT_TRUE(eventually([&] {
    return testing::slurp(f.state).find("6442450944") != std::string::npos;
  })) << testing::slurp(f.state);

  // vramd as compose.yaml runs it: the host's pids and cgroups, the Docker socket, NVML (here
  // the test GPU's library where the NVIDIA runtime would mount the real one).
  auto in_image = [&](std::vector<std::string> args) {
    std::vector<std::string> cmd = {"run", "--rm", "--pid", "host", "--cgroupns", "host",
                                    "--network", "host",
                                    "-v", engine.socket() + ":/var/run/docker.sock",
                                    "-v", fake_nvml + ":/usr/lib/libnvidia-ml.so.1:ro",
                                    "-v", f.dir.path() + ":" + f.dir.path(),
                                    "-e", "VRAMD_NVML_LIBRARY=/usr/lib/libnvidia-ml.so.1",
                                    "-e", "FAKE_NVML_STATE=" + f.state,
                                    "vramd-test:vramd"};
    cmd.insert(cmd.end(), args.begin(), args.end());
    return engine.cli(cmd);
  };
  // No daemon at this address: `status` takes its one sample in the container.
  auto status = in_image({"status", "--json", "--url",
                          fmt::format("http://127.0.0.1:{}", testing::free_port())});
  ASSERT_EQ(status.code, 0) << status.out;
  json s = object_in(status.out);
  ASSERT_TRUE(s.is_object()) << status.out;
  bool named = false;
  for (const auto& h : s["gpus"][0]["holdings"])
    if (h.value("owner", "") == "vt-beside" && h.value("bytes", Bytes{0}) == 6 * GiB) named = true;
  EXPECT_TRUE(named) << s.dump(2);

  auto discover = in_image({"discover", "--json"});
  ASSERT_EQ(discover.code, 0) << discover.out;
  json d = object_in(discover.out);
  ASSERT_TRUE(d.is_object()) << discover.out;
  ASSERT_EQ(d["services"].size(), 1u) << d.dump(2);
  EXPECT_EQ(d["services"][0]["kind"], "comfyui");
  EXPECT_EQ(d["services"][0]["url"], fmt::format("http://127.0.0.1:{}", port));
  EXPECT_EQ(d["services"][0]["match"], json({{"container", "vt-beside"}})) << d.dump(2);
  engine.remove_all_containers();
}

}  // namespace
}  // namespace vramd
