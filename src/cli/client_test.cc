#include "cli/client.h"

#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

namespace vramd {
namespace {

TEST(ClientToken, FromTokenOrTokenFile) {
  DaemonConfig d;
  EXPECT_EQ(client_token(d), "");
  d.token = "abc";
  EXPECT_EQ(client_token(d), "abc");

  std::string path = ::testing::TempDir() + "/vramd-client-token-" + std::to_string(::getpid());
  std::ofstream(path) << "from-file\n";
  DaemonConfig f;
  f.token_file = path;
  EXPECT_EQ(client_token(f), "from-file");
  std::remove(path.c_str());
  // Unreadable (here: gone): no token; the unix socket or the daemon's 401 says the rest.
  EXPECT_EQ(client_token(f), "");
}

}  // namespace
}  // namespace vramd
