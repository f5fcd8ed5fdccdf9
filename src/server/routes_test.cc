// The API's route matcher: patterns, parameters, the Allow header.
#include "server/routes.h"

#include <gtest/gtest.h>

namespace vramd {
namespace routes_test {

namespace http = boost::beast::http;

TEST(Routes, LiteralPathsMatchWholly) {
  PathParams p;
  EXPECT_TRUE(match_path("/v1/status", "/v1/status", p));
  EXPECT_EQ(p.size, 0u);
  EXPECT_FALSE(match_path("/v1/status", "/v1/status/", p));
  EXPECT_FALSE(match_path("/v1/status", "/v1/statu", p));
  EXPECT_FALSE(match_path("/v1/history", "/v1/history/records", p));
  EXPECT_FALSE(match_path("/v1/status", "", p));
}

TEST(Routes, AParameterIsOneWholeNonEmptySegment) {
  PathParams p;
  ASSERT_TRUE(match_path("/v1/services/{name}/unload", "/v1/services/comfyui/unload", p));
  ASSERT_EQ(p.size, 1u);
  EXPECT_EQ(p.values[0], "comfyui");
  ASSERT_TRUE(match_path("/v1/services/{name}", "/v1/services/comfyui", p));
  EXPECT_EQ(p.values[0], "comfyui");
  EXPECT_FALSE(match_path("/v1/services/{name}", "/v1/services/", p));
  EXPECT_FALSE(match_path("/v1/services/{name}", "/v1/services/a/b", p));
  EXPECT_FALSE(match_path("/v1/services/{name}/unload", "/v1/services//unload", p));
  EXPECT_FALSE(match_path("/v1/leases/{id}/heartbeat", "/v1/leases/7/heartbeats", p));
  ASSERT_TRUE(match_path("/v1/leases/{id}/heartbeat", "/v1/leases/7/heartbeat", p));
  EXPECT_EQ(p.values[0], "7");
  ASSERT_TRUE(match_path("/x/{a}/{b}", "/x/1/two", p));
  ASSERT_EQ(p.size, 2u);
  EXPECT_EQ(p.values[1], "two");
  EXPECT_FALSE(match_path("/x/{a}/{b}/{c}", "/x/1/2/3", p)) << "more parameters than it holds";
}

TEST(Routes, HeadIsAllowedWhereGetIs) {
  EXPECT_TRUE(method_in(http::verb::head, kGet));
  EXPECT_TRUE(method_in(http::verb::get, kGet | kPost));
  EXPECT_FALSE(method_in(http::verb::head, kPost));
  EXPECT_FALSE(method_in(http::verb::put, kGet | kPost | kDelete));
  EXPECT_TRUE(method_in(http::verb::delete_, kGet | kDelete));
  EXPECT_EQ(allow_header(kGet), "GET, HEAD");
  EXPECT_EQ(allow_header(kPost), "POST");
  EXPECT_EQ(allow_header(kGet | kDelete), "GET, HEAD, DELETE");
  EXPECT_EQ(methods_text(kGet | kPost), "GET, POST");
}

}  // namespace routes_test
}  // namespace vramd
