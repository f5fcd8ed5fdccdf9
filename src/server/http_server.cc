#include "server/http_server.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <deque>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "server/auth.h"
#include "server/json_view.h"

namespace vramd {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using asio::use_awaitable;

HttpResponse json_response(unsigned status, const std::string& body, unsigned version) {
  HttpResponse res{static_cast<http::status>(status), version};
  res.set(http::field::content_type, "application/json");
  res.set(http::field::cache_control, "no-store");
  res.body() = body;
  res.prepare_payload();
  return res;
}

Result<std::pair<std::string, int>> split_host_port(const std::string& hp) {
  std::string host, port;
  if (!hp.empty() && hp[0] == '[') {
    auto close = hp.find(']');
    if (close == std::string::npos || close + 1 >= hp.size() || hp[close + 1] != ':')
      return make_error(fmt::format("'{}': expected [ipv6]:port", hp));
    host = hp.substr(1, close - 1);
    port = hp.substr(close + 2);
  } else {
    auto colon = hp.rfind(':');
    if (colon == std::string::npos) return make_error(fmt::format("'{}': expected host:port", hp));
    host = hp.substr(0, colon);
    port = hp.substr(colon + 1);
  }
  if (host.empty() || port.empty() || port.size() > 5 ||
      port.find_first_not_of("0123456789") != std::string::npos || std::stoi(port) > 65535)
    return make_error(fmt::format("'{}': expected host:port with a port from 0 to 65535", hp));
  return std::make_pair(host, std::stoi(port));
}

template <typename Stream>
class BeastHttpStream : public HttpStream {
 public:
  explicit BeastHttpStream(Stream& stream) : stream_(stream) {}
  asio::awaitable<bool> start_event_stream() override {
    taken_over_ = true;
    std::string head =
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-store\r\n"
        "Connection: close\r\nX-Accel-Buffering: no\r\n\r\n";
    co_return co_await write(std::move(head));
  }
  asio::awaitable<bool> write(std::string data) override {
    beast::error_code ec;
    stream_.expires_after(std::chrono::seconds(10));  // a client that reads nothing is dropped
    co_await asio::async_write(stream_, asio::buffer(data), asio::redirect_error(use_awaitable, ec));
    co_return !ec;
  }
  bool taken_over() const override { return taken_over_; }
  std::optional<asio::ip::tcp::socket> take_tcp_socket() override {
    if constexpr (std::is_same_v<Stream, beast::tcp_stream>) {
      taken_over_ = true;
      stream_.expires_never();
      return stream_.release_socket();
    } else {
      return std::nullopt;
    }
  }
  std::optional<int> peer_pid() const override {
    if constexpr (std::is_same_v<typename Stream::protocol_type, asio::local::stream_protocol>) {
      ucred cred{};
      socklen_t len = sizeof cred;
      int fd = const_cast<Stream&>(stream_).socket().native_handle();
      if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 && cred.pid > 0) return cred.pid;
    }
    return std::nullopt;
  }

 private:
  Stream& stream_;
  bool taken_over_ = false;
};

struct HttpServer::Impl {
  asio::io_context& io;
  HttpHandler handler;
  HttpLimits limits;
  HttpSecurity security;
  HttpWire wire;
  std::vector<std::unique_ptr<asio::ip::tcp::acceptor>> tcp;
  std::vector<std::unique_ptr<asio::local::stream_protocol::acceptor>> unix_;
  std::vector<std::string> unix_paths;
  std::size_t serving = 0;                    // connections served now (counted with wire.workers)
  std::deque<std::function<void()>> waiting;  // accepted, each waiting for a worker, oldest first

  template <typename Stream>
  asio::awaitable<void> session(Stream stream) {
    beast::flat_buffer buffer;
    std::size_t answered = 0;
    for (bool first = true;; first = false) {
      http::request_parser<http::string_body> parser;
      parser.header_limit(static_cast<std::uint32_t>(limits.header_bytes));
      parser.body_limit(limits.body_bytes);
      beast::error_code ec;
      // Between keep-alive requests a connection may sit idle; once a request has begun, it
      // must arrive whole within the read timeout (a client trickling bytes is cut off).
      if (!first && buffer.size() == 0) {
        stream.expires_after(limits.idle_timeout);
        auto space = buffer.prepare(4096);
        std::size_t n =
            co_await stream.async_read_some(space, asio::redirect_error(use_awaitable, ec));
        if (ec) break;
        buffer.commit(n);
      }
      stream.expires_after(limits.read_timeout);
      co_await http::async_read_header(stream, buffer, parser, asio::redirect_error(use_awaitable, ec));
      if (!ec && !parser.is_done()) {
        stream.expires_after(limits.read_timeout);
        co_await http::async_read(stream, buffer, parser, asio::redirect_error(use_awaitable, ec));
      }
      if (ec) {
        unsigned status = 0;
        std::string message;
        if (ec == http::error::body_limit) {
          status = 413;
          message = fmt::format("request body over {} bytes", limits.body_bytes);
        } else if (ec == http::error::header_limit) {
          status = 431;
          message = fmt::format("request headers over {} bytes", limits.header_bytes);
        } else if (ec.category() == beast::error_code(http::error::bad_target).category()) {
          status = 400;
          message = "malformed HTTP request: " + ec.message();
        }
        if (status) {
          auto res = json_response(status, error_json(status == 400 ? "bad_request" : "too_large", message).dump());
          res.keep_alive(false);
          stream.expires_after(std::chrono::seconds(5));
          co_await http::async_write(stream, res, asio::redirect_error(use_awaitable, ec));
        }
        break;  // timeouts, resets, end of stream: just close
      }
      HttpRequest req = parser.release();
      bool keep_alive = req.keep_alive();
      bool head = req.method() == http::verb::head;
      HttpResponse res;
      BeastHttpStream<Stream> takeover(stream);
      constexpr bool over_tcp = std::is_same_v<Stream, beast::tcp_stream>;
      if (auto refusal = check_request(req, security, over_tcp)) {
        res = std::move(*refusal);
      } else {
        try {
          res = co_await handler(std::move(req), takeover);
        } catch (const std::exception& e) {
          spdlog::error("http handler failed: {}", e.what());
          res = json_response(500, error_json("internal", e.what())
                                     .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
        }
      }
      if (takeover.taken_over()) break;
      ++answered;
      if (wire.max_requests != 0 && answered >= wire.max_requests) keep_alive = false;
      if (wire.close_on_error && res.result_int() >= 400) keep_alive = false;
      res.keep_alive(keep_alive);
      if (keep_alive && wire.keep_alive_header)
        res.set(http::field::keep_alive,
                fmt::format("timeout={}, max={}",
                            std::chrono::duration_cast<std::chrono::seconds>(limits.idle_timeout).count(),
                            wire.max_requests));
      res.prepare_payload();
      if (head) {  // the length of the GET's body, without the body (RFC 9110 9.3.2)
        std::size_t length = res.body().size();
        res.body().clear();
        res.content_length(length);
      }
      stream.expires_after(limits.read_timeout);
      if (wire.split_writes) {
        http::response_serializer<http::string_body> sr{res};
        co_await http::async_write_header(stream, sr, asio::redirect_error(use_awaitable, ec));
        if (!ec && !sr.is_done())
          co_await http::async_write(stream, sr, asio::redirect_error(use_awaitable, ec));
      } else {
        co_await http::async_write(stream, res, asio::redirect_error(use_awaitable, ec));
      }
      if (ec || !keep_alive) break;
    }
    beast::error_code ignored;
    stream.socket().shutdown(asio::socket_base::shutdown_both, ignored);
  }

  template <typename Acceptor, typename Stream>
  asio::awaitable<void> accept_loop(Acceptor& acceptor) {
    for (;;) {
      beast::error_code ec;
      auto socket = co_await acceptor.async_accept(asio::redirect_error(use_awaitable, ec));
      if (ec) {
        if (ec == asio::error::operation_aborted || !acceptor.is_open()) co_return;
        spdlog::warn("accept failed: {}", ec.message());
        continue;
      }
      if constexpr (std::is_same_v<Stream, beast::tcp_stream>) {
        if (wire.nodelay) socket.set_option(asio::ip::tcp::no_delay(true), ec);
      }
      if (wire.workers == 0) {
        asio::co_spawn(io, session(Stream(std::move(socket))), asio::detached);
      } else if (serving < wire.workers) {
        serve_counted<Stream>(std::move(socket));
      } else {
        auto held = std::make_shared<decltype(socket)>(std::move(socket));
        waiting.push_back([this, held] { serve_counted<Stream>(std::move(*held)); });
      }
    }
  }

  // A session that holds one of wire.workers until it ends, then hands it to the oldest waiting
  // connection.
  template <typename Stream, typename Socket>
  void serve_counted(Socket socket) {
    ++serving;
    asio::co_spawn(io, session(Stream(std::move(socket))), [this](const std::exception_ptr&) {
      --serving;
      if (waiting.empty()) return;
      auto next = std::move(waiting.front());
      waiting.pop_front();
      next();
    });
  }
};

HttpServer::HttpServer(asio::io_context& io, HttpHandler handler, HttpLimits limits)
    : impl_(new Impl{io, std::move(handler), limits, {}, {}, {}, {}, {}, 0, {}}) {}

HttpServer::~HttpServer() {
  close();
  delete impl_;
}

void HttpServer::close() {
  beast::error_code ec;
  for (auto& a : impl_->tcp) a->close(ec);
  for (auto& a : impl_->unix_) a->close(ec);
  for (const auto& p : impl_->unix_paths) ::unlink(p.c_str());
  impl_->unix_paths.clear();
}

void HttpServer::set_security(HttpSecurity security) { impl_->security = std::move(security); }

void HttpServer::set_wire(HttpWire wire) { impl_->wire = wire; }

Status HttpServer::secure(const std::string& token, const std::string& token_file) {
  HttpSecurity security{.enabled = true, .token = token};
  if (!token_file.empty()) {
    std::string warning;
    auto t = read_token_file(token_file, &warning);
    if (!t) return make_error("daemon.token_file: " + t.error());
    if (!warning.empty()) spdlog::warn("daemon.token_file: {}", warning);
    security.token = std::move(*t);
  }
  set_security(std::move(security));
  return Ok{};
}

Status HttpServer::listen_tcp(const std::string& host_port) {
  auto hp = split_host_port(host_port);
  if (!hp) return make_error(hp.error());
  // The config refuses this too; this catches configs built in code (the demo, tests).
  if (impl_->security.enabled && impl_->security.token.empty() && !is_loopback_host(hp->first))
    return make_error(fmt::format(
        "daemon.listen: {} is reachable from other hosts; set daemon.token or daemon.token_file",
        host_port));
  beast::error_code ec;
  asio::ip::tcp::resolver resolver(impl_->io);
  auto endpoints = resolver.resolve(hp->first, std::to_string(hp->second),
                                    asio::ip::tcp::resolver::passive, ec);
  if (ec || endpoints.empty())
    return make_error(fmt::format("cannot resolve listen address '{}': {}", host_port, ec.message()));
  auto endpoint = endpoints.begin()->endpoint();
  auto acceptor = std::make_unique<asio::ip::tcp::acceptor>(impl_->io);
  acceptor->open(endpoint.protocol(), ec);
  if (!ec) acceptor->set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor->bind(endpoint, ec);
  if (!ec) acceptor->listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return make_error(fmt::format("cannot listen on {}: {}", host_port, ec.message()));
  tcp_port_ = acceptor->local_endpoint().port();
  auto* a = acceptor.get();
  impl_->tcp.push_back(std::move(acceptor));
  asio::co_spawn(impl_->io,
                 impl_->accept_loop<asio::ip::tcp::acceptor, beast::tcp_stream>(*a),
                 asio::detached);
  return Ok{};
}

Status HttpServer::listen_unix(const std::string& path, unsigned mode) {
  using local = asio::local::stream_protocol;
  // A socket file left by a daemon that died is in the way; a live daemon answers connect().
  struct stat st{};
  if (::lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) return make_error(fmt::format("{} exists and is not a socket", path));
    local::socket probe(impl_->io);
    beast::error_code ec;
    probe.connect(local::endpoint(path), ec);
    if (!ec) return make_error(fmt::format("another vramd is listening on {}", path));
    ::unlink(path.c_str());
  }
  beast::error_code ec;
  auto acceptor = std::make_unique<local::acceptor>(impl_->io);
  acceptor->open(local(), ec);
  if (!ec) acceptor->bind(local::endpoint(path), ec);
  if (!ec) acceptor->listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return make_error(fmt::format("cannot listen on {}: {}", path, ec.message()));
  ::chmod(path.c_str(), mode);
  auto* a = acceptor.get();
  impl_->unix_.push_back(std::move(acceptor));
  impl_->unix_paths.push_back(path);
  asio::co_spawn(impl_->io,
                 impl_->accept_loop<local::acceptor, beast::basic_stream<local>>(*a),
                 asio::detached);
  return Ok{};
}

}  // namespace vramd
