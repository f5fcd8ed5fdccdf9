// A small async HTTP/1.1 client for talking to GPU servers on the event loop, bounded by a
// connect timeout and a total timeout, so a server that accepts and never answers costs at most
// the total timeout and never blocks other coroutines. One request per connection, unless the
// caller hands in its HttpConnections: then GETs reuse a kept-alive connection.
#pragma once

#include <memory>
#include <utility>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <chrono>
#include <cstddef>
#include <string>
#include <string_view>

#include "core/result.h"
#include "core/units.h"

namespace vramd {

struct HttpReply {
  unsigned status = 0;  // 200, 404, ...
  std::string body;
  std::string content_type;  // as sent, "" when absent
};

// Idle kept-alive connections, for GETs to the same servers again and again (a service's probes,
// every few seconds: a request each, not a TCP handshake, an accept and a teardown each). A
// connection the server has closed is noticed before reuse; a reused one that fails before any
// byte of the answer is retried once on a new connection (GET only: it is safe to repeat).
// Belongs to one executor's coroutines (not thread-safe); destroy it before that io_context.
class HttpConnections {
 public:
  HttpConnections();
  ~HttpConnections();
  HttpConnections(const HttpConnections&) = delete;
  HttpConnections& operator=(const HttpConnections&) = delete;
  size_t idle() const;  // connections kept now
  uint64_t opened() const;  // connections opened through it, ever

  struct Impl;
  Impl& impl() { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

struct HttpOptions {
  Duration connect_timeout = std::chrono::seconds(2);
  Duration total_timeout = std::chrono::seconds(5);  // resolve + connect + write + read
  // Sent as "Authorization: Bearer <key>". Never appears in an error message.
  std::string bearer_token;
  // Content-Type of the body; when empty and the body is not, "application/json".
  std::string content_type;
  std::size_t body_limit = std::size_t{16} * 1024 * 1024;
  // Where a GET may take and give back a kept-alive connection; null: a connection per request.
  HttpConnections* connections = nullptr;
};

// Sends `method` ("GET", "POST", "PUT", "DELETE") to `url` ("http://host:port/path?query") with
// `body` and returns the reply, whatever its status. Errors (never thrown) read like
// "connect: Connection refused", "timed out after 5s", "https is not supported; ...".
boost::asio::awaitable<Result<HttpReply>> http_call(boost::asio::any_io_executor executor,
                                                    std::string_view method, std::string url,
                                                    std::string body = {},
                                                    HttpOptions options = {});

// `ref` resolved against a service's base URL: an absolute "http://..." stays as it is; a path
// "/x" is appended to `base` (which keeps its own path prefix).
std::string resolve_url(std::string_view base, std::string_view ref);

}  // namespace vramd
