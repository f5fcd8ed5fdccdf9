#include "services/http_client.h"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>
#include <sys/socket.h>

#include <cerrno>
#include <memory>

#include "core/config.h"

namespace vramd {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

std::string what_failed(std::string_view step, const boost::system::error_code& ec,
                        Duration total) {
  if (ec == beast::error::timeout || ec == asio::error::operation_aborted) {
    return "timed out after " + format_duration(total) + " (" + std::string(step) + ")";
  }
  return std::string(step) + ": " + ec.message();
}

// The resolver is not covered by tcp_stream's timeout; a timer cancels it. Shared so that a
// timer handler already queued when the coroutine finishes touches nothing freed.
struct ResolveState {
  explicit ResolveState(const asio::any_io_executor& ex) : resolver(ex), timer(ex) {}
  tcp::resolver resolver;
  asio::steady_timer timer;
};

}  // namespace

std::string resolve_url(std::string_view base, std::string_view ref) {
  if (ref.find("://") != std::string_view::npos) return std::string(ref);
  std::string out(base);
  while (!out.empty() && out.back() == '/') out.pop_back();
  if (!ref.empty() && ref.front() != '/') out += '/';
  out += ref;
  return out;
}

namespace {

// A connection kept alive, taken back when the server has not closed it meanwhile.
bool still_open(tcp::socket& socket) {
  char c = 0;
  ssize_t n = ::recv(socket.native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
  // 0: the server closed it; > 0: bytes nobody asked for (not a clean connection either).
  return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

// Resolves (a literal address needs no resolver) and connects, by the connect timeout.
asio::awaitable<Result<std::unique_ptr<beast::tcp_stream>>> connect_to(
    const asio::any_io_executor& executor, const HttpUrl& u, Clock::time_point deadline,
    const HttpOptions& options) {
  boost::system::error_code ec;
  auto redirect = asio::redirect_error(asio::use_awaitable, ec);
  std::vector<tcp::endpoint> endpoints;
  boost::system::error_code addr_ec;
  asio::ip::address addr = asio::ip::make_address(u.host, addr_ec);
  if (!addr_ec) {
    endpoints.emplace_back(addr, u.port);
  } else {
    auto rs = std::make_shared<ResolveState>(executor);
    rs->timer.expires_at(deadline);
    rs->timer.async_wait([weak = std::weak_ptr<ResolveState>(rs)](boost::system::error_code e) {
      if (e) return;
      if (auto s = weak.lock()) s->resolver.cancel();
    });
    auto results = co_await rs->resolver.async_resolve(u.host, std::to_string(u.port), redirect);
    rs->timer.cancel();
    if (ec) co_return make_error(what_failed("resolve " + u.host, ec, options.total_timeout));
    for (const auto& r : results) endpoints.push_back(r.endpoint());
  }
  auto stream = std::make_unique<beast::tcp_stream>(executor);
  stream->expires_at(std::min(deadline, Clock::now() + options.connect_timeout));
  co_await stream->async_connect(endpoints, redirect);
  if (ec) {
    if (ec == beast::error::timeout && Clock::now() < deadline) {
      co_return make_error("connect: timed out after " + format_duration(options.connect_timeout));
    }
    co_return make_error(what_failed("connect", ec, options.total_timeout));
  }
  co_return stream;
}

}  // namespace

struct HttpConnections::Impl {
  struct Idle {
    std::string key;  // host:port
    std::unique_ptr<beast::tcp_stream> stream;
    Clock::time_point since;
  };
  static constexpr size_t kMaxIdle = 8;
  // Kept no longer than this unused (servers close theirs after 5 s to minutes).
  static constexpr Clock::duration kMaxIdleFor = std::chrono::seconds(30);

  std::unique_ptr<beast::tcp_stream> take(const std::string& key) {
    for (size_t i = idle.size(); i-- > 0;) {
      if (idle[i].key != key) continue;
      Idle kept = std::move(idle[i]);
      idle.erase(idle.begin() + static_cast<std::ptrdiff_t>(i));
      if (Clock::now() - kept.since < kMaxIdleFor && still_open(kept.stream->socket()))
        return std::move(kept.stream);
    }
    return nullptr;
  }
  void give(std::string key, std::unique_ptr<beast::tcp_stream> stream) {
    stream->expires_never();
    idle.push_back({std::move(key), std::move(stream), Clock::now()});
    if (idle.size() > kMaxIdle) idle.erase(idle.begin());
  }

  std::vector<Idle> idle;
  uint64_t opened = 0;
};

HttpConnections::HttpConnections() : impl_(std::make_unique<Impl>()) {}
HttpConnections::~HttpConnections() = default;
size_t HttpConnections::idle() const { return impl_->idle.size(); }
uint64_t HttpConnections::opened() const { return impl_->opened; }

asio::awaitable<Result<HttpReply>> http_call(asio::any_io_executor executor,
                                             std::string_view method, std::string url,
                                             std::string body, HttpOptions options) {
  const Clock::time_point deadline = Clock::now() + options.total_timeout;
  http::verb verb = http::string_to_verb(method);
  if (verb == http::verb::unknown) co_return make_error("unknown HTTP method");
  size_t query = url.find_first_of("?#");
  std::string base = url.substr(0, query);
  std::string query_part = query == std::string::npos ? "" : url.substr(query);
  // Split the path off before validating: parse_http_url accepts a path but no query.
  Result<HttpUrl> u = parse_http_url(base);
  if (!u) co_return make_error("bad URL: " + u.error());
  if (u->scheme == "https") {
    co_return make_error("https is not supported; put the service behind http on localhost");
  }
  std::string target = u->path.empty() ? "/" : u->path;
  if (base.size() > 0 && base.back() == '/' && target != "/") target += '/';
  target += query_part;

  boost::system::error_code ec;
  auto redirect = asio::redirect_error(asio::use_awaitable, ec);
  // Only a GET reuses a connection: it is safe to send again when a kept one turns out closed.
  HttpConnections::Impl* pool =
      options.connections && verb == http::verb::get ? &options.connections->impl() : nullptr;
  std::string key = u->host + ":" + std::to_string(u->port);

  http::request<http::string_body> req{verb, target, 11};
  req.set(http::field::host, key);
  req.set(http::field::user_agent, "vramd");
  req.set(http::field::accept, "application/json, text/plain, */*");
  if (!options.bearer_token.empty()) {
    req.set(http::field::authorization, "Bearer " + options.bearer_token);
  }
  if (!body.empty() || verb == http::verb::post || verb == http::verb::put) {
    req.set(http::field::content_type,
            options.content_type.empty() ? std::string("application/json") : options.content_type);
  }
  req.body() = std::move(body);
  req.keep_alive(pool != nullptr);
  req.prepare_payload();

  for (int attempt = 0;; ++attempt) {
    std::unique_ptr<beast::tcp_stream> stream = pool && attempt == 0 ? pool->take(key) : nullptr;
    bool reused = stream != nullptr;
    if (!stream) {
      auto connected = co_await connect_to(executor, *u, deadline, options);
      if (!connected) co_return make_error(connected.error());
      stream = std::move(*connected);
      if (pool) ++pool->opened;
    }

    stream->expires_at(deadline);
    co_await http::async_write(*stream, req, redirect);
    beast::flat_buffer buffer;
    http::response_parser<http::string_body> parser;
    parser.body_limit(options.body_limit);
    const char* step = "send";
    if (!ec) {
      step = "read reply";
      co_await http::async_read(*stream, buffer, parser, redirect);
    }
    if (ec && !(ec == http::error::end_of_stream && parser.is_done())) {
      // A kept connection the server closed meanwhile: once more, on a new one.
      if (reused && !parser.got_some() && Clock::now() < deadline) continue;
      co_return make_error(what_failed(step, ec, options.total_timeout));
    }
    http::response<http::string_body> res = parser.release();
    if (pool && !ec && res.keep_alive()) {
      pool->give(key, std::move(stream));
    } else {
      beast::error_code ignored;
      stream->socket().shutdown(tcp::socket::shutdown_both, ignored);
    }
    HttpReply reply;
    reply.status = res.result_int();
    reply.content_type = std::string(res[http::field::content_type]);
    reply.body = std::move(res.body());
    co_return reply;
  }
}

}  // namespace vramd
