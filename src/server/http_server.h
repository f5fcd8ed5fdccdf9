// A small HTTP/1.1 server on Boost.Beast with C++20 coroutines: TCP and a unix socket, one
// io_context, limits on headers (16 KiB), bodies (1 MiB) and slow clients.
#pragma once

// GCC 12 needs <utility> before Boost's awaitable.hpp.
#include <utility>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <functional>
#include <optional>
#include <string>

#include "core/result.h"

namespace vramd {

using HttpRequest = boost::beast::http::request<boost::beast::http::string_body>;
using HttpResponse = boost::beast::http::response<boost::beast::http::string_body>;
// Lets a handler take the connection over for a stream (Server-Sent Events). After the handler
// returns, a connection that was taken over is closed and the returned response is ignored.
class HttpStream {
 public:
  virtual ~HttpStream() = default;
  // Writes the response head (200, text/event-stream, no length). false when the client is gone.
  virtual boost::asio::awaitable<bool> start_event_stream() = 0;
  // Writes raw bytes of the body. false when the client is gone or too slow (write timeout).
  virtual boost::asio::awaitable<bool> write(std::string data) = 0;
  virtual bool taken_over() const = 0;
  // Hands the TCP connection to the handler (a WebSocket upgrade): the server then writes no
  // response and reads no further request on it. nullopt over the unix socket.
  virtual std::optional<boost::asio::ip::tcp::socket> take_tcp_socket() { return std::nullopt; }
  // The client's pid on the unix socket (SO_PEERCRED); nullopt over TCP.
  virtual std::optional<int> peer_pid() const { return std::nullopt; }
};

using HttpHandler = std::function<boost::asio::awaitable<HttpResponse>(HttpRequest, HttpStream&)>;

struct HttpLimits {
  std::size_t header_bytes = std::size_t{16} * 1024;
  std::size_t body_bytes = std::size_t{1024} * 1024;
  std::chrono::seconds read_timeout{15};  // a request must arrive whole within this
  // A keep-alive connection idle this long after its last response byte is closed (a FIN).
  std::chrono::milliseconds idle_timeout{std::chrono::seconds(60)};
};

// How the server behaves on the wire beyond what its answers mean: the habits of the servers
// vramd sits in front of (../shared/reference/transport.md), for the stand-ins in tests/fakes.
// The defaults are vramd's own API server's: every connection served at once, no cap on requests,
// one send per response, the socket's options as the system gives them (Nagle on).
struct HttpWire {
  // At most this many connections served at once (0: no limit). Further accepted connections
  // wait in order, unread and unanswered, until a served one closes: cpp-httplib's thread pool,
  // where a connection holds its worker while it idles between requests too.
  std::size_t workers = 0;
  // The Nth response on a connection carries `Connection: close`, then the server closes (0: no
  // limit); cpp-httplib's 100.
  std::size_t max_requests = 0;
  // Keep-alive responses carry `Keep-Alive: timeout=<idle s>, max=<max_requests>` (cpp-httplib).
  bool keep_alive_header = false;
  // A response with status >= 400 carries `Connection: close`, then the server closes
  // (cpp-httplib >= 0.28).
  bool close_on_error = false;
  // The status line and headers in one send(), the body in another (cpp-httplib < 0.34,
  // uvicorn). Streams (HttpStream) are written as the handler writes them either way.
  bool split_writes = false;
  // TCP_NODELAY on accepted TCP sockets (uvicorn, aiohttp, Go). Off: Nagle's algorithm stays on.
  bool nodelay = false;
};

// The daemon's access rules over TCP (server/auth.h): a bearer token, and without one, loopback
// only (listen address and Host header); cross-origin mutations are refused either way. Off by
// default: fakes and probes are plain servers. The unix socket is never checked.
struct HttpSecurity {
  bool enabled = false;
  std::string token;  // empty: no token (then listen_tcp refuses addresses beyond loopback)
};

class HttpServer {
 public:
  HttpServer(boost::asio::io_context& io, HttpHandler handler, HttpLimits limits = {});
  ~HttpServer();

  // Call before listen_tcp.
  void set_security(HttpSecurity security);
  // Call before listening.
  void set_wire(HttpWire wire);
  // Turns the rules on with the daemon's token: `token`, or the content of `token_file` (error
  // when it cannot be read or is empty; a warning in the log when others may read it).
  Status secure(const std::string& token, const std::string& token_file);

  // "127.0.0.1:7100", "[::1]:7100", "0.0.0.0:7100"; port 0 picks a free one (see tcp_port()).
  // With security on and no token, an address beyond loopback is refused.
  Status listen_tcp(const std::string& host_port);
  // Creates the socket file (replacing a stale one) with the given mode.
  Status listen_unix(const std::string& path, unsigned mode = 0660);
  int tcp_port() const { return tcp_port_; }
  void close();

 private:
  struct Impl;
  Impl* impl_;
  int tcp_port_ = 0;
};

// Splits "host:port" / "[v6]:port". Error on a bad form.
Result<std::pair<std::string, int>> split_host_port(const std::string& host_port);

// A JSON response with the right content type.
HttpResponse json_response(unsigned status, const std::string& body, unsigned version = 11);

}  // namespace vramd
