// A small async HTTP/1.1 client for talking to GPU servers on the event loop: one request per
// connection, bounded by a connect timeout and a total timeout, so a server that accepts and
// never answers costs at most the total timeout and never blocks other coroutines.
#pragma once

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

struct HttpOptions {
  Duration connect_timeout = std::chrono::seconds(2);
  Duration total_timeout = std::chrono::seconds(5);  // resolve + connect + write + read
  // Sent as "Authorization: Bearer <key>". Never appears in an error message.
  std::string bearer_token;
  // Content-Type of the body; when empty and the body is not, "application/json".
  std::string content_type;
  std::size_t body_limit = std::size_t{16} * 1024 * 1024;
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
