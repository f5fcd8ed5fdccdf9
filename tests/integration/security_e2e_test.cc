// The API's access rules end to end: a real daemon over real sockets, tried with the requests an
// attacker would send (no token, near-miss tokens, tokens in URLs, other origins, rebinding Host
// names, oversized and slow requests, paths climbing out of the dashboard's files).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>

// GCC 12 needs <utility> before Boost's awaitable.hpp.
#include <utility>

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <fstream>
#include <map>
#include <thread>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/client.h"
#include "integration/daemon_fixture.h"
#include "integration/test_util.h"
#include "server/http_server.h"
#include "server/json_view.h"

namespace vramd {
namespace {

using nlohmann::json;
using testing::Child;
using testing::DaemonFixture;
using testing::eventually;

constexpr const char* kToken = "s3cret-token-0123456789";

struct RawReply {
  int status = 0;  // 0: the connection closed without an answer
  std::map<std::string, std::string> headers;  // names in lower case
  std::string body;
  json error_code() const {
    json j = json::parse(body, nullptr, false);
    if (j.is_discarded() || !j.contains("error")) return "(no JSON error: " + body.substr(0, 200) + ")";
    return j["error"]["code"];
  }
};

int connect_to(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return -1;
  }
  timeval tv{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  return fd;
}

void send_all(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n <= 0) return;  // the server may hang up before reading it all (413, 431)
    data.remove_prefix(static_cast<size_t>(n));
  }
}

RawReply read_reply(int fd) {
  std::string in;
  char buf[65536];
  for (;;) {
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    in.append(buf, static_cast<size_t>(n));
    size_t end = in.find("\r\n\r\n");
    if (end == std::string::npos) continue;
    auto cl = in.find("Content-Length: ");
    if (cl != std::string::npos && cl < end &&
        in.size() >= end + 4 + std::stoul(in.substr(cl + 16, in.find("\r\n", cl) - cl - 16)))
      break;
  }
  RawReply r;
  size_t end = in.find("\r\n\r\n");
  if (!in.starts_with("HTTP/1.1 ") || end == std::string::npos) return r;
  r.status = std::stoi(in.substr(9, 3));
  size_t pos = in.find("\r\n") + 2;
  while (pos < end) {
    size_t eol = in.find("\r\n", pos);
    std::string line = in.substr(pos, eol - pos);
    size_t colon = line.find(':');
    std::string name = line.substr(0, colon);
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    r.headers[name] = line.substr(std::min(line.size(), colon + 2));
    pos = eol + 2;
  }
  r.body = in.substr(end + 4);
  return r;
}

// Sends `request` as it is (no client library to tidy it up) and reads one answer.
RawReply raw(int port, const std::string& request) {
  int fd = connect_to(port);
  if (fd < 0) return {};
  send_all(fd, request);
  RawReply r = read_reply(fd);
  ::close(fd);
  return r;
}

// "METHOD target HTTP/1.1" with Host 127.0.0.1:port unless `headers` has one ("" omits it).
std::string request(const std::string& method, const std::string& target, int port,
                    const std::map<std::string, std::string>& headers = {}, const std::string& body = "") {
  std::string out = fmt::format("{} {} HTTP/1.1\r\nConnection: close\r\n", method, target);
  if (!headers.contains("Host")) out += fmt::format("Host: 127.0.0.1:{}\r\n", port);
  for (const auto& [k, v] : headers)
    if (!v.empty()) out += k + ": " + v + "\r\n";
  if (!body.empty() || method == "POST") out += fmt::format("Content-Length: {}\r\n", body.size());
  return out + "\r\n" + body;
}

std::string bearer(const std::string& token = kToken) { return "Bearer " + token; }

// A daemon on the test GPU with a token (from daemon.token_file) or without one.
struct SecureDaemon {
  DaemonFixture f;
  std::string token_file = f.dir.file("token");

  void start(bool with_token) {
    std::string extra;
    if (with_token) {
      std::ofstream(token_file) << kToken << "\n";
      ::chmod(token_file.c_str(), 0600);
      extra = fmt::format("token_file = \"{}\"\n", token_file);
    }
    std::ofstream(f.dir.file("vramd.toml")) << fmt::format(
        "[daemon]\nlisten = \"127.0.0.1:{}\"\nstate_dir = \"{}\"\nsample_interval = \"200ms\"\n{}\n"
        "[gpu]\nbackend = \"nvml\"\n\n[services.sleeper]\nkind = \"comfyui\"\n"
        "url = \"http://127.0.0.1:1\"\nmatch = {{ cmdline = \"^sleep 3601$\" }}\n",
        f.port, f.dir.path(), extra);
    f.daemon = std::make_unique<Child>(
        std::vector<std::string>{testing::vramd_bin(), "serve", "--config", f.dir.file("vramd.toml")},
        f.env(), f.dir.file("daemon.log"));
    ASSERT_TRUE(eventually([&] {
      auto r = http_request({f.url}, "GET", "/v1/status", "", 2000, with_token ? kToken : "");
      return r && r->status == 200 && !json::parse(r->body)["sampled_at"].is_null();
    })) << f.log();
  }
  int port() const { return f.port; }
  std::string socket() const { return "unix:" + f.dir.path() + "/vramd.sock"; }
};

TEST(SecurityE2E, TokenRequiredOnTheApi) {
  SecureDaemon d;
  d.start(/*with_token=*/true);
  int port = d.port();

  RawReply none = raw(port, request("GET", "/v1/status", port));
  EXPECT_EQ(none.status, 401);
  EXPECT_EQ(none.error_code(), "unauthorized");
  EXPECT_EQ(none.headers["www-authenticate"].rfind("Bearer", 0), 0u) << none.headers["www-authenticate"];
  EXPECT_EQ(none.headers["content-type"], "application/json");

  for (std::string auth : {std::string("Bearer wrong-token-0123456789"), bearer(std::string(kToken) + "x"),
                           bearer(std::string(kToken).substr(1)), bearer(""), std::string("Basic ") + kToken,
                           std::string(kToken)}) {
    RawReply r = raw(port, request("GET", "/v1/status", port, {{"Authorization", auth}}));
    EXPECT_EQ(r.status, 401) << auth;
    EXPECT_EQ(r.error_code(), "unauthorized") << auth;
  }
  // Mutations too, before they change anything.
  RawReply post = raw(port, request("POST", "/v1/free?idle=true", port, {{"Authorization", "Bearer nope"}}));
  EXPECT_EQ(post.status, 401);
  EXPECT_EQ(post.error_code(), "unauthorized");
  RawReply metrics = raw(port, request("GET", "/metrics", port));
  EXPECT_EQ(metrics.status, 401);
  EXPECT_EQ(metrics.error_code(), "unauthorized");
  // A percent-encoded path is routed decoded, so it is checked decoded.
  RawReply encoded = raw(port, request("GET", "/%76%31/status", port));
  EXPECT_EQ(encoded.status, 401);

  RawReply ok = raw(port, request("GET", "/v1/status", port, {{"Authorization", bearer()}}));
  EXPECT_EQ(ok.status, 200) << ok.body;
  EXPECT_TRUE(json::parse(ok.body).contains("gpus"));
  // The scheme is case-insensitive (RFC 7235).
  RawReply lower = raw(port, request("GET", "/v1/status", port, {{"Authorization", std::string("bearer ") + kToken}}));
  EXPECT_EQ(lower.status, 200) << lower.body;
  // With a token, the daemon may be reached by any name (a LAN hostname).
  RawReply named = raw(port, request("GET", "/v1/status", port, {{"Host", "gpu-box:7100"}, {"Authorization", bearer()}}));
  EXPECT_EQ(named.status, 200) << named.body;
}

TEST(SecurityE2E, TokenInQueryStringNeverAccepted) {
  SecureDaemon d;
  d.start(true);
  int port = d.port();
  for (std::string target : {fmt::format("/v1/status?token={}", kToken), fmt::format("/v1/status?access_token={}", kToken)}) {
    RawReply r = raw(port, request("GET", target, port));
    EXPECT_EQ(r.status, 401) << target;
    EXPECT_EQ(r.error_code(), "unauthorized");
    EXPECT_EQ(r.body.find(kToken), std::string::npos) << "the answer repeats the token";
    RawReply both = raw(port, request("GET", target, port, {{"Authorization", bearer()}}));
    EXPECT_EQ(both.status, 401) << target;
  }
  EXPECT_EQ(testing::slurp(d.f.dir.file("daemon.log")).find(kToken), std::string::npos)
      << "the token reached the log";
}

TEST(SecurityE2E, DashboardAndUnixSocketNeedNoToken) {
  SecureDaemon d;
  d.start(true);
  int port = d.port();
  for (const char* path : {"/", "/assets/app.js"}) {
    RawReply without = raw(port, request("GET", path, port));
    RawReply with = raw(port, request("GET", path, port, {{"Authorization", bearer()}}));
    EXPECT_NE(without.status, 401) << path;
    EXPECT_NE(without.status, 0) << path;
    EXPECT_EQ(without.status, with.status) << path << ": the token changes the answer";
    EXPECT_EQ(without.body, with.body) << path;
  }
  // The socket's file mode is its access control.
  auto r = http_request({d.socket()}, "GET", "/v1/status");
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(r->status, 200u) << r->body;
  struct stat st{};
  ASSERT_EQ(::stat((d.f.dir.path() + "/vramd.sock").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0660u);
}

TEST(SecurityE2E, OversizedRequestsRefusedWithJson) {
  SecureDaemon d;
  d.start(true);
  int port = d.port();
  std::string big_body(1024 * 1024 + 1, 'x');
  RawReply body = raw(port, request("POST", "/v1/leases", port, {{"Authorization", bearer()}}, big_body));
  EXPECT_EQ(body.status, 413);
  EXPECT_EQ(body.error_code(), "too_large");
  // Announced but not sent: refused on the header alone.
  RawReply announced = raw(port, fmt::format("POST /v1/leases HTTP/1.1\r\nHost: 127.0.0.1:{}\r\n"
                                             "Authorization: {}\r\nContent-Length: 999999999\r\n\r\n",
                                             port, bearer()));
  EXPECT_EQ(announced.status, 413);
  EXPECT_EQ(announced.error_code(), "too_large");
  RawReply headers = raw(port, request("GET", "/v1/status", port,
                                       {{"Authorization", bearer()}, {"X-Padding", std::string(17 * 1024, 'a')}}));
  EXPECT_EQ(headers.status, 431);
  EXPECT_EQ(headers.error_code(), "too_large");
  // Without a token, no less.
  RawReply anon = raw(port, request("GET", "/", port, {{"X-Padding", std::string(17 * 1024, 'a')}}));
  EXPECT_EQ(anon.status, 431);
}

TEST(SecurityE2E, PathsCannotClimbOutOfTheDashboard) {
  SecureDaemon d;
  d.start(true);
  int port = d.port();
  for (const char* target : {"/assets/../../../../etc/passwd", "/assets/%2e%2e/%2e%2e/%2e%2e/etc/passwd",
                             "/assets/%2E%2E%2F%2E%2E%2Fetc%2Fpasswd", "/assets/..%2f..%2fetc/passwd",
                             "/../../etc/passwd", "/%2e%2e/%2e%2e/etc/passwd", "/assets/....//....//etc/passwd"}) {
    RawReply r = raw(port, request("GET", target, port, {{"Authorization", bearer()}}));
    EXPECT_EQ(r.status, 404) << target << ": " << r.body.substr(0, 200);
    EXPECT_EQ(r.error_code(), "not_found") << target;
    EXPECT_EQ(r.body.find("root:"), std::string::npos) << target;
  }
}

TEST(SecurityE2E, BrowserAttacksOnLoopbackDaemonWithoutToken) {
  SecureDaemon d;
  d.start(/*with_token=*/false);
  int port = d.port();

  // DNS rebinding: the page's own name now resolves to 127.0.0.1.
  RawReply rebound = raw(port, request("GET", "/v1/status", port, {{"Host", "evil.example"}}));
  EXPECT_EQ(rebound.status, 403);
  EXPECT_EQ(rebound.error_code(), "forbidden");
  EXPECT_NE(rebound.body.find("Host header 'evil.example' is not this daemon's address"), std::string::npos)
      << rebound.body;
  RawReply rebound_post = raw(port, request("POST", "/v1/free?idle=true", port, {{"Host", fmt::format("evil.example:{}", port)}}));
  EXPECT_EQ(rebound_post.status, 403);
  for (std::string host : {fmt::format("localhost:{}", port), fmt::format("127.0.0.1:{}", port)}) {
    RawReply ok = raw(port, request("GET", "/v1/status", port, {{"Host", host}}));
    EXPECT_EQ(ok.status, 200) << host;
  }

  // CSRF: a form on another site posts here.
  RawReply csrf = raw(port, request("POST", "/v1/free?idle=true", port, {{"Origin", "http://evil.example"}}));
  EXPECT_EQ(csrf.status, 403);
  EXPECT_EQ(csrf.error_code(), "forbidden");
  RawReply csrf_null = raw(port, request("DELETE", "/v1/leases/1", port, {{"Origin", "null"}}));
  EXPECT_EQ(csrf_null.status, 403);
  EXPECT_EQ(csrf_null.error_code(), "forbidden");
  RawReply same = raw(port, request("POST", "/v1/free?idle=true", port, {{"Origin", fmt::format("http://127.0.0.1:{}", port)}}));
  EXPECT_EQ(same.status, 200) << same.body;
  EXPECT_TRUE(json::parse(same.body).contains("unloads"));

  // HTTP/1.1 requires Host.
  RawReply no_host = raw(port, "GET /v1/status HTTP/1.1\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(no_host.status, 400);
  EXPECT_EQ(no_host.error_code(), "bad_request");
}

TEST(SecurityE2E, MutationsOnlyByPostOrDelete) {
  SecureDaemon d;
  d.start(false);
  int port = d.port();
  for (const char* target : {"/v1/free?idle=true", "/v1/services/sleeper/unload", "/v1/services/sleeper/start",
                             "/v1/services/sleeper/stop", "/v1/services/sleeper/restart"}) {
    RawReply r = raw(port, request("GET", target, port));
    EXPECT_EQ(r.status, 405) << target;
    EXPECT_EQ(r.error_code(), "method_not_allowed") << target;
    EXPECT_EQ(r.headers["allow"], "POST") << target;
  }
  RawReply put = raw(port, request("PUT", "/v1/leases", port));
  EXPECT_EQ(put.status, 405);
  EXPECT_EQ(put.error_code(), "method_not_allowed");
  EXPECT_EQ(put.headers["allow"], "GET, HEAD, POST");  // the methods of the path's routes
  RawReply beat = raw(port, request("GET", "/v1/leases/7/heartbeat", port));
  EXPECT_EQ(beat.status, 405);
  EXPECT_EQ(beat.headers["allow"], "POST");
  RawReply patch = raw(port, request("PATCH", "/v1/leases/7", port));
  EXPECT_EQ(patch.status, 405);
  EXPECT_EQ(patch.headers["allow"], "GET, HEAD, DELETE");
  RawReply post_status = raw(port, request("POST", "/v1/status", port));
  EXPECT_EQ(post_status.status, 405);
  // HEAD answers the length of the GET's body, without the body (else a keep-alive client
  // would read it as the next answer).
  RawReply head = raw(port, request("HEAD", "/v1/status", port));
  EXPECT_EQ(head.status, 200);
  EXPECT_GT(std::stoul(head.headers["content-length"]), 0u);
  EXPECT_EQ(head.body, "");
  RawReply unknown = raw(port, request("GET", "/v1/nothing", port));
  EXPECT_EQ(unknown.status, 404);
  EXPECT_EQ(unknown.error_code(), "not_found");
}

// `vramd serve` itself refuses to expose the API without a token.
TEST(SecurityE2E, RefusesToStartExposedWithoutToken) {
  DaemonFixture f;
  std::ofstream(f.dir.file("vramd.toml")) << fmt::format(
      "[daemon]\nlisten = \"0.0.0.0:{}\"\nstate_dir = \"{}\"\n[gpu]\nbackend = \"nvml\"\n", f.port, f.dir.path());
  Child daemon({testing::vramd_bin(), "serve", "--config", f.dir.file("vramd.toml")}, f.env(),
               f.dir.file("daemon.log"));
  int status = daemon.wait_exit(std::chrono::seconds(20));
  ASSERT_NE(status, -1) << "still running: " << f.log();
  EXPECT_EQ(WEXITSTATUS(status), 1);
  EXPECT_NE(f.log().find(fmt::format("vramd.toml:2:10: daemon.listen: 0.0.0.0:{} is reachable from other "
                                     "hosts; set daemon.token or daemon.token_file",
                                     f.port)),
            std::string::npos)
      << f.log();
}

TEST(SecurityE2E, UnreadableOrEmptyTokenFileStopsTheStart) {
  for (bool exists : {false, true}) {
    DaemonFixture f;
    std::string token_file = f.dir.file("token");
    if (exists) std::ofstream(token_file) << "\n";
    std::ofstream(f.dir.file("vramd.toml")) << fmt::format(
        "[daemon]\nlisten = \"127.0.0.1:{}\"\nstate_dir = \"{}\"\ntoken_file = \"{}\"\n[gpu]\nbackend = \"nvml\"\n",
        f.port, f.dir.path(), token_file);
    Child daemon({testing::vramd_bin(), "serve", "--config", f.dir.file("vramd.toml")}, f.env(),
                 f.dir.file("daemon.log"));
    int status = daemon.wait_exit(std::chrono::seconds(20));
    ASSERT_NE(status, -1) << "still running: " << f.log();
    EXPECT_EQ(WEXITSTATUS(status), 1);
    std::string expected = exists ? fmt::format("daemon.token_file: token file {} is empty", token_file)
                                  : fmt::format("daemon.token_file: cannot read token file {}", token_file);
    EXPECT_NE(f.log().find(expected), std::string::npos) << f.log();
  }
}

// The server's own timeouts, with short limits so that the test is quick: a client that sends a
// header byte a second (slowloris) is cut off at the read timeout and never reaches the handler.
TEST(SecurityE2E, SlowHeadersCutOffAtReadTimeout) {
  boost::asio::io_context io;
  std::atomic<int> handled{0};
  HttpLimits limits;
  limits.read_timeout = std::chrono::seconds(2);
  limits.idle_timeout = std::chrono::seconds(2);
  auto server = std::make_unique<HttpServer>(
      io,
      [&](HttpRequest, HttpStream&) -> boost::asio::awaitable<HttpResponse> {
        ++handled;
        co_return json_response(200, "{}");
      },
      limits);
  server->set_security({.enabled = true, .token = ""});
  ASSERT_TRUE(server->listen_tcp("127.0.0.1:0").ok());
  int port = server->tcp_port();
  std::thread loop([&] { io.run(); });

  // A quick request is served: the limit is not simply refusing everything.
  RawReply quick = raw(port, request("GET", "/v1/status", port));
  EXPECT_EQ(quick.status, 200);
  EXPECT_EQ(handled.load(), 1);

  int fd = connect_to(port);
  ASSERT_GE(fd, 0);
  std::string slow = fmt::format("GET /v1/status HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nX-Slow: {}\r\n\r\n", port,
                                 std::string(30, 'a'));
  auto began = std::chrono::steady_clock::now();
  bool cut_off = false;
  for (char c : slow) {
    if (::send(fd, &c, 1, MSG_NOSIGNAL) != 1) {
      cut_off = true;
      break;
    }
    // Has the server hung up? (a read that returns 0 at once, without blocking for long)
    timeval tv{1, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    char buf[256];
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
      cut_off = true;
      break;
    }
    EXPECT_LE(n, 0) << "an answer to a request that never finished: " << std::string(buf, std::max<ssize_t>(n, 0));
  }
  auto took = std::chrono::steady_clock::now() - began;
  ::close(fd);
  EXPECT_TRUE(cut_off) << "the trickling client was never cut off";
  EXPECT_GE(took, std::chrono::milliseconds(1500));
  EXPECT_LT(took, std::chrono::seconds(6)) << "cut off late";
  EXPECT_EQ(handled.load(), 1) << "the slow request reached the handler";

  // A keep-alive connection that starts a second request slowly is cut off just the same.
  int fd2 = connect_to(port);
  ASSERT_GE(fd2, 0);
  send_all(fd2, fmt::format("GET /v1/status HTTP/1.1\r\nHost: 127.0.0.1:{}\r\n\r\n", port));
  RawReply first = read_reply(fd2);  // reads up to the end of the first answer
  EXPECT_EQ(first.status, 200);
  timeval tv{1, 0};
  ::setsockopt(fd2, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  auto began2 = std::chrono::steady_clock::now();
  bool cut_off2 = false;
  for (char c : std::string("GET /v1/status HTTP/1.1\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaa\r\n")) {
    if (::send(fd2, &c, 1, MSG_NOSIGNAL) != 1) {
      cut_off2 = true;
      break;
    }
    char buf[256];
    ssize_t n = ::recv(fd2, buf, sizeof buf, 0);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
      cut_off2 = true;
      break;
    }
    if (std::chrono::steady_clock::now() - began2 > std::chrono::seconds(8)) break;
  }
  ::close(fd2);
  EXPECT_TRUE(cut_off2);
  EXPECT_LT(std::chrono::steady_clock::now() - began2, std::chrono::seconds(8));

  io.stop();
  loop.join();
  server.reset();
}

}  // namespace
}  // namespace vramd
