#include "cli/daemon_call.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cli/commands.h"

namespace vramd {
namespace {

using nlohmann::json;

TEST(ApiMessage, ErrorObjectThenTopLevelMessage) {
  EXPECT_EQ(
      api_message(json{{"error", {{"code", "not_found"}, {"message", "no service named 'x'"}}}}),
      "no service named 'x'");
  EXPECT_EQ(api_message(json{{"error", "plain"}}), "plain");
  EXPECT_EQ(api_message(json{{"message", "started"}, {"ok", true}}), "started");
  EXPECT_EQ(api_message(json{{"error", {{"code", "x"}}}, {"message", "m"}}), "m");
  EXPECT_EQ(api_message(json::array()), "");
  EXPECT_EQ(api_message(json(nullptr)), "");
}

TEST(DaemonClient, NobodyListeningIsUnreachableExit3) {
  // A port that was free a moment ago: bound, then closed, nothing listens.
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  close(fd);
  std::string url = "http://127.0.0.1:" + std::to_string(ntohs(addr.sin_port));
  DaemonClient client({url}, "");
  DaemonCall c = client.request("GET", "/v1/status", "", 2000);
  EXPECT_EQ(c.code, kExitUnreachable);
  EXPECT_FALSE(c.reached());
  EXPECT_TRUE(c.body.is_null());
  EXPECT_TRUE(c.error.starts_with("the daemon is not reachable at " + url + ": ")) << c.error;
  int code = -1;
  EXPECT_FALSE(client.call("GET", "/v1/status", code, "", 2000).has_value());
  EXPECT_EQ(code, kExitUnreachable);
}

TEST(DaemonClient, NoSuchSocketIsUnreachable) {
  DaemonClient client({"unix:/nonexistent/vramd.sock"}, "");
  DaemonCall c = client.request("GET", "/v1/status");
  EXPECT_EQ(c.code, kExitUnreachable);
  EXPECT_NE(c.error.find("/nonexistent/vramd.sock"), std::string::npos) << c.error;
}

}  // namespace
}  // namespace vramd
