// A scriptable upstream for the proxy's tests: real HTTP/1.1 over loopback (Boost.Beast), with
// the shapes the proxy must pass through untouched: chunked bodies and SSE sent with gaps, a
// WebSocket echo, slow and hung answers, and an echo of the request as the backend saw it.
#pragma once

#include <utility>

#include <array>
#include <atomic>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>
#include <chrono>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace vramd::testing {

namespace pb {
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using asio::use_awaitable;
}  // namespace pb

// Paths: GET /hello; GET /chunked?n=N&gap=MS (N chunks "part-i\n"); GET /sse?n=N&gap=MS and
// POST /v1/chat/completions with "stream":true (SSE events "data: i\n\n", chunked); POST
// /v1/... otherwise {"backend","model","path"}; ANY /echo {"headers":{...},"body_bytes"};
// POST /upload (reads the body piece by piece; answers the ms of each piece's arrival);
// a model "error-500": 500 with llama-server's error body; GET /slow?ms=MS; /hang (never
// answers); GET /ws (WebSocket echo); GET /close-soon (answers,
// then closes the kept-alive connection 100 ms later).
class ProxyBackend {
 public:
  ProxyBackend(boost::asio::io_context& io, std::string name)
      : io_(io), name_(std::move(name)), acceptor_(io) {
    pb::tcp::endpoint ep(boost::asio::ip::make_address("127.0.0.1"), 0);
    acceptor_.open(ep.protocol());
    acceptor_.set_option(boost::asio::socket_base::reuse_address(true));
    acceptor_.bind(ep);
    acceptor_.listen();
    port_ = acceptor_.local_endpoint().port();
    boost::asio::co_spawn(io_, accept(), boost::asio::detached);
  }
  int port() const { return port_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  int connections() const { return connections_; }
  int requests() const { return requests_; }
  std::vector<std::string> arrivals() {
    std::lock_guard lock(mu_);
    return arrivals_;
  }

 private:
  boost::asio::awaitable<void> accept() {
    for (;;) {
      boost::system::error_code ec;
      auto s = co_await acceptor_.async_accept(pb::asio::redirect_error(pb::use_awaitable, ec));
      if (ec) co_return;
      ++connections_;
      boost::asio::co_spawn(io_, session(std::move(s)), boost::asio::detached);
    }
  }

  static int query_int(std::string_view target, std::string_view key, int def) {
    auto q = target.find(std::string(key) + "=");
    if (q == std::string_view::npos) return def;
    return std::atoi(std::string(target.substr(q + key.size() + 1)).c_str());
  }

  boost::asio::awaitable<void> sleep_ms(int ms) {
    pb::asio::steady_timer t(io_, std::chrono::milliseconds(ms));
    boost::system::error_code ec;
    co_await t.async_wait(pb::asio::redirect_error(pb::use_awaitable, ec));
  }

  // Arguments of awaited calls are named objects: GCC 12 may destroy a temporary inside a
  // co_await expression twice.
  boost::asio::awaitable<bool> write_raw(pb::beast::tcp_stream& s, const std::string& data) {
    boost::system::error_code ec;
    co_await pb::asio::async_write(s, pb::asio::buffer(data),
                                   pb::asio::redirect_error(pb::use_awaitable, ec));
    co_return !ec;
  }

  static std::string chunk(const std::string& d) {
    char head[32];
    std::snprintf(head, sizeof head, "%zx\r\n", d.size());
    return head + d + "\r\n";
  }

  boost::asio::awaitable<void> session(pb::tcp::socket socket) {
    pb::beast::tcp_stream s(std::move(socket));
    pb::beast::flat_buffer buf;
    for (;;) {
      boost::system::error_code ec;
      pb::http::request_parser<pb::http::buffer_body> hp;
      hp.body_limit(1ull << 40);
      co_await pb::http::async_read_header(s, buf, hp,
                                           pb::asio::redirect_error(pb::use_awaitable, ec));
      if (ec) co_return;
      ++requests_;
      std::string target(hp.get().target());
      std::string path = target.substr(0, target.find('?'));
      {
        std::lock_guard lock(mu_);
        arrivals_.push_back(std::string(hp.get()["X-Seq"]));
      }
      if (path == "/upload") {
        // Timestamps of the body's pieces as they arrive.
        auto t0 = std::chrono::steady_clock::now();
        nlohmann::json times = nlohmann::json::array();
        std::array<char, 4096> piece;
        while (!hp.is_done()) {
          hp.get().body().data = piece.data();
          hp.get().body().size = piece.size();
          co_await pb::http::async_read_some(s, buf, hp,
                                             pb::asio::redirect_error(pb::use_awaitable, ec));
          if (ec == pb::http::error::need_buffer) ec = {};
          if (ec) co_return;
          if (hp.get().body().size != piece.size())
            times.push_back(std::chrono::duration_cast<std::chrono::milliseconds>(
                                std::chrono::steady_clock::now() - t0)
                                .count());
        }
        nlohmann::json answer;
        answer["pieces_ms"] = times;
        std::string body = answer.dump();
        co_await respond(s, 200, body, kJson);
        continue;
      }
      pb::http::request_parser<pb::http::string_body> p{std::move(hp)};
      co_await pb::http::async_read(s, buf, p, pb::asio::redirect_error(pb::use_awaitable, ec));
      if (ec) co_return;
      auto req = p.release();
      if (path == "/hang") {
        co_await sleep_ms(600000);
        co_return;
      }
      if (path == "/ws" && pb::beast::websocket::is_upgrade(req)) {
        pb::beast::websocket::stream<pb::beast::tcp_stream> ws(std::move(s));
        co_await ws.async_accept(req, pb::asio::redirect_error(pb::use_awaitable, ec));
        if (ec) co_return;
        for (;;) {
          pb::beast::flat_buffer msg;
          co_await ws.async_read(msg, pb::asio::redirect_error(pb::use_awaitable, ec));
          if (ec) co_return;
          ws.text(ws.got_text());
          co_await ws.async_write(msg.data(), pb::asio::redirect_error(pb::use_awaitable, ec));
          if (ec) co_return;
        }
      }
      bool stream = false;
      std::string model;
      if (path.rfind("/v1/", 0) == 0 || path.rfind("/api/", 0) == 0) {
        auto j = nlohmann::json::parse(req.body(), nullptr, false);
        if (j.is_object()) {
          stream = j.value("stream", false);
          model = j.value("model", "");
        }
      }
      if (model == "error-500") {
        // llama-server's answer to what it cannot do (a stream asked for too), with its shape.
        std::string body =
            R"({"error":{"code":500,"message":"Only one completion choice is allowed","type":"server_error"}})";
        co_await respond(s, 500, body, kJson);
        if (!req.keep_alive()) co_return;
        continue;
      }
      if (path == "/chunked" || path == "/sse" || stream) {
        int n = query_int(target, "n", 5), gap = query_int(target, "gap", 150);
        bool sse = path != "/chunked";
        std::string head = std::string("HTTP/1.1 200 OK\r\nContent-Type: ") +
                           (sse ? "text/event-stream" : "text/plain") +
                           "\r\nTransfer-Encoding: chunked\r\n\r\n";
        if (!co_await write_raw(s, head)) co_return;
        for (int i = 0; i < n; ++i) {
          if (i) co_await sleep_ms(gap);
          std::string piece =
              sse ? "data: " + std::to_string(i) + "\n\n" : "part-" + std::to_string(i) + "\n";
          std::string framed = chunk(piece);
          if (!co_await write_raw(s, framed)) co_return;
        }
        std::string last = "0\r\n\r\n";
        if (!co_await write_raw(s, last)) co_return;
        continue;
      }
      if (path == "/slow") co_await sleep_ms(query_int(target, "ms", 500));
      if (path == "/echo") {
        nlohmann::json headers = nlohmann::json::object();
        for (const auto& f : req) headers[std::string(f.name_string())] = std::string(f.value());
        nlohmann::json answer;
        answer["headers"] = headers;
        answer["body_bytes"] = req.body().size();
        answer["target"] = target;
        std::string body = answer.dump();
        co_await respond(s, 200, body, kJson);
        if (!req.keep_alive()) co_return;
        continue;
      }
      if (path == "/close-soon") {
        // Answers keep-alive, then closes the idle connection 100 ms later (a server's
        // keep-alive timeout, or a restart): the proxy's pooled connection is then dead.
        std::string body = "closing soon";
        co_await respond(s, 200, body, kText);
        pb::asio::steady_timer t(io_, std::chrono::milliseconds(100));
        co_await t.async_wait(pb::use_awaitable);
        co_return;
      }
      if (path == "/hello" || path == "/slow") {
        std::string body = "hello from " + name_;
        co_await respond(s, 200, body, kText);
        if (!req.keep_alive()) co_return;
        continue;
      }
      nlohmann::json answer;
      answer["backend"] = name_;
      answer["model"] = model;
      answer["path"] = path;
      std::string body = answer.dump();
      co_await respond(s, 200, body, kJson);
      if (!req.keep_alive()) co_return;
    }
  }

  inline static const std::string kJson = "application/json";
  inline static const std::string kText = "text/plain";
  boost::asio::awaitable<void> respond(pb::beast::tcp_stream& s, unsigned status,
                                       const std::string& body, const std::string& type) {
    pb::http::response<pb::http::string_body> res{static_cast<pb::http::status>(status), 11};
    res.set(pb::http::field::content_type, type);
    res.body() = body;
    res.prepare_payload();
    boost::system::error_code ec;
    co_await pb::http::async_write(s, res, pb::asio::redirect_error(pb::use_awaitable, ec));
  }

  boost::asio::io_context& io_;
  std::string name_;
  pb::tcp::acceptor acceptor_;
  int port_ = 0;
  std::atomic<int> connections_{0};
  std::atomic<int> requests_{0};
  std::mutex mu_;
  std::vector<std::string> arrivals_;
};

}  // namespace vramd::testing
