#include "cli/client.h"

#include <utility>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <fmt/format.h>

#include "server/auth.h"

namespace vramd {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

namespace {

template <typename Stream>
Result<DaemonReply> exchange(asio::io_context& io, Stream& stream, const std::string& host,
                           const std::string& method, const std::string& target,
                           const std::string& body, const std::string& token) {
  http::request<http::string_body> req{http::string_to_verb(method), target, 11};
  req.set(http::field::host, host);
  req.set(http::field::user_agent, "vramd-cli");
  if (!token.empty()) req.set(http::field::authorization, "Bearer " + token);
  if (!body.empty()) {
    req.set(http::field::content_type, "application/json");
    req.body() = body;
  }
  req.prepare_payload();
  beast::error_code ec;
  beast::flat_buffer buffer;
  http::response<http::string_body> res;
  http::async_write(stream, req, [&](beast::error_code e, size_t) {
    ec = e;
    if (!ec) http::async_read(stream, buffer, res, [&](beast::error_code e2, size_t) { ec = e2; });
  });
  io.run();
  if (ec) return make_error(ec == beast::error::timeout ? "timed out" : ec.message());
  return DaemonReply{res.result_int(), std::move(res.body())};
}

}  // namespace

std::string client_token(const DaemonConfig& daemon) {
  if (!daemon.token.empty() || daemon.token_file.empty()) return daemon.token;
  auto token = read_token_file(daemon.token_file);
  return token ? *token : "";  // not ours to read: the daemon will say 401 if it needs one
}

Result<DaemonReply> http_request(const DaemonAddress& addr, const std::string& method,
                               const std::string& target, const std::string& body,
                               int timeout_ms, const std::string& token) {
  asio::io_context io;
  const std::string& url = addr.url;
  auto timeout = std::chrono::milliseconds(timeout_ms);
  if (url.starts_with("unix:")) {
    std::string path = url.substr(5);
    beast::basic_stream<asio::local::stream_protocol> stream(io);
    beast::error_code ec;
    stream.socket().connect(asio::local::stream_protocol::endpoint(path), ec);
    if (ec) return make_error(fmt::format("cannot connect to {}: {}", path, ec.message()));
    stream.expires_after(timeout);
    return exchange(io, stream, "localhost", method, target, body, token);
  }
  std::string rest = url;
  if (rest.starts_with("http://")) rest = rest.substr(7);
  else return make_error(fmt::format("unsupported daemon URL '{}': use http://HOST:PORT or unix:PATH", url));
  if (auto slash = rest.find('/'); slash != std::string::npos) rest = rest.substr(0, slash);
  std::string host = rest, port = "80";
  if (!rest.empty() && rest[0] == '[') {
    auto close = rest.find(']');
    if (close == std::string::npos) return make_error(fmt::format("bad daemon URL '{}'", url));
    host = rest.substr(1, close - 1);
    if (close + 1 < rest.size() && rest[close + 1] == ':') port = rest.substr(close + 2);
  } else if (auto colon = rest.rfind(':'); colon != std::string::npos) {
    host = rest.substr(0, colon);
    port = rest.substr(colon + 1);
  }
  asio::ip::tcp::resolver resolver(io);
  beast::error_code ec;
  auto endpoints = resolver.resolve(host, port, ec);
  if (ec) return make_error(fmt::format("cannot resolve {}: {}", host, ec.message()));
  beast::tcp_stream stream(io);
  stream.expires_after(timeout);
  stream.connect(endpoints, ec);
  if (ec) return make_error(fmt::format("cannot connect to {}: {}", url, ec.message()));
  return exchange(io, stream, rest, method, target, body, token);
}

}  // namespace vramd
