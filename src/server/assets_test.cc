#include "server/assets.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "web_assets.h"

namespace vramd {
namespace {

namespace http = boost::beast::http;

HttpRequest request(http::verb method, const std::string& target) {
  HttpRequest req{method, target, 11};
  req.set(http::field::host, "127.0.0.1:7100");
  return req;
}

HttpRequest get(const std::string& target) { return request(http::verb::get, target); }

std::string header(const HttpResponse& res, std::string_view name) {
  return std::string(res[name]);
}

std::string error_code(const HttpResponse& res) {
  auto j = nlohmann::json::parse(res.body(), nullptr, false);
  if (j.is_discarded() || !j.contains("error")) return "(not an error body: " + res.body() + ")";
  return j["error"]["code"].get<std::string>();
}

TEST(Assets, EveryDashboardFileIsEmbedded) {
  for (const char* name :
       {"index.html", "app.js", "style.css", "favicon.svg", "uPlot.iife.min.js", "uPlot.min.css"}) {
    bool found = false;
    for (size_t i = 0; i < kWebAssetCount; ++i) found |= kWebAssets[i].name == name;
    EXPECT_TRUE(found) << name;
  }
}

TEST(Assets, RootServesIndexHtmlWithSecurityHeaders) {
  auto res = serve_asset(get("/"));
  ASSERT_TRUE(res);
  EXPECT_EQ(res->result_int(), 200u);
  EXPECT_EQ(header(*res, "Content-Type"), "text/html; charset=utf-8");
  EXPECT_NE(res->body().find("<title>vramd</title>"), std::string::npos);
  EXPECT_EQ(header(*res, "Cache-Control"), "no-cache");
  EXPECT_EQ(header(*res, "X-Content-Type-Options"), "nosniff");
  std::string csp = header(*res, "Content-Security-Policy");
  EXPECT_NE(csp.find("default-src 'self'"), std::string::npos) << csp;
  EXPECT_NE(csp.find("script-src 'self'"), std::string::npos) << csp;
  EXPECT_EQ(csp.find("unsafe-inline"), std::string::npos) << csp;
  EXPECT_EQ(csp.find("unsafe-eval"), std::string::npos) << csp;
  EXPECT_FALSE(header(*res, "ETag").empty());
}

TEST(Assets, QueryStringIsIgnored) {
  auto res = serve_asset(get("/?window=1h"));
  ASSERT_TRUE(res);
  EXPECT_EQ(res->result_int(), 200u);
  EXPECT_EQ(header(*res, "Content-Type"), "text/html; charset=utf-8");
}

TEST(Assets, AssetsHaveTheirContentTypes) {
  struct Case {
    const char* path;
    const char* type;
  };
  for (auto c : {Case{"/assets/app.js", "text/javascript; charset=utf-8"},
                 Case{"/assets/style.css", "text/css; charset=utf-8"},
                 Case{"/assets/uPlot.iife.min.js", "text/javascript; charset=utf-8"},
                 Case{"/assets/uPlot.min.css", "text/css; charset=utf-8"},
                 Case{"/assets/favicon.svg", "image/svg+xml"}}) {
    auto res = serve_asset(get(c.path));
    ASSERT_TRUE(res) << c.path;
    EXPECT_EQ(res->result_int(), 200u) << c.path;
    EXPECT_EQ(header(*res, "Content-Type"), c.type) << c.path;
    EXPECT_FALSE(res->body().empty()) << c.path;
  }
}

TEST(Assets, BundledUplotIsTheBrowserBuild) {
  auto res = serve_asset(get("/assets/uPlot.iife.min.js"));
  ASSERT_TRUE(res);
  // The IIFE build defines the global the dashboard uses; the ESM build would not.
  EXPECT_NE(res->body().find("uPlot"), std::string::npos);
  EXPECT_EQ(res->body().find("export default"), std::string::npos);
}

TEST(Assets, NotDashboardPathsAreLeftToTheApi) {
  EXPECT_FALSE(serve_asset(get("/metrics")));
  EXPECT_FALSE(serve_asset(get("/favicon.ico")));
  EXPECT_FALSE(serve_asset(get("/assets")));
}

TEST(Assets, UnknownAssetIs404Json) {
  auto res = serve_asset(get("/assets/nope.js"));
  ASSERT_TRUE(res);
  EXPECT_EQ(res->result_int(), 404u);
  EXPECT_EQ(header(*res, "Content-Type"), "application/json");
  EXPECT_EQ(error_code(*res), "not_found");
}

TEST(Assets, TraversalIs404Json) {
  for (const char* path : {"/assets/../index.html", "/assets/..%2fapp.js", "/assets/%2e%2e/app.js",
                           "/assets/%2E%2E/app.js", "/assets/sub/app.js", "/../etc/passwd",
                           "/assets/..\\app.js", "/%2e%2e/etc/passwd"}) {
    auto res = serve_asset(get(path));
    ASSERT_TRUE(res) << path;
    EXPECT_EQ(res->result_int(), 404u) << path;
    EXPECT_EQ(error_code(*res), "not_found") << path;
  }
}

TEST(Assets, OnlyGetAndHead) {
  for (auto verb : {http::verb::post, http::verb::put, http::verb::delete_}) {
    auto res = serve_asset(request(verb, "/"));
    ASSERT_TRUE(res);
    EXPECT_EQ(res->result_int(), 405u);
    EXPECT_EQ(error_code(*res), "method_not_allowed");
    EXPECT_EQ(header(*res, "Allow"), "GET, HEAD");
  }
}

TEST(Assets, HeadHasHeadersWithoutBody) {
  auto res = serve_asset(request(http::verb::head, "/assets/app.js"));
  ASSERT_TRUE(res);
  EXPECT_EQ(res->result_int(), 200u);
  EXPECT_EQ(header(*res, "Content-Type"), "text/javascript; charset=utf-8");
  EXPECT_FALSE(header(*res, "ETag").empty());
  EXPECT_TRUE(res->body().empty());
}

TEST(Assets, MatchingIfNoneMatchIs304) {
  auto first = serve_asset(get("/assets/app.js"));
  ASSERT_TRUE(first);
  std::string etag = header(*first, "ETag");
  ASSERT_EQ(etag.front(), '"');
  for (const std::string& sent : {etag, "W/" + etag, "\"other\", " + etag, std::string("*")}) {
    auto req = get("/assets/app.js");
    req.set(http::field::if_none_match, sent);
    auto res = serve_asset(req);
    ASSERT_TRUE(res);
    EXPECT_EQ(res->result_int(), 304u) << sent;
    EXPECT_TRUE(res->body().empty()) << sent;
    EXPECT_EQ(header(*res, "ETag"), etag) << sent;
  }
  auto req = get("/assets/app.js");
  req.set(http::field::if_none_match, "\"stale\"");
  auto res = serve_asset(req);
  ASSERT_TRUE(res);
  EXPECT_EQ(res->result_int(), 200u);
}

TEST(Assets, EachFileHasItsOwnEtag) {
  auto a = serve_asset(get("/assets/app.js"));
  auto b = serve_asset(get("/assets/style.css"));
  ASSERT_TRUE(a && b);
  EXPECT_NE(header(*a, "ETag"), header(*b, "ETag"));
}

// The CSP forbids inline scripts: index.html must load all of its JS from files.
TEST(Assets, IndexHtmlHasNoInlineScript) {
  auto res = serve_asset(get("/"));
  ASSERT_TRUE(res);
  const std::string& html = res->body();
  for (size_t at = html.find("<script"); at != std::string::npos;
       at = html.find("<script", at + 1)) {
    size_t end = html.find('>', at);
    std::string tag = html.substr(at, end - at);
    EXPECT_NE(tag.find(" src="), std::string::npos) << tag;
    EXPECT_EQ(html.compare(end + 1, 9, "</script>"), 0) << "a script with a body: " << tag;
  }
  EXPECT_EQ(html.find(" onclick="), std::string::npos);
  EXPECT_EQ(html.find(" style="), std::string::npos);
}

}  // namespace
}  // namespace vramd
