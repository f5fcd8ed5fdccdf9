// vramd_docker_tests: one private dockerd for the whole run (docker_engine.h). Where the machine
// cannot have one (not root, the packages not installed), every test is skipped with the
// reason: exit 77, which ctest shows as a skip. An engine that is installed and does not start
// fails the run, with its log: a skip there would read as a pass.
#include <cstdio>

#include <gtest/gtest.h>

#include "docker/docker_engine.h"

namespace {

class EngineEnvironment : public ::testing::Environment {
 public:
  void TearDown() override { vramd::testing::docker_engine().stop(); }
};

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  auto& engine = vramd::testing::docker_engine();
  if (!engine.start()) {
    if (engine.unavailable()) {
      std::printf("SKIP: the container tests need a private Docker Engine: %s\n",
                  engine.why().c_str());
      return 77;
    }
    std::printf("FAIL: the private %s is installed but did not start: %s\n",
                engine.podman() ? "podman service" : "dockerd", engine.why().c_str());
    return 1;
  }
  std::printf("private %s on %s\n", engine.podman() ? "podman service" : "dockerd",
              engine.socket().c_str());
  ::testing::AddGlobalTestEnvironment(new EngineEnvironment);
  return RUN_ALL_TESTS();
}
