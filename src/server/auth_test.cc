#include "server/auth.h"

#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

namespace vramd {
// Named, not anonymous: its helpers share a unity batch with other tests' (cmake/unity.cmake).
namespace auth_test {

namespace http = boost::beast::http;

HttpRequest request(http::verb method, const std::string& target, const std::string& host = "127.0.0.1:7100") {
  HttpRequest req{method, target, 11};
  if (!host.empty()) req.set(http::field::host, host);
  return req;
}

HttpSecurity with_token(const std::string& token = "s3cret-token") { return {.enabled = true, .token = token}; }
const HttpSecurity kNoToken{.enabled = true, .token = ""};

// "(ok)" when the request may go on, else "STATUS code: message".
std::string verdict(const HttpRequest& req, const HttpSecurity& security, bool over_tcp = true) {
  auto res = check_request(req, security, over_tcp);
  if (!res) return "(ok)";
  auto body = nlohmann::json::parse(res->body(), nullptr, false);
  if (body.is_discarded() || !body.contains("error")) return "not JSON: " + res->body();
  return std::to_string(res->result_int()) + " " + body["error"]["code"].get<std::string>() + ": " +
         body["error"]["message"].get<std::string>();
}
std::string status_code(const HttpRequest& req, const HttpSecurity& security, bool over_tcp = true) {
  std::string v = verdict(req, security, over_tcp);
  return v.substr(0, v.find(':'));
}

TEST(TokensEqual, OnlyTheSameBytes) {
  EXPECT_TRUE(tokens_equal("abcdef", "abcdef"));
  EXPECT_FALSE(tokens_equal("xbcdef", "abcdef"));
  EXPECT_FALSE(tokens_equal("abcdex", "abcdef"));
  EXPECT_FALSE(tokens_equal("abcde", "abcdef"));    // a prefix
  EXPECT_FALSE(tokens_equal("abcdefg", "abcdef"));  // longer
  EXPECT_FALSE(tokens_equal(std::string("abcdef\0", 7), "abcdef"));  // padded with the loop's zero
  EXPECT_FALSE(tokens_equal("", "abcdef"));
  EXPECT_FALSE(tokens_equal("", ""));  // no token is never a match
}

TEST(BearerOk, SchemeInAnyCase) {
  EXPECT_TRUE(bearer_ok("Bearer tok", "tok"));
  EXPECT_TRUE(bearer_ok("bearer tok", "tok"));
  EXPECT_TRUE(bearer_ok("BEARER  tok ", "tok"));
  EXPECT_FALSE(bearer_ok("Basic tok", "tok"));
  EXPECT_FALSE(bearer_ok("Bearertok", "tok"));
  EXPECT_FALSE(bearer_ok("Bearer", "tok"));
  EXPECT_FALSE(bearer_ok("Bearer ", "tok"));
  EXPECT_FALSE(bearer_ok("Bearer tok2", "tok"));
  EXPECT_FALSE(bearer_ok("Bearer to", "tok"));
  EXPECT_FALSE(bearer_ok("tok", "tok"));
  EXPECT_FALSE(bearer_ok("Bearer tok tok", "tok"));
}

TEST(IsLoopbackHostHeader, Forms) {
  for (const char* h : {"localhost", "localhost:7100", "127.0.0.1:7100", "127.0.0.1", "[::1]:7100",
                        "[::1]", "LOCALHOST:80"}) {
    EXPECT_TRUE(is_loopback_host_header(h)) << h;
  }
  for (const char* h : {"", "evil.example", "evil.example:7100", "0.0.0.0:7100", "[::]:7100",
                        "localhost.evil.example:7100", "127.0.0.1.evil.example", "10.1.2.3:7100"}) {
    EXPECT_FALSE(is_loopback_host_header(h)) << h;
  }
}

TEST(IsPublicPath, OnlyDashboardFiles) {
  EXPECT_TRUE(is_public_path("/"));
  EXPECT_TRUE(is_public_path("/assets/app.js"));
  EXPECT_TRUE(is_public_path("/index.html"));
  EXPECT_FALSE(is_public_path("/v1/status"));
  EXPECT_FALSE(is_public_path("/metrics"));
  EXPECT_FALSE(is_public_path("/assets"));
  EXPECT_FALSE(is_public_path("/index.htm"));
  EXPECT_FALSE(is_public_path(""));
}

TEST(CheckRequest, OffForPlainServers) {
  EXPECT_EQ(verdict(request(http::verb::post, "/v1/free", "evil.example"), HttpSecurity{}), "(ok)");
}

TEST(CheckRequest, UnixSocketNeedsNothing) {
  HttpRequest req = request(http::verb::post, "/v1/free?idle=true", "localhost");
  req.set(http::field::origin, "http://evil.example");
  EXPECT_EQ(verdict(req, with_token(), /*over_tcp=*/false), "(ok)");
  EXPECT_EQ(verdict(req, kNoToken, /*over_tcp=*/false), "(ok)");
}

TEST(CheckRequest, Http11WithoutHostIsBad) {
  EXPECT_EQ(verdict(request(http::verb::get, "/v1/status", ""), kNoToken),
            "400 bad_request: an HTTP/1.1 request needs a Host header");
  EXPECT_EQ(status_code(request(http::verb::get, "/v1/status", ""), with_token()), "400 bad_request");
}

TEST(CheckRequest, DnsRebindingHostRefusedWithoutToken) {
  EXPECT_EQ(verdict(request(http::verb::get, "/v1/status", "evil.example"), kNoToken),
            "403 forbidden: Host header 'evil.example' is not this daemon's address; use localhost, "
            "127.0.0.1 or [::1] (or set daemon.token to listen beyond loopback)");
  EXPECT_EQ(status_code(request(http::verb::get, "/", "evil.example:7100"), kNoToken), "403 forbidden");
  EXPECT_EQ(status_code(request(http::verb::get, "/v1/status", "0.0.0.0:7100"), kNoToken), "403 forbidden");
  for (const char* host : {"127.0.0.1:7100", "localhost:7100", "[::1]:7100", "127.0.0.1"}) {
    EXPECT_EQ(verdict(request(http::verb::get, "/v1/status", host), kNoToken), "(ok)") << host;
  }
}

// Header values may carry any byte; the refusal must still be JSON, not an exception.
TEST(CheckRequest, InvalidUtf8InHeadersAnsweredNotThrown) {
  EXPECT_EQ(status_code(request(http::verb::get, "/v1/status", "\xff\xfe.example"), kNoToken), "403 forbidden");
  HttpRequest req = request(http::verb::post, "/v1/free");
  req.set(http::field::origin, "http://\xff");
  EXPECT_EQ(status_code(req, kNoToken), "403 forbidden");
}

TEST(CheckRequest, WithTokenAnyHostName) {
  // Beyond loopback the daemon is reached by its LAN name; the token is the guard.
  HttpRequest req = request(http::verb::get, "/v1/status", "gpu-box:7100");
  req.set(http::field::authorization, "Bearer s3cret-token");
  EXPECT_EQ(verdict(req, with_token()), "(ok)");
}

TEST(CheckRequest, CrossOriginMutationRefused) {
  for (auto method : {http::verb::post, http::verb::delete_, http::verb::put}) {
    HttpRequest req = request(method, "/v1/free?idle=true");
    req.set(http::field::origin, "http://evil.example");
    EXPECT_EQ(verdict(req, kNoToken),
              "403 forbidden: cross-origin request from 'http://evil.example' refused: Origin is not "
              "'127.0.0.1:7100'");
  }
  for (const char* origin : {"null", "http://localhost:7100", "http://127.0.0.1", "https://127.0.0.1",
                             "http://127.0.0.1:7101", "http://127.0.0.1:7100/x", "file://"}) {
    HttpRequest req = request(http::verb::post, "/v1/free?idle=true");
    req.set(http::field::origin, origin);
    EXPECT_EQ(status_code(req, kNoToken), "403 forbidden") << origin;
  }
}

TEST(CheckRequest, SameOriginMutationAndForeignReadPass) {
  HttpRequest post = request(http::verb::post, "/v1/free?idle=true");
  post.set(http::field::origin, "http://127.0.0.1:7100");
  EXPECT_EQ(verdict(post, kNoToken), "(ok)");
  HttpRequest v6 = request(http::verb::delete_, "/v1/leases/3", "[::1]:7100");
  v6.set(http::field::origin, "http://[::1]:7100");
  EXPECT_EQ(verdict(v6, kNoToken), "(ok)");
  HttpRequest port80 = request(http::verb::post, "/v1/free", "localhost");
  port80.set(http::field::origin, "http://LOCALHOST");
  EXPECT_EQ(verdict(port80, kNoToken), "(ok)");
  HttpRequest proxied = request(http::verb::post, "/v1/free", "gpu.example.org");  // TLS proxy
  proxied.set(http::field::origin, "https://gpu.example.org");
  proxied.set(http::field::authorization, "Bearer s3cret-token");
  EXPECT_EQ(verdict(proxied, with_token()), "(ok)");
  HttpRequest no_origin = request(http::verb::post, "/v1/free");  // curl, the CLI
  EXPECT_EQ(verdict(no_origin, kNoToken), "(ok)");
  // Browsers keep cross-origin reads from the page (no CORS headers here).
  HttpRequest get = request(http::verb::get, "/v1/status");
  get.set(http::field::origin, "http://evil.example");
  EXPECT_EQ(verdict(get, kNoToken), "(ok)");
}

TEST(CheckRequest, TokenRequiredOnApiAndMetrics) {
  for (const char* target : {"/v1/status", "/metrics", "/v1/leases", "/nothing-here", "/v1"}) {
    auto res = check_request(request(http::verb::get, target), with_token(), true);
    ASSERT_TRUE(res) << target;
    EXPECT_EQ(res->result_int(), 401u);
    EXPECT_EQ((*res)[http::field::www_authenticate].find("Bearer"), 0u);
    EXPECT_EQ(verdict(request(http::verb::get, target), with_token()),
              "401 unauthorized: this daemon needs a token: send the header Authorization: Bearer TOKEN");
  }
}

TEST(CheckRequest, WrongTokensRefused) {
  for (const char* auth : {"Bearer wrong", "Bearer s3cret-toke", "Bearer s3cret-token2", "Basic czNjcmV0",
                           "s3cret-token", "Bearer"}) {
    HttpRequest req = request(http::verb::get, "/v1/status");
    req.set(http::field::authorization, auth);
    EXPECT_EQ(verdict(req, with_token()), "401 unauthorized: wrong token in Authorization: Bearer") << auth;
  }
  HttpRequest ok = request(http::verb::get, "/v1/status");
  ok.set(http::field::authorization, "bearer s3cret-token");
  EXPECT_EQ(verdict(ok, with_token()), "(ok)");
}

TEST(CheckRequest, TokenInQueryNeverAccepted) {
  for (const char* target : {"/v1/status?token=s3cret-token", "/v1/status?access_token=s3cret-token",
                             "/v1/events?after=3&token=s3cret-token"}) {
    EXPECT_EQ(status_code(request(http::verb::get, target), with_token()), "401 unauthorized") << target;
    // Not even beside a right header: a token in a URL is already leaked; say so.
    HttpRequest req = request(http::verb::get, target);
    req.set(http::field::authorization, "Bearer s3cret-token");
    std::string v = verdict(req, with_token());
    EXPECT_NE(v.find("a token in the URL is never accepted"), std::string::npos) << v;
    EXPECT_EQ(v.find("s3cret-token"), std::string::npos) << "the message repeats the token: " << v;
  }
}

TEST(CheckRequest, EncodedApiPathStillProtected) {
  // The API routes by the decoded path; so must the check.
  EXPECT_EQ(status_code(request(http::verb::get, "/%76%31/status"), with_token()), "401 unauthorized");
  EXPECT_EQ(status_code(request(http::verb::get, "/%6detrics"), with_token()), "401 unauthorized");
}

TEST(CheckRequest, DashboardFilesNeedNoToken) {
  EXPECT_EQ(verdict(request(http::verb::get, "/"), with_token()), "(ok)");
  EXPECT_EQ(verdict(request(http::verb::get, "/assets/app.js"), with_token()), "(ok)");
  EXPECT_EQ(verdict(request(http::verb::get, "/?token=abc"), with_token()), "(ok)");
}

class TokenFile : public ::testing::Test {
 protected:
  std::string path = ::testing::TempDir() + "/vramd-token-" + std::to_string(::getpid());
  void write(const std::string& text, mode_t mode = 0600) {
    std::ofstream(path, std::ios::trunc) << text;
    ::chmod(path.c_str(), mode);
  }
  void TearDown() override { std::remove(path.c_str()); }
};

TEST_F(TokenFile, TrailingNewlineTrimmed) {
  write("s3cret\n");
  std::string warning;
  auto t = read_token_file(path, &warning);
  ASSERT_TRUE(t.ok()) << t.error();
  EXPECT_EQ(*t, "s3cret");
  EXPECT_EQ(warning, "");
  write("s3cret\r\n");
  EXPECT_EQ(*read_token_file(path), "s3cret");
}

TEST_F(TokenFile, EmptyIsAnError) {
  write("");
  EXPECT_EQ(read_token_file(path).error(), "token file " + path + " is empty");
  write("\n");
  EXPECT_EQ(read_token_file(path).error(), "token file " + path + " is empty");
}

TEST_F(TokenFile, TwoLinesOrSpacesAreAnError) {
  write("one\ntwo\n");
  EXPECT_FALSE(read_token_file(path).ok());
  write("one two");
  EXPECT_FALSE(read_token_file(path).ok());
}

TEST_F(TokenFile, MissingIsAnError) {
  auto t = read_token_file(path + "-missing");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.error(), "cannot read token file " + path + "-missing: No such file or directory");
}

TEST_F(TokenFile, WorldReadableWarns) {
  write("s3cret\n", 0644);
  std::string warning;
  ASSERT_TRUE(read_token_file(path, &warning).ok());
  EXPECT_EQ(warning, "token file " + path + " is readable by every user (mode 644); chmod o-r it");
}

}  // namespace auth_test
}  // namespace vramd
