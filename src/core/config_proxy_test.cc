// The request path's keys (issue 12): [proxy] and the per-service proxy keys.
#include <gtest/gtest.h>

#include "core/config.h"

namespace vramd {
// Named, not anonymous: its helpers share a unity batch with other tests' (cmake/unity.cmake).
namespace config_proxy_test {

std::string error_of(std::string_view text) {
  Result<Config> c = parse_config(text, "vramd.toml");
  return c.ok() ? "(ok)" : c.error();
}

TEST(ConfigProxy, ParsesTheFrontDoorAndServiceProxies) {
  Result<Config> c = parse_config(R"toml(
[proxy]
listen = "127.0.0.1:8080"
websocket_idle = "30s"
[proxy.aliases]
"gpt-4o-mini" = "llama3.1:8b"

[services.comfyui]
kind = "comfyui"
url = "http://127.0.0.1:8188"
proxy = "127.0.0.1:8189"
max_concurrent = 2
max_queue = 10
first_byte_timeout = "30s"
wake_timeout = "3m"
)toml",
                                  "vramd.toml");
  ASSERT_TRUE(c) << c.error();
  EXPECT_EQ(c->proxy.listen, "127.0.0.1:8080");
  EXPECT_EQ(c->proxy.websocket_idle, std::chrono::seconds(30));
  EXPECT_EQ(c->proxy.aliases.at("gpt-4o-mini"), "llama3.1:8b");
  const ServiceConfig& s = c->services[0];
  EXPECT_EQ(s.proxy.listen, "127.0.0.1:8189");
  EXPECT_EQ(s.proxy.max_concurrent, 2);
  EXPECT_EQ(s.proxy.max_queue, 10);
  EXPECT_EQ(s.proxy.first_byte_timeout, std::chrono::seconds(30));
  EXPECT_EQ(s.proxy.wake_timeout, std::chrono::minutes(3));
}

TEST(ConfigProxy, DefaultsAreOffAndLoopback) {
  Result<Config> c =
      parse_config("[services.a]\nkind = \"ollama\"\nurl = \"http://127.0.0.1:1\"\n", "vramd.toml");
  ASSERT_TRUE(c);
  EXPECT_TRUE(c->proxy.listen.empty());
  EXPECT_TRUE(c->services[0].proxy.listen.empty());
  EXPECT_EQ(c->services[0].proxy.max_concurrent, 0);
  EXPECT_FALSE(c->services[0].proxy.wake_timeout);
}

TEST(ConfigProxy, BeyondLoopbackNeedsKeys) {
  EXPECT_EQ(error_of("[proxy]\nlisten = \"0.0.0.0:8080\"\n"),
            "vramd.toml:2:10: proxy.listen: 0.0.0.0:8080 is reachable from other hosts; set "
            "[proxy] api_keys or api_keys_file");
  EXPECT_EQ(error_of("[services.a]\nkind = \"ollama\"\nurl = \"http://127.0.0.1:1\"\n"
                     "proxy = \"192.168.1.2:9000\"\n"),
            "vramd.toml:4:9: services.a.proxy: 192.168.1.2:9000 is reachable from other hosts; "
            "set [proxy] api_keys or api_keys_file");
  // Keys given anywhere in the file (after the listen, too) allow it.
  EXPECT_EQ(error_of("[services.a]\nkind = \"ollama\"\nurl = \"http://127.0.0.1:1\"\n"
                     "proxy = \"0.0.0.0:9000\"\n[proxy]\napi_keys = [\"k1\"]\n"),
            "(ok)");
  EXPECT_EQ(error_of("[proxy]\nlisten = \"0.0.0.0:8080\"\napi_keys_file = \"/etc/vramd/keys\"\n"),
            "(ok)");
}

TEST(ConfigProxy, BadValuesSayWhereAndWhy) {
  EXPECT_EQ(error_of("[proxy]\nlisten = \"8080\"\n"),
            "vramd.toml:2:10: proxy.listen: missing port; expected \"host:port\" (got \"8080\")");
  EXPECT_EQ(error_of("[proxy]\napi_keys = [\"a b\"]\n"),
            "vramd.toml:2:13: proxy.api_keys[0]: must be printable ASCII without spaces");
  EXPECT_EQ(error_of("[proxy]\nlistn = \"127.0.0.1:1\"\n"),
            "vramd.toml:2:1: unknown key 'listn' in [proxy]; did you mean 'listen'?");
  EXPECT_EQ(error_of("[services.a]\nkind = \"ollama\"\nurl = \"http://127.0.0.1:1\"\n"
                     "max_concurrent = 0\n"),
            "vramd.toml:4:18: services.a.max_concurrent: expected a whole number, at least 1, "
            "got 0");
  std::string e = error_of(
      "[services.a]\nkind = \"ollama\"\nurl = \"http://127.0.0.1:1\"\nwake_timeout = \"soon\"\n");
  EXPECT_EQ(e.rfind("vramd.toml:4:16: services.a.wake_timeout: ", 0), 0u) << e;
}

}  // namespace config_proxy_test
}  // namespace vramd
