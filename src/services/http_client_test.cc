#include "services/http_client.h"

#include <gtest/gtest.h>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>

#include <optional>

namespace vramd {
namespace {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

// A one-connection-at-a-time server on the test's io_context: answers each request with what
// `answer` returns, or, when `hang`, accepts and never answers.
struct TestServer {
  TestServer(asio::io_context& io, bool hang) : acceptor(io, tcp::endpoint(tcp::v4(), 0)) {
    asio::co_spawn(io, run(hang), asio::detached);
  }
  int port() const { return acceptor.local_endpoint().port(); }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port()); }

  asio::awaitable<void> run(bool hang) {
    for (;;) {
      tcp::socket socket = co_await acceptor.async_accept(asio::use_awaitable);
      if (hang) {
        held.push_back(std::move(socket));
        continue;
      }
      boost::beast::flat_buffer buffer;
      http::request<http::string_body> req;
      co_await http::async_read(socket, buffer, req, asio::use_awaitable);
      last_target = std::string(req.target());
      last_auth = std::string(req[http::field::authorization]);
      last_content_type = std::string(req[http::field::content_type]);
      last_body = req.body();
      http::response<http::string_body> res{http::status::ok, 11};
      res.set(http::field::content_type, "application/json");
      res.body() = R"({"ok":true})";
      res.prepare_payload();
      co_await http::async_write(socket, res, asio::use_awaitable);
    }
  }

  tcp::acceptor acceptor;
  std::vector<tcp::socket> held;
  std::string last_target, last_auth, last_content_type, last_body;
};

// Runs `call` on `io` and returns its result with how long it took.
template <typename F>
std::pair<Result<HttpReply>, Clock::duration> run_call(asio::io_context& io, F call) {
  std::optional<Result<HttpReply>> out;
  Clock::time_point start = Clock::now();
  Clock::duration took{};
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        out = co_await call();
        took = Clock::now() - start;
        io.stop();
      },
      asio::detached);
  io.restart();
  io.run();
  return {std::move(*out), took};
}

TEST(HttpClient, SendsMethodTargetBodyAndBearer) {
  asio::io_context io;
  TestServer server(io, /*hang=*/false);
  HttpOptions options;
  options.bearer_token = "k3y";
  auto [r, took] = run_call(io, [&] {
    return http_call(io.get_executor(), "POST", server.url() + "/sleep?level=2", "{}", options);
  });
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(r->status, 200u);
  EXPECT_EQ(r->body, R"({"ok":true})");
  EXPECT_EQ(r->content_type, "application/json");
  EXPECT_EQ(server.last_target, "/sleep?level=2");
  EXPECT_EQ(server.last_auth, "Bearer k3y");
  EXPECT_EQ(server.last_content_type, "application/json");
  EXPECT_EQ(server.last_body, "{}");
}

// A keep-alive server: answers requests on each connection until the client closes it, or,
// after `answers_per_connection`, closes it on the next request without answering (a server's
// idle timeout racing the client's reuse).
struct KeepAliveServer {
  KeepAliveServer(asio::io_context& io, int answers_per_connection)
      : acceptor(io, tcp::endpoint(tcp::v4(), 0)), per_connection(answers_per_connection) {
    asio::co_spawn(io, run(), asio::detached);
  }
  std::string url() const {
    return "http://127.0.0.1:" + std::to_string(acceptor.local_endpoint().port());
  }
  asio::awaitable<void> run() {
    for (;;) {
      tcp::socket socket = co_await acceptor.async_accept(asio::use_awaitable);
      ++accepted;
      asio::co_spawn(acceptor.get_executor(), serve(std::move(socket)), asio::detached);
    }
  }
  asio::awaitable<void> serve(tcp::socket socket) {
    boost::beast::flat_buffer buffer;
    for (int answered = 0;; ++answered) {
      http::request<http::string_body> req;
      boost::system::error_code ec;
      co_await http::async_read(socket, buffer, req, asio::redirect_error(asio::use_awaitable, ec));
      if (ec) co_return;
      ++requests;
      if (answered == per_connection) co_return;  // closes without answering
      http::response<http::string_body> res{http::status::ok, 11};
      res.body() = std::to_string(requests);
      res.keep_alive(req.keep_alive());
      res.prepare_payload();
      co_await http::async_write(socket, res, asio::redirect_error(asio::use_awaitable, ec));
      if (ec || !req.keep_alive()) co_return;
    }
  }
  tcp::acceptor acceptor;
  int per_connection;
  int accepted = 0, requests = 0;
};

TEST(HttpClient, GetsThroughConnectionsShareOneKeptAliveConnection) {
  asio::io_context io;
  KeepAliveServer server(io, 1000);
  HttpConnections connections;
  HttpOptions options;
  options.connections = &connections;
  for (int i = 1; i <= 3; ++i) {
    auto [r, took] = run_call(io, [&] {
      return http_call(io.get_executor(), "GET", server.url() + "/queue", "", options);
    });
    ASSERT_TRUE(r.ok()) << r.error();
    EXPECT_EQ(r->body, std::to_string(i));
  }
  EXPECT_EQ(server.accepted, 1);
  EXPECT_EQ(connections.opened(), 1u);
  EXPECT_EQ(connections.idle(), 1u);
  // A POST (an unload: not safe to send twice) takes a connection of its own and closes it.
  auto [post, took] = run_call(io, [&] {
    return http_call(io.get_executor(), "POST", server.url() + "/free", "{}", options);
  });
  ASSERT_TRUE(post.ok()) << post.error();
  EXPECT_EQ(server.accepted, 2);
  EXPECT_EQ(connections.idle(), 1u);
  // Without connections, one connection per request, as before.
  auto [plain, took2] = run_call(io, [&] {
    return http_call(io.get_executor(), "GET", server.url() + "/queue", "", HttpOptions{});
  });
  ASSERT_TRUE(plain.ok()) << plain.error();
  EXPECT_EQ(server.accepted, 3);
}

TEST(HttpClient, AKeptConnectionTheServerDropsIsRetriedOnceOnANewOne) {
  asio::io_context io;
  KeepAliveServer server(io, 1);  // one answer per connection, then closes on the next request
  HttpConnections connections;
  HttpOptions options;
  options.connections = &connections;
  for (int i = 0; i < 3; ++i) {
    auto [r, took] = run_call(io, [&] {
      return http_call(io.get_executor(), "GET", server.url() + "/api/ps", "", options);
    });
    ASSERT_TRUE(r.ok()) << "GET " << i << ": " << r.error();
    EXPECT_EQ(r->status, 200u);
  }
  // Each GET after the first found its kept connection dropped under it, and went on a new one.
  EXPECT_EQ(server.accepted, 3);
  EXPECT_EQ(server.requests, 5);  // 1 + 2 + 2: the dropped tries reached the server
  EXPECT_EQ(connections.opened(), 3u);
}

TEST(HttpClient, AKeptConnectionTheServerClosedIsNotReused) {
  asio::io_context io;
  TestServer server(io, /*hang=*/false);  // answers keep-alive, then closes the connection
  HttpConnections connections;
  HttpOptions options;
  options.connections = &connections;
  for (int i = 0; i < 2; ++i) {
    auto [r, took] = run_call(io, [&] {
      return http_call(io.get_executor(), "GET", server.url() + "/system_stats", "", options);
    });
    ASSERT_TRUE(r.ok()) << r.error();
    // Let the server's close arrive before the next GET looks at the kept connection.
    asio::steady_timer t(io, std::chrono::milliseconds(50));
    t.async_wait([](boost::system::error_code) {});
    io.restart();
    io.run_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(connections.opened(), 2u);
}

TEST(HttpClient, HungServerTimesOutWithoutDelayingOthers) {
  asio::io_context io;
  TestServer hung(io, /*hang=*/true);
  TestServer fine(io, /*hang=*/false);
  HttpOptions options;
  options.total_timeout = std::chrono::milliseconds(300);
  std::optional<Result<HttpReply>> slow, fast;
  Clock::duration slow_took{}, fast_took{};
  Clock::time_point start = Clock::now();
  int done = 0;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        slow = co_await http_call(io.get_executor(), "GET", hung.url() + "/queue", {}, options);
        slow_took = Clock::now() - start;
        if (++done == 2) io.stop();
      },
      asio::detached);
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        fast = co_await http_call(io.get_executor(), "GET", fine.url() + "/queue", {}, options);
        fast_took = Clock::now() - start;
        if (++done == 2) io.stop();
      },
      asio::detached);
  io.run();
  ASSERT_TRUE(slow && fast);
  ASSERT_FALSE(slow->ok());
  EXPECT_NE(slow->error().find("timed out after 300ms"), std::string::npos) << slow->error();
  EXPECT_GE(slow_took, std::chrono::milliseconds(280));
  EXPECT_LT(slow_took, std::chrono::milliseconds(1000));
  ASSERT_TRUE(fast->ok()) << fast->error();
  EXPECT_LT(fast_took, std::chrono::milliseconds(200));
}

TEST(HttpClient, ConnectionRefused) {
  asio::io_context io;
  int port;
  {
    tcp::acceptor a(io, tcp::endpoint(tcp::v4(), 0));
    port = a.local_endpoint().port();
  }
  auto [r, took] = run_call(io, [&] {
    return http_call(io.get_executor(), "GET", "http://127.0.0.1:" + std::to_string(port) + "/");
  });
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().rfind("connect: ", 0), 0u) << r.error();
}

TEST(HttpClient, HttpsRefusedClearly) {
  asio::io_context io;
  auto [r, took] = run_call(
      io, [&] { return http_call(io.get_executor(), "GET", "https://127.0.0.1:8443/health"); });
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error(), "https is not supported; put the service behind http on localhost");
}

TEST(HttpClient, BearerTokenNeverInErrors) {
  asio::io_context io;
  HttpOptions options;
  options.bearer_token = "sekrit";
  auto [r, took] = run_call(
      io, [&] { return http_call(io.get_executor(), "GET", "http://127.0.0.1:1/", {}, options); });
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().find("sekrit"), std::string::npos);
}

TEST(ResolveUrl, PathsAndAbsolute) {
  EXPECT_EQ(resolve_url("http://h:1", "/queue"), "http://h:1/queue");
  EXPECT_EQ(resolve_url("http://h:1/prefix", "/queue"), "http://h:1/prefix/queue");
  EXPECT_EQ(resolve_url("http://h:1", "http://other:2/m"), "http://other:2/m");
}

}  // namespace
}  // namespace vramd
