#include "proxy/proxy.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <array>
#include <charconv>
#include <deque>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/core/read_size.hpp>
#include <boost/beast/http.hpp>
#include <fstream>
#include <set>
#include <span>
#include <nlohmann/json.hpp>

#include "core/config.h"
#include "proxy/conn.h"
#include "proxy/limiter.h"
#include "proxy/router.h"
#include "proxy/wire.h"

namespace vramd {

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using asio::use_awaitable;
using Clock = std::chrono::steady_clock;
using Client = proxy_detail::Conn;
using proxy_detail::ConnPtr;

constexpr std::size_t kHeaderLimit = std::size_t{64} * 1024;
constexpr std::size_t kIdleUpstreams = 64;  // keep-alive connections kept per service
constexpr std::size_t kChunk = std::size_t{16} * 1024;
constexpr auto kHeaderTimeout = std::chrono::seconds(15);
constexpr auto kKeepAliveIdle = std::chrono::seconds(60);
constexpr auto kClientWriteTimeout = std::chrono::seconds(30);
constexpr auto kWakeAnswerGrace = std::chrono::seconds(2);  // past wake_timeout (hold())

// GCC 12 may destroy a temporary inside a co_await expression twice (a double free when it owns
// memory): every argument of an awaited call here is a named object, or a reference to one.
using Extra = std::vector<std::pair<std::string, std::string>>;
const Extra kNoExtra;
const std::string kNoModel;
const std::string kContinue = "HTTP/1.1 100 Continue\r\n\r\n";

void no_delay(tcp::socket& s) {
  beast::error_code ec;
  s.set_option(tcp::no_delay(true), ec);
}

// An ACK now for what came in, and for what comes next until vramd sends again. A server that
// writes a response's head and body in two sends without TCP_NODELAY (llama-server before about
// b4760) holds the body back until the head is ACKed (Nagle), and Linux delays that ACK on a
// kept-alive connection by 40 ms or more, hoping to send it with data: a 40 ms stall a request.
// Set after each request is written (sending puts the socket back in that delaying mode).
void quick_ack(tcp::socket& s) {
  int one = 1;
  ::setsockopt(s.native_handle(), IPPROTO_TCP, TCP_QUICKACK, &one, sizeof one);
}

// An OpenAI-style error body: {"error":{"message","type","code"}}.
std::string error_body(const std::string& type, const std::string& message,
                       nlohmann::json extra = nlohmann::json::object()) {
  nlohmann::json err = {{"message", message}, {"type", type}, {"code", type}};
  for (auto& [k, v] : extra.items()) err[k] = v;
  return nlohmann::json{{"error", err}}.dump(-1, ' ', false,
                                             nlohmann::json::error_handler_t::replace);
}

bool has_token(std::string_view value, std::string_view token) {
  size_t at = 0;
  while (at <= value.size()) {
    size_t comma = value.find(',', at);
    std::string_view part = value.substr(at, comma == std::string_view::npos ? comma : comma - at);
    while (!part.empty() && part.front() == ' ') part.remove_prefix(1);
    while (!part.empty() && part.back() == ' ') part.remove_suffix(1);
    if (beast::iequals(part, token)) return true;
    if (comma == std::string_view::npos) break;
    at = comma + 1;
  }
  return false;
}

bool is_upgrade(const http::fields& f) {
  return f.count(http::field::upgrade) > 0 && has_token(f[http::field::connection], "upgrade");
}

// Constant time in the key's length, whichever key matches (all are compared).
bool key_ok(std::string_view authorization, const std::vector<std::string>& keys) {
  constexpr std::string_view kBearer = "bearer ";
  if (authorization.size() < kBearer.size() ||
      !beast::iequals(authorization.substr(0, kBearer.size()), kBearer))
    return false;
  std::string_view given = authorization.substr(kBearer.size());
  bool ok = false;
  for (const std::string& key : keys) {
    unsigned char diff = given.size() == key.size() ? 0 : 1;
    for (size_t i = 0; i < key.size(); ++i) {
      unsigned char g = i < given.size() ? static_cast<unsigned char>(given[i]) : 0;
      diff |= g ^ static_cast<unsigned char>(key[i]);
    }
    ok |= diff == 0;
  }
  return ok;
}

// host:port, where port 0 (pick a free one, for tests) is allowed too.
Result<HostPort> parse_listen(const std::string& hp) {
  if (hp.size() > 2 && hp.compare(hp.size() - 2, 2, ":0") == 0) {
    Result<HostPort> r = parse_host_port(hp.substr(0, hp.size() - 1) + "1");
    if (r) r->port = 0;
    return r;
  }
  return parse_host_port(hp);
}

// Two listen/upstream addresses naming the same socket on this host.
bool same_socket(const HostPort& a, const HostPort& b) {
  if (a.port != b.port) return false;
  auto local = [](const std::string& h) {
    return is_loopback_host(h) || h == "0.0.0.0" || h == "::";
  };
  return a.host == b.host || (local(a.host) && local(b.host));
}

// Parses what `b` holds already. False when the parser needs more bytes (then read_some);
// true when it made progress or failed (ec). Beast's async_read_some parses the buffer first
// too, but completes through a posted handler even when no read was needed: a round trip
// through the scheduler for the head of nearly every request and the body of most answers.
template <bool isRequest>
bool parse_buffered(http::basic_parser<isRequest>& p, beast::flat_buffer& b,
                    beast::error_code& ec) {
  if (b.size() == 0) return false;
  std::size_t used = p.put(b.data(), ec);
  b.consume(used);
  if (ec != http::error::need_more) return true;
  ec = {};
  return false;
}

// What a client connection's requests reuse, one after another: allocated once per connection,
// not per request (a 16 KiB buffer in the coroutine frame was a malloc a request).
struct Scratch {
  std::string head;         // a head being written
  beast::flat_buffer ubuf;  // what the service sent, not parsed yet
  std::array<char, kChunk> body;  // one piece of a body
  UsageScan usage;                // the response body's tail: its tokens (request_log.h)
};

// A request waiting for a connection to a service that has max_connections open: handed an
// idle one, or the right to open one, in arrival order.
struct ConnWaiter {
  explicit ConnWaiter(const asio::any_io_executor& ex) : timer(ex) {}
  asio::steady_timer timer;
  ConnPtr handed;            // a kept-alive connection, handed over as it came back
  bool may_connect = false;  // one closed: this waiter's connection is counted already
};

// The connections to one service (docs/proxy.md, "Upstream connections"): at most
// max_connections open, idle ones included; an idle one is dropped before the service's own
// keep-alive timeout would close it (the race that sends a request into a closing connection).
struct Upstream {
  Upstream(ProxyServiceOptions o)
      : opt(std::move(o)), limit(opt.max_concurrent, opt.max_queue), keep_idle(keep_for(opt.keep_alive_timeout)) {}
  struct Idle {
    ConnPtr conn;
    Clock::time_point since;
  };
  ProxyServiceOptions opt;
  HttpUrl url;
  std::vector<tcp::endpoint> endpoints;
  std::vector<Idle> idle;  // keep-alive connections to the service, the latest last
  int open = 0;            // connections open to it: idle and in use (not a WebSocket's)
  bool shut = false;       // the proxy closed: nobody waits, nothing is kept
  std::deque<std::shared_ptr<ConnWaiter>> waiting;
  ConcurrencyLimit limit;
  Clock::duration keep_idle;  // how long an idle connection is kept
  std::unique_ptr<tcp::acceptor> acceptor;
  int port = 0;

  // An idle connection is kept a margin short of the service's timeout: a fifth of it, at least
  // 0.5 s (4 s for 5 s). No timeout: a minute, so that vramd does not hold a connection forever.
  static Clock::duration keep_for(Duration timeout) {
    if (timeout <= Duration::zero()) return std::chrono::seconds(60);
    Clock::duration margin = std::max<Clock::duration>(timeout / 5, std::chrono::milliseconds(500));
    return std::max<Clock::duration>(timeout - margin, std::chrono::milliseconds(100));
  }
  // A `Keep-Alive: timeout=N` from the service shorter than the one assumed: N wins.
  void heard_timeout(std::chrono::seconds t) {
    keep_idle = std::min(keep_idle, keep_for(t));
  }
  bool at_limit() const { return opt.max_connections > 0 && open >= opt.max_connections; }

  // A connection closed: the first waiter may open one in its place.
  void closed_one() {
    --open;
    admit_waiters();
  }
  // While there is room, the first waiters may open a connection each (counted for them).
  void admit_waiters() {
    while (!shut && !waiting.empty() && !at_limit()) {
      std::shared_ptr<ConnWaiter> w = std::move(waiting.front());
      waiting.pop_front();
      ++open;
      w->may_connect = true;
      w->timer.cancel();
    }
  }
  // A connection whose answer was read whole: to the first waiter, else kept idle.
  void give_back(ConnPtr c, std::size_t max_idle) {
    if (shut) {
      c.reset();
      --open;
      return;
    }
    if (!waiting.empty()) {
      std::shared_ptr<ConnWaiter> w = std::move(waiting.front());
      waiting.pop_front();
      w->handed = std::move(c);
      w->timer.cancel();
      return;
    }
    if (idle.size() >= max_idle) {
      c.reset();
      closed_one();
      return;
    }
    c->expires_never();
    idle.push_back({std::move(c), Clock::now()});
  }
  // Every idle connection closed (the service restarted, or vramd stops).
  void drop_idle() {
    while (!idle.empty()) {
      idle.pop_back();
      closed_one();
    }
  }
};

// A connection to a service, counted in its Upstream's `open` until it is closed or given back.
class UpConn {
 public:
  UpConn() = default;
  UpConn(const UpConn&) = delete;
  UpConn& operator=(const UpConn&) = delete;
  ~UpConn() { reset(); }
  void set(ConnPtr c, Upstream& svc) {
    reset();
    conn_ = std::move(c);
    svc_ = &svc;
  }
  void reset() {
    if (!conn_) return;
    conn_.reset();
    if (svc_) svc_->closed_one();
  }
  // Kept for the next request (or handed to one waiting).
  void give_back(std::size_t max_idle) {
    Upstream* svc = svc_;
    svc->give_back(std::move(conn_), max_idle);
  }
  // No longer counted (a WebSocket: its connection lives as long as the tunnel, outside the
  // limit); it is still closed when this goes.
  void uncount() {
    if (conn_ && svc_) svc_->closed_one();
    svc_ = nullptr;
  }
  explicit operator bool() const { return static_cast<bool>(conn_); }
  Client& operator*() const { return *conn_; }
  Client* operator->() const { return conn_.operator->(); }

 private:
  ConnPtr conn_;
  Upstream* svc_ = nullptr;
};

// One wake in flight for (service, model); every request held for it waits on it.
struct WakeState {
  bool done = false;
  WakeResult result;
  std::vector<std::string> messages;
  std::vector<asio::steady_timer*> waiters;  // in arrival order: released in that order
  void notify() {
    for (auto* t : waiters) t->cancel();
  }
};

// What a peek at a socket finds without waiting: nothing yet, data, or its end (EOF or an error).
enum class Peek { empty, data, closed };
Peek peek(Client& s) {
  char c;
  ssize_t n = ::recv(s.socket().native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n > 0) return Peek::data;
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return Peek::empty;
  return Peek::closed;
}

// An idle kept connection is reusable only while it has nothing to say (not even a close).
bool alive(Client& s) { return peek(s) == Peek::empty; }

// The client closed its side; data it sent ahead (a pipelined request) is not a close.
bool peer_closed(Client& s) { return peek(s) == Peek::closed; }

std::string chunk(std::string_view data) {
  return fmt::format("{:x}\r\n", data.size()) + std::string(data) + "\r\n";
}

}  // namespace

Result<std::vector<std::string>> read_api_keys_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return make_error(fmt::format("proxy.api_keys_file: cannot read {}", path));
  std::vector<std::string> keys;
  std::string line;
  while (std::getline(in, line)) {
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t'))
      line.pop_back();
    size_t start = line.find_first_not_of(" \t");
    if (start == std::string::npos || line[start] == '#') continue;
    keys.push_back(line.substr(start));
  }
  if (keys.empty()) return make_error(fmt::format("proxy.api_keys_file: {} holds no key", path));
  return keys;
}

Status check_proxy_listen(const std::string& where, const std::string& host_port, bool have_keys) {
  Result<HostPort> hp = parse_listen(host_port);
  if (!hp) return make_error(where + ": " + hp.error());
  if (!have_keys && !is_loopback_host(hp->host)) {
    return make_error(
        fmt::format("{}: {} is reachable from other hosts; set [proxy] api_keys or api_keys_file",
                    where, host_port));
  }
  return Ok{};
}

// Coroutines hold a shared_ptr to the Impl: frames left when the io_context goes away are
// destroyed after the Proxy, and must find it (`closed`: then they touch nothing else).
struct Proxy::Impl : std::enable_shared_from_this<Proxy::Impl> {
  Impl(asio::io_context& io, ProxyOptions options, ProxyHooks& hooks)
      : io(io), options(std::move(options)), hooks(hooks) {}
  asio::io_context& io;
  ProxyOptions options;
  ProxyHooks& hooks;
  ProxyMetrics metrics;
  std::vector<std::unique_ptr<Upstream>> upstreams;
  std::unique_ptr<tcp::acceptor> front;
  int front_port = 0;
  std::map<std::string, std::shared_ptr<WakeState>> wakes;
  bool closed = false;  // the Proxy is gone

  // Where the proxies listen, and where a service may not be (vramd's own API): set at start.
  std::vector<HostPort> ours, forbidden;

  // The service's URL checked (http://, not vramd's API nor one of the proxy's own addresses)
  // and resolved.
  Status reach(Upstream& u) {
    Result<HttpUrl> url = parse_http_url(u.opt.url);
    if (!url) return make_error("services." + u.opt.name + ".url: " + url.error());
    if (url->scheme != "http")
      return make_error("services." + u.opt.name +
                        ": the proxy forwards to http:// URLs only (got " + u.opt.url + ")");
    u.url = *url;
    HostPort target{url->host, url->port};
    for (const auto& f : forbidden)
      if (same_socket(f, target))
        return make_error(
            fmt::format("services.{}: url {} is vramd's own API; the proxy never forwards there",
                        u.opt.name, u.opt.url));
    for (const auto& o : ours)
      if (same_socket(o, target) && o.port != 0)
        return make_error(fmt::format("services.{}: url {} is one of the proxy's own addresses",
                                      u.opt.name, u.opt.url));
    beast::error_code ec;
    tcp::resolver resolver(io);
    auto eps = resolver.resolve(url->host, std::to_string(url->port), ec);
    if (ec)
      return make_error(
          fmt::format("services.{}: cannot resolve {}: {}", u.opt.name, url->host, ec.message()));
    u.endpoints.clear();
    for (const auto& e : eps) u.endpoints.push_back(e.endpoint());
    return Ok{};
  }

  Upstream* find(const std::string& name) {
    for (auto& u : upstreams)
      if (u->opt.name == name) return u.get();
    return nullptr;
  }

  // The services' models (the hooks' list), then each proxied service's configured `models`.
  // A model a service is named with twice (loaded and installed, probed and configured) is
  // listed once, where it came first.
  std::vector<ModelEntry> entries_of(const ModelList& list) const {
    std::vector<ModelEntry> all;
    std::set<std::pair<std::string, std::string>> seen;
    auto add = [&](const ModelEntry& e) {
      if (seen.emplace(e.model, e.service).second) all.push_back(e);
    };
    all.reserve((list ? list->size() : 0) + upstreams.size());
    if (list)
      for (const auto& e : *list) add(e);
    for (const auto& u : upstreams)
      for (const auto& m : u->opt.models) add({m, u->opt.name, u->opt.ollama_api});
    return all;
  }
  std::vector<ModelEntry> model_entries() { return entries_of(hooks.models()); }

  // The front door's route table: built again only when the hooks hand out another list, so a
  // request looks its model up in a table kept, not in one copied for it. Shared: a request
  // holds the table it routed by across its awaits.
  ModelList routed_list;
  std::shared_ptr<const ModelTable> routes;
  std::shared_ptr<const ModelTable> route_table() {
    ModelList list = hooks.models();
    if (!routes || list != routed_list) {
      routes = std::make_shared<const ModelTable>(entries_of(list), options.aliases);
      routed_list = std::move(list);
    }
    return routes;
  }

  Status open(std::unique_ptr<tcp::acceptor>& acceptor, int& port, const std::string& hp,
              Upstream* fixed) {
    Result<HostPort> addr = parse_listen(hp);
    if (!addr) return make_error(addr.error());
    beast::error_code ec;
    tcp::resolver resolver(io);
    auto eps = resolver.resolve(addr->host, std::to_string(addr->port), tcp::resolver::passive, ec);
    if (ec || eps.empty())
      return make_error(fmt::format("cannot resolve '{}': {}", hp, ec.message()));
    auto a = std::make_unique<tcp::acceptor>(io);
    tcp::endpoint ep = eps.begin()->endpoint();
    a->open(ep.protocol(), ec);
    if (!ec) a->set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec) a->bind(ep, ec);
    if (!ec) a->listen(asio::socket_base::max_listen_connections, ec);
    if (ec) return make_error(fmt::format("cannot listen on {}: {}", hp, ec.message()));
    port = a->local_endpoint().port();
    acceptor = std::move(a);
    asio::co_spawn(io, accept_loop(*acceptor, fixed, shared_from_this()), asio::detached);
    return Ok{};
  }

  asio::awaitable<void> accept_loop(tcp::acceptor& acceptor, Upstream* fixed,
                                    std::shared_ptr<Impl> keep) {
    for (;;) {
      beast::error_code ec;
      tcp::socket s = co_await acceptor.async_accept(asio::redirect_error(use_awaitable, ec));
      if (ec) {
        if (ec == asio::error::operation_aborted || !acceptor.is_open()) co_return;
        continue;
      }
      asio::co_spawn(io, session(std::move(s), fixed, keep), asio::detached);
    }
  }

  // http::async_read_some for when parse_buffered found too little: reads, then parses, until
  // the parser has made progress. End of stream as Beast reads it: the end of a message that
  // runs to the close, else http::error::end_of_stream.
  template <bool isRequest>
  static asio::awaitable<beast::error_code> read_some(Client& s, beast::flat_buffer& b,
                                                      http::basic_parser<isRequest>& p) {
    beast::error_code ec;
    for (;;) {
      std::size_t size = beast::read_size(b, 65536);
      if (size == 0) co_return http::error::buffer_overflow;
      // At least a body piece's worth: read_size alone stays at the buffer's capacity, 512
      // bytes after a small head, a read call per 512 bytes of a large body.
      size = std::max(size, std::min(kChunk, b.max_size() - b.size()));
      std::size_t n =
          co_await s.async_read_some(b.prepare(size), asio::redirect_error(use_awaitable, ec));
      b.commit(n);
      if (ec == asio::error::eof) {
        if (!p.got_some()) co_return http::error::end_of_stream;
        ec = {};
        p.put_eof(ec);
        co_return ec;
      }
      if (ec) co_return ec;
      if (parse_buffered(p, b, ec)) co_return ec;
    }
  }

  // http::async_read_header, a read only when what is buffered holds no whole head.
  template <bool isRequest>
  static asio::awaitable<beast::error_code> read_header(Client& s, beast::flat_buffer& b,
                                                        http::basic_parser<isRequest>& p) {
    beast::error_code ec;
    while (!ec && !p.is_header_done())
      if (!parse_buffered(p, b, ec)) ec = co_await read_some(s, b, p);
    co_return ec;
  }

  asio::awaitable<bool> respond(Client& c, unsigned status, const std::string& body, bool keep,
                                unsigned version, const Extra& extra = kNoExtra) {
    http::response<http::string_body> res{static_cast<http::status>(status), version};
    res.set(http::field::content_type, "application/json");
    res.set(http::field::cache_control, "no-store");
    for (auto& [k, v] : extra) res.set(k, v);
    res.body() = body;
    res.keep_alive(keep);
    res.prepare_payload();
    beast::error_code ec;
    c.expires_after(kClientWriteTimeout);
    co_await http::async_write(c, res, asio::redirect_error(use_awaitable, ec));
    co_return keep && !ec;
  }

  asio::awaitable<void> session(tcp::socket socket, Upstream* fixed, [[maybe_unused]] std::shared_ptr<Impl> keep) {
    no_delay(socket);
    beast::error_code ec;
    std::string peer = socket.remote_endpoint(ec).address().to_string();
    ConnPtr owner(std::make_shared<Client>(std::move(socket)));
    Client& client = *owner;
    beast::flat_buffer cbuf;
    auto scratch = std::make_unique<Scratch>();
    for (bool first = true;; first = false) {
      if (!first && cbuf.size() == 0) {
        client.expires_after(kKeepAliveIdle);
        std::size_t n = co_await client.async_read_some(cbuf.prepare(4096),
                                                        asio::redirect_error(use_awaitable, ec));
        if (ec) break;
        cbuf.commit(n);
      }
      http::request_parser<http::buffer_body> parser;
      parser.header_limit(kHeaderLimit);
      parser.body_limit(std::numeric_limits<std::uint64_t>::max());
      client.expires_after(kHeaderTimeout);
      ec = {};
      while (!ec && !parser.is_header_done())
        if (!parse_buffered(parser, cbuf, ec)) ec = co_await read_some(client, cbuf, parser);
      if (ec) {
        std::string body;
        unsigned status = 0;
        if (ec == http::error::header_limit) {
          status = 431;
          body = error_body("too_large", "request headers too large");
        } else if (ec.category() == beast::error_code(http::error::bad_target).category()) {
          status = 400;
          body = error_body("bad_request", ec.message());
        }
        if (status) co_await respond(client, status, body, false, 11);
        break;
      }
      bool keep = false;
      try {
        keep = co_await handle(client, cbuf, parser, peer, fixed, *scratch);
      } catch (const std::exception& e) {
        spdlog::error("proxy: {}", e.what());
      }
      if (!keep) break;
    }
    client.socket().shutdown(tcp::socket::shutdown_both, ec);
  }

  // A request's stages, each of which may answer it and end the chain: auth, then (front door)
  // route, then exchange(): limit, activity, hold, forward. A stage that answers returns whether
  // the client connection may carry another request; one that lets the request on, nothing.
  using Stop = std::optional<bool>;

  asio::awaitable<bool> handle(Client& c, beast::flat_buffer& cbuf,
                               http::request_parser<http::buffer_body>& parser,
                               const std::string& peer, Upstream* fixed, Scratch& sc) {
    auto& req = parser.get();
    // auth: the client's key, where [proxy] api_keys asks for one (checked without entering a
    // coroutine: most requests pass).
    if (!options.api_keys.empty() && !key_ok(req[http::field::authorization], options.api_keys)) {
      co_await refuse_unauthorized(c, req.version());
      co_return false;
    }
    const bool wants_sse =
        req[http::field::accept].find("text/event-stream") != std::string_view::npos;
    if (fixed) {
      bool keep =
          co_await exchange(c, cbuf, req, &parser, *fixed, kNoModel, wants_sse, peer, sc);
      co_return keep;
    }
    bool keep = co_await front_door(c, cbuf, parser, peer, wants_sse, sc);
    co_return keep;
  }

  asio::awaitable<void> refuse_unauthorized(Client& c, unsigned version) {
    Extra extra = {{"WWW-Authenticate", "Bearer"}};
    std::string body =
        error_body("unauthorized", "missing or wrong API key (Authorization: Bearer KEY)");
    co_await respond(c, 401, body, false, version, extra);
  }

  // route (the front door): the model list, or the body read whole and its model's service.
  asio::awaitable<bool> front_door(Client& c, beast::flat_buffer& cbuf,
                                   http::request_parser<http::buffer_body>& parser,
                                   const std::string& peer, bool wants_sse, Scratch& sc) {
    auto& req = parser.get();
    const unsigned version = req.version();
    const bool no_body = parser.is_done();
    std::string_view target = req.target();
    std::string_view path = target.substr(0, target.find('?'));
    if (req.method() == http::verb::get && (path == "/v1/models" || path == "/api/tags")) {
      std::shared_ptr<const ModelTable> table = route_table();
      std::string body = path == "/api/tags" ? table->ollama_tags() : table->openai_list();
      bool keep = co_await respond(c, 200, body, req.keep_alive() && no_body, version);
      co_return keep;
    }
    if (req.method() != http::verb::post || !is_routed_path(path)) {
      std::string body = error_body(
          "not_found",
          fmt::format(
              "{} {} is not served by the front door (it serves POST /v1/chat/completions, "
              "/v1/completions, /v1/embeddings, /v1/audio/*, /v1/images/generations, /api/chat, "
              "/api/generate, /api/embed and GET /v1/models)",
              std::string(req.method_string()), std::string(path)));
      bool keep = co_await respond(c, 404, body, req.keep_alive() && no_body, version);
      co_return keep;
    }
    const bool v1 = path.rfind("/v1/", 0) == 0;
    std::optional<http::request<http::string_body>> whole;
    if (Stop stop = co_await read_body(c, cbuf, parser, whole)) co_return *stop;
    http::request<http::string_body>& sreq = *whole;
    std::string content_type(sreq[http::field::content_type]);
    std::optional<std::string> model = request_model(content_type, sreq.body());
    if (!model) {
      std::string body = error_body(
          "invalid_request_error",
          "the request names no model (a JSON \"model\" or a multipart \"model\" field)");
      bool again = co_await respond(c, 400, body, sreq.keep_alive(), version);
      co_return again;
    }
    std::shared_ptr<const ModelTable> table = route_table();
    std::optional<Route> route = table->find_for(path, *model);
    Upstream* svc = route ? find(route->service) : nullptr;
    if (!svc) {
      bool again = co_await no_route(c, *table, *model, sreq.keep_alive(), version);
      co_return again;
    }
    bool stream = body_wants_stream(content_type, sreq.body()) && v1;
    if (route->model != *model && content_type.find("json") != std::string::npos) {
      // An alias: the service is asked for the name it knows.
      nlohmann::json j = nlohmann::json::parse(sreq.body(), nullptr, false);
      if (j.is_object()) {
        j["model"] = route->model;
        sreq.body() = j.dump();
      }
    }
    bool again =
        co_await exchange(c, cbuf, sreq, nullptr, *svc, route->model, wants_sse || stream, peer, sc);
    co_return again;
  }

  // `Expect: 100-continue` (curl's, for a large body): vramd answers it before the body is read
  // (the front door routes by it; a service proxy streams it), and the header does not go on:
  // the service would answer it a second time. False when the client is gone.
  template <class Fields>
  asio::awaitable<bool> answer_continue(Client& c, http::header<true, Fields>& req) {
    req.erase(http::field::expect);
    beast::error_code ec;
    c.expires_after(kClientWriteTimeout);
    co_await asio::async_write(c, asio::buffer(kContinue), asio::redirect_error(use_awaitable, ec));
    co_return !ec;
  }

  // The front door routes by the body: it is read whole (within max_body) into `whole`.
  asio::awaitable<Stop> read_body(Client& c, beast::flat_buffer& cbuf,
                                  http::request_parser<http::buffer_body>& parser,
                                  std::optional<http::request<http::string_body>>& whole) {
    auto& req = parser.get();
    const unsigned version = req.version();
    beast::error_code ec;
    if (has_token(req[http::field::expect], "100-continue")) {
      if (!co_await answer_continue(c, req)) co_return false;
    }
    http::request_parser<http::string_body> sp{std::move(parser)};
    sp.body_limit(options.max_body);
    c.expires_after(std::chrono::seconds(60));
    co_await http::async_read(c, cbuf, sp, asio::redirect_error(use_awaitable, ec));
    if (ec == http::error::body_limit) {
      std::string body =
          error_body("too_large", fmt::format("request body over {} bytes", options.max_body));
      co_await respond(c, 413, body, false, version);
      co_return false;
    }
    if (ec) co_return false;
    whole.emplace(sp.release());
    co_return std::nullopt;
  }

  // A model no service serves: 404 with the models that are.
  asio::awaitable<bool> no_route(Client& c, const ModelTable& table, const std::string& model,
                                 bool keep, unsigned version) {
    std::vector<std::string> known = table.known();
    std::string list;
    for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
    metrics.request_done("", model, 404);
    nlohmann::json extra = nlohmann::json::object();
    extra["known_models"] = known;
    std::string body = error_body("model_not_found",
                                  fmt::format("model '{}' is not served here; known models: {}",
                                              model, list.empty() ? "none" : list),
                                  std::move(extra));
    bool again = co_await respond(c, 404, body, keep, version);
    co_return again;
  }

  // Sets up the request for the service: its path prefix, no hop-by-hop fields, forwarding
  // headers, the service's key in place of the client's.
  template <class Body>
  void prepare(http::request<Body>& req, Upstream& svc, const std::string& peer, bool upgrade) {
    std::string upgrade_value;
    if (upgrade) upgrade_value = req[http::field::upgrade];
    bool chunked = req.chunked();
    strip_hop_by_hop(req);
    req.version(11);
    if (!svc.url.path.empty()) req.target(svc.url.path + std::string(req.target()));
    if (req.count(http::field::host) == 0)
      req.set(http::field::host, fmt::format("{}:{}", svc.url.host, svc.url.port));
    if (auto xff = req.find("X-Forwarded-For"); xff == req.end() || xff->value().empty())
      req.set("X-Forwarded-For", peer);
    else
      req.set("X-Forwarded-For", std::string(xff->value()) + ", " + peer);
    req.set("X-Forwarded-Proto", "http");
    if (!options.api_keys.empty()) req.erase(http::field::authorization);
    if (!svc.opt.api_key.empty()) req.set(http::field::authorization, "Bearer " + svc.opt.api_key);
    if (upgrade) {
      req.set(http::field::connection, "Upgrade");
      req.set(http::field::upgrade, upgrade_value);
    } else {
      if (chunked) req.chunked(true);
      req.keep_alive(true);
    }
  }

  // `check`: peek at a kept-alive connection before reusing it (a syscall per request). A request
  // that can be sent again skips it: a connection the service closed fails the write or the
  // read, and the request goes once more on a fresh one.
  // A kept-alive connection from the pool, if one is there (no coroutine: most requests). Those
  // idle past keep_idle are closed first: the service is about to close them itself.
  static bool take_idle(Upstream& svc, UpConn& out, bool check) {
    const Clock::time_point now = Clock::now();
    std::size_t stale = 0;
    while (stale < svc.idle.size() && now - svc.idle[stale].since > svc.keep_idle) ++stale;
    if (stale > 0) {
      svc.idle.erase(svc.idle.begin(), svc.idle.begin() + static_cast<std::ptrdiff_t>(stale));
      for (std::size_t i = 0; i < stale; ++i) svc.closed_one();
    }
    while (!svc.idle.empty()) {
      ConnPtr s = std::move(svc.idle.back().conn);
      svc.idle.pop_back();
      if (!check || alive(*s)) {
        out.set(std::move(s), svc);
        return true;
      }
      s.reset();
      svc.closed_one();
    }
    return false;
  }

  // A new connection to the service.
  asio::awaitable<bool> connect(Upstream& svc, ConnPtr& out, std::string& error) {
    ConnPtr s(std::make_shared<Client>(co_await asio::this_coro::executor));
    beast::error_code ec;
    s->expires_after(svc.opt.connect_timeout);
    co_await asio::async_connect(s->socket(), svc.endpoints,
                                 asio::redirect_error(use_awaitable, ec));
    ec = s->map(ec);
    if (ec) {
      error = ec == beast::error::timeout
                  ? "connect: timed out after " + format_duration(svc.opt.connect_timeout)
                  : "connect: " + ec.message();
      co_return false;
    }
    no_delay(s->socket());
    out = std::move(s);
    co_return true;
  }

  // A new connection, already counted in svc.open (uncounted again when it fails).
  asio::awaitable<bool> connect_counted(Upstream& svc, UpConn& out, std::string& error) {
    ConnPtr s;
    if (!co_await connect(svc, s, error)) {
      svc.closed_one();
      co_return false;
    }
    out.set(std::move(s), svc);
    co_return true;
  }

  // What acquire() found.
  enum class Got { reused, fresh, failed, timed_out };

  // A connection for one request: a kept-alive one, a new one, or, while max_connections are
  // open, the next one given back (or the room of the next one closed), in arrival order. A
  // waiting request gives up at first_byte_timeout, or when its client has gone.
  asio::awaitable<Got> acquire(Client& c, Upstream& svc, UpConn& out, bool check,
                               std::string& error) {
    if (svc.waiting.empty()) {
      if (take_idle(svc, out, check)) co_return Got::reused;
      if (!svc.at_limit()) {
        ++svc.open;
        co_return co_await connect_counted(svc, out, error) ? Got::fresh : Got::failed;
      }
    }
    auto w = std::make_shared<ConnWaiter>(co_await asio::this_coro::executor);
    svc.waiting.push_back(w);
    const Clock::time_point deadline = Clock::now() + svc.opt.first_byte_timeout;
    beast::error_code ec;
    while (!w->handed && !w->may_connect && !svc.shut && Clock::now() < deadline) {
      w->timer.expires_at(std::min(deadline, Clock::now() + options.heartbeat));
      co_await w->timer.async_wait(asio::redirect_error(use_awaitable, ec));
      if (!w->handed && !w->may_connect && peer_closed(c)) break;
    }
    if (w->handed) {
      out.set(std::move(w->handed), svc);
      co_return Got::reused;
    }
    if (w->may_connect)
      co_return co_await connect_counted(svc, out, error) ? Got::fresh : Got::failed;
    std::erase(svc.waiting, w);
    error = fmt::format("no connection to it came free within first_byte_timeout {} ({} open, "
                        "max_connections {})",
                        format_duration(svc.opt.first_byte_timeout), svc.open,
                        svc.opt.max_connections);
    co_return Got::timed_out;
  }

  // Holds the request until the service is ready, the wake fails or wake_timeout passes. A
  // streaming client gets the response head and SSE comments meanwhile (`sse_open`).
  // What a held request waits with, on the heap: GCC 12 lays out the frames of coroutines
  // like this one wrongly (locals read back as garbage), a single pointer survives.
  struct Held {
    explicit Held(asio::io_context& io) : timer(io) {}
    asio::steady_timer timer;
    std::shared_ptr<WakeState> wake;
    Clock::time_point start, deadline;
    size_t seen = 0;
    bool client_gone = false;
    beast::error_code ec;
    std::string bytes;
  };

  asio::awaitable<WakeResult> hold(Client& c, Upstream& svc, const std::string& model, bool sse,
                                   bool* sse_open) {
    auto h = std::make_shared<Held>(io);
    h->start = Clock::now();
    // The core times the wake out on its own clock, and answers with who is in the way: this
    // deadline is only the net under it.
    h->deadline = h->start + svc.opt.wake_timeout + kWakeAnswerGrace;
    std::string key = svc.opt.name + '\n' + model;
    if (auto it = wakes.find(key); it != wakes.end()) {
      h->wake = it->second;
    } else {
      h->wake = std::make_shared<WakeState>();
      wakes.emplace(key, h->wake);
      auto wake = run_wake(h->wake, key, svc.opt.name, model, shared_from_this());
      asio::co_spawn(io, std::move(wake), asio::detached);
    }
    h->wake->waiters.push_back(&h->timer);
    while (!h->wake->done && Clock::now() < h->deadline && !h->client_gone) {
      h->timer.expires_at(std::min(h->deadline, Clock::now() + options.heartbeat));
      co_await h->timer.async_wait(asio::redirect_error(use_awaitable, h->ec));
      // A client that is not streaming hears nothing while held: at each heartbeat, whether it
      // has closed its side is read from its socket (else it would be found gone only at the
      // net, past wake_timeout).
      if (!sse && !h->wake->done && !h->ec && peer_closed(c)) {
        h->client_gone = true;
        break;
      }
      h->bytes = sse && !h->wake->done
                     ? comments(*h->wake, h->seen, /*heartbeat=*/!h->ec, svc.opt.name)
                     : "";
      if (!h->bytes.empty()) {
        if (!*sse_open) {
          h->bytes =
              "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
              "X-Accel-Buffering: no\r\nTransfer-Encoding: chunked\r\n\r\n" +
              h->bytes;
          *sse_open = true;
        }
        c.expires_after(kClientWriteTimeout);
        co_await asio::async_write(c, asio::buffer(h->bytes),
                                   asio::redirect_error(use_awaitable, h->ec));
        h->client_gone = static_cast<bool>(h->ec);
      }
    }
    std::erase(h->wake->waiters, &h->timer);
    // The last one waiting gone before the answer: the wake is not needed any more.
    if (h->wake->waiters.empty() && !h->wake->done) hooks.abandon_wake(svc.opt.name, model);
    metrics.held(svc.opt.name, std::chrono::duration<double>(Clock::now() - h->start).count());
    co_return hold_result(*h->wake, h->client_gone, svc);
  }

  // The SSE comments (one chunk) for messages not sent yet; on a heartbeat, the last again.
  static std::string comments(const WakeState& w, size_t& seen, bool heartbeat,
                              const std::string& service) {
    std::string out;
    for (; seen < w.messages.size(); ++seen) out += ": " + w.messages[seen] + "\n\n";
    if (out.empty() && heartbeat)
      out = ": " + (w.messages.empty() ? "waking " + service : w.messages.back()) + "\n\n";
    return out.empty() ? out : chunk(out);
  }

  static WakeResult hold_result(const WakeState& w, bool client_gone, const Upstream& svc) {
    if (w.done) return w.result;
    if (client_gone) return WakeResult::refused("the client went away");
    return WakeResult::refused(fmt::format(
        "{} did not become ready within {}{}", svc.opt.name, format_duration(svc.opt.wake_timeout),
        w.messages.empty() ? std::string() : ": " + w.messages.back()));
  }

  asio::awaitable<void> run_wake(std::shared_ptr<WakeState> w, std::string key, std::string service,
                                 std::string model, [[maybe_unused]] std::shared_ptr<Impl> keep) {
    WakeResult r;
    try {
      WakeProgress progress = [w](std::string m) {
        w->messages.push_back(std::move(m));
        w->notify();
      };
      auto op = hooks.ensure_ready(service, model, std::move(progress));
      r = co_await std::move(op);
    } catch (const std::exception& e) {
      r = WakeResult::refused(std::string("wake failed: ") + e.what());
    }
    w->result = std::move(r);
    w->done = true;
    if (auto it = wakes.find(key); it != wakes.end() && it->second == w) wakes.erase(it);
    w->notify();
  }

  // A request's end, whatever way it ends: activity, metrics, the slot.
  struct Activity {
    Impl& impl;
    const std::string& service;
    bool active = false;
    void start() {
      active = true;
      impl.hooks.request_started(service);
      impl.metrics.in_flight(service, +1);
    }
    void end() {
      if (!active || impl.closed) return;
      active = false;
      impl.metrics.in_flight(service, -1);
      impl.hooks.request_ended(service);
    }
    ~Activity() { end(); }
  };
  struct Slot {
    ConcurrencyLimit& limit;
    bool held = false;
    bool& closed;
    ~Slot() {
      if (held && !closed) limit.release();
    }
  };

  // Counted, and written to the request log (docs/history.md), however the exchange ends.
  struct Record {
    Impl& impl;
    const std::string& service;
    const std::string& model;
    const UsageScan& usage;
    unsigned status = 0;  // what the client was answered, once it was
    Clock::time_point start = Clock::now();
    double wait_s = -1, first_byte_s = -1;
    bool streamed = false;
    ~Record() {
      if (!status || impl.closed) return;
      impl.metrics.request_done(service, model, status);
      if (impl.options.request_log) impl.options.request_log->push(sample());
    }
    RequestSample sample() const {
      RequestSample s;
      s.set_service(service);
      s.set_model(model.empty() ? usage.model() : std::string_view(model));
      s.status = static_cast<uint16_t>(status);
      s.at_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                    std::chrono::system_clock::now().time_since_epoch())
                    .count();
      double total = std::chrono::duration<double>(Clock::now() - start).count();
      s.seconds = static_cast<float>(total);
      s.wait_s = static_cast<float>(wait_s);
      s.first_byte_s = static_cast<float>(first_byte_s);
      // Generation: from the first byte for a stream, the whole answer for one sent at once.
      // (A "stream" sent in one piece has none to speak of: the whole request then.)
      double generation = streamed && first_byte_s >= 0 && total - first_byte_s >= 0.01
                              ? total - first_byte_s
                              : total;
      s.tokens_per_s = static_cast<float>(usage.tokens_per_second(generation));
      return s;
    }
  };

  // What one request carries through the stages of exchange(): fixed when it enters them, but
  // for `client_keep` (an HTTP/1.0 answer without a length ends the connection) and `sse_open`.
  template <class Body>
  struct Exchange {
    Client& c;
    beast::flat_buffer& cbuf;
    http::request<Body>& req;
    http::request_parser<http::buffer_body>* stream_parser;  // the body still to read, if any
    Upstream& svc;
    const std::string& model;
    bool wants_sse;
    Scratch& sc;
    Record& record;
    unsigned version = req.version();
    bool client_keep = req.keep_alive();
    bool is_head = req.method() == http::verb::head;
    bool upgrade = is_upgrade(req);
    bool replayable = !stream_parser || stream_parser->is_done();  // can be sent again
    bool sse_open = false;  // a held stream's head went out already
    std::optional<http::response_parser<http::buffer_body>> rp;  // the service's answer
    UpConn up;                                                    // the connection to it
  };

  // Forwards one request (its body streamed from `stream_parser`, or whole in `req`) and its
  // response, through the stages limit, activity, hold and forward. Returns whether the client
  // connection may carry another request.
  template <class Body>
  asio::awaitable<bool> exchange(Client& c, beast::flat_buffer& cbuf, http::request<Body>& req,
                                 http::request_parser<http::buffer_body>* stream_parser,
                                 Upstream& svc, const std::string& model, bool wants_sse,
                                 const std::string& peer, Scratch& sc) {
    Record record{*this, svc.opt.name, model, sc.usage};
    sc.usage.reset();
    Exchange<Body> x{c, cbuf, req, stream_parser, svc, model, wants_sse, sc, record};
    if (stream_parser && has_token(req[http::field::expect], "100-continue")) {
      if (!co_await answer_continue(c, req)) co_return false;
    }
    prepare(req, svc, peer, x.upgrade);
    Slot slot{svc.limit, false, closed};
    // No limit (most services): no coroutine to enter.
    if (svc.limit.max_concurrent() > 0)
      if (Stop stop = co_await limit(x, slot)) co_return *stop;
    Activity activity{*this, svc.opt.name};
    activity.start();
    if (!hooks.is_ready(svc.opt.name, model))
      if (Stop stop = co_await hold_until_ready(x)) co_return *stop;
    if (Stop stop = co_await forward(x)) co_return *stop;
    bool keep = co_await relay(x, activity);
    co_return keep;
  }

  // limit: a slot of the service's max_concurrent, or a place in its queue; else 429.
  template <class Body>
  asio::awaitable<Stop> limit(Exchange<Body>& x, Slot& slot) {
    if (co_await x.svc.limit.acquire()) {
      slot.held = true;
      co_return std::nullopt;
    }
    const ConcurrencyLimit& l = x.svc.limit;
    Extra extra = {{"Retry-After", "1"}};
    std::string message =
        fmt::format("{} has {} requests in flight and {} waiting (max_concurrent {}, max_queue {})",
                    x.svc.opt.name, l.active(), l.queued(), l.max_concurrent(), l.max_queue());
    x.record.status = 429;
    // A body still unread from the client leaves the connection unusable.
    std::string body = error_body("rate_limit_exceeded", message);
    bool keep = co_await respond(x.c, 429, body, x.client_keep && x.replayable, x.version, extra);
    co_return keep;
  }

  // hold: the request waits for the service to be ready (hold()); a wake that fails is a 503,
  // or an SSE error event where the stream's head went out already.
  template <class Body>
  asio::awaitable<Stop> hold_until_ready(Exchange<Body>& x) {
    Clock::time_point held = Clock::now();
    WakeResult r = co_await hold(x.c, x.svc, x.model, x.wants_sse && !x.upgrade, &x.sse_open);
    x.record.wait_s = std::chrono::duration<double>(Clock::now() - held).count();
    if (r.ok) co_return std::nullopt;
    x.record.status = 503;
    nlohmann::json reason = {{"message", r.reason},
                             {"type", "service_unavailable"},
                             {"code", "service_unavailable"},
                             {"service", x.svc.opt.name}};
    if (!r.holder.empty()) reason["holder"] = r.holder;
    if (x.sse_open) {
      std::string ev = "event: error\ndata: " + nlohmann::json{{"error", reason}}.dump() + "\n\n";
      std::string bytes = chunk(ev) + "0\r\n\r\n";
      beast::error_code ec;
      x.c.expires_after(kClientWriteTimeout);
      co_await asio::async_write(x.c, asio::buffer(bytes), asio::redirect_error(use_awaitable, ec));
      co_return false;
    }
    Extra extra = {{"Retry-After", std::to_string(r.retry_after.count())}};
    std::string body = nlohmann::json{{"error", reason}}.dump();
    bool keep =
        co_await respond(x.c, 503, body, x.client_keep && x.replayable, x.version, extra);
    co_return keep;
  }

  // forward: the request to the service and its answer's head back, on a kept-alive connection
  // or a new one (acquire()). A kept one that fails before one byte of the answer came back
  // (the service closed it): once more on a fresh one, if the request can be sent again
  // (docs/proxy.md, "Upstream connections"). Else 502/504.
  template <class Body>
  asio::awaitable<Stop> forward(Exchange<Body>& x) {
    Upstream& svc = x.svc;
    for (int attempt = 0;; ++attempt) {
      std::string error;
      x.up.reset();
      x.rp.reset();
      Got got = co_await acquire(x.c, svc, x.up, !x.replayable || attempt > 0, error);
      if (got == Got::failed || got == Got::timed_out) {
        metrics.upstream_error(svc.opt.name);
        bool keep = co_await respond_upstream_error(
            x.c, x.record.status, x.sse_open, got == Got::failed ? 502 : 504, svc.opt.name, error,
            x.client_keep && x.replayable, x.version);
        co_return keep;
      }
      const bool reused = got == Got::reused;
      beast::error_code ec;
      x.up->expires_after(svc.opt.first_byte_timeout);
      if constexpr (std::is_same_v<Body, http::string_body>) {  // head and body in one write
        x.req.prepare_payload();
        request_head(x.sc.head, x.req);
        std::array<asio::const_buffer, 2> out{asio::buffer(x.sc.head), asio::buffer(x.req.body())};
        co_await asio::async_write(*x.up, out, asio::redirect_error(use_awaitable, ec));
      } else if (x.stream_parser->is_done()) {  // no body: the head alone
        request_head(x.sc.head, x.req);
        co_await asio::async_write(*x.up, asio::buffer(x.sc.head),
                                   asio::redirect_error(use_awaitable, ec));
      } else {
        ec = co_await send_streamed(x.c, x.cbuf, *x.stream_parser, *x.up, svc, x.sc.body.data());
      }
      // The answer's head, past any 100 Continue the service sent anyway.
      if (!ec) {
        quick_ack(x.up->socket());
        x.sc.ubuf.clear();
        x.up->expires_after(svc.opt.first_byte_timeout);  // from the request's last byte
      }
      while (!ec) {
        x.rp.emplace();
        x.rp->body_limit(std::numeric_limits<std::uint64_t>::max());
        x.rp->header_limit(kHeaderLimit);
        if (x.is_head) x.rp->skip(true);
        ec = co_await read_header(*x.up, x.sc.ubuf, *x.rp);
        if (ec || x.rp->get().result() != http::status::continue_) break;
      }
      if (!ec) co_return std::nullopt;
      // Not one byte of the answer: the service had closed the kept connection. The others kept
      // from then are likely closed too (it restarted): dropped.
      const bool answered = x.rp && x.rp->got_some();
      if (reused && x.replayable && !answered && attempt == 0 && ec != beast::error::timeout) {
        svc.drop_idle();
        continue;
      }
      metrics.upstream_error(svc.opt.name);
      const bool timeout = ec == beast::error::timeout;
      std::string why = timeout ? "no answer within first_byte_timeout " +
                                      format_duration(svc.opt.first_byte_timeout)
                                : ec.message();
      co_await respond_upstream_error(x.c, x.record.status, x.sse_open, timeout ? 504 : 502,
                                      svc.opt.name, why, false, x.version);
      co_return false;
    }
  }

  // The service's answer to the client: the head, then the body as it comes (or the tunnel of
  // an upgrade); the connection kept for the next request when the service keeps it.
  template <class Body>
  asio::awaitable<bool> relay(Exchange<Body>& x, Activity& activity) {
    Scratch& sc = x.sc;
    auto& res = x.rp->get();
    const unsigned status = res.result_int();
    x.record.status = status;
    x.record.first_byte_s =
        std::chrono::duration<double>(Clock::now() - x.record.start).count();
    x.record.streamed = x.wants_sse || !res.has_content_length();
    if (x.upgrade && res.result() == http::status::switching_protocols) {
      activity.end();  // an open WebSocket is busy only while messages flow
      x.up.uncount();  // its connection is the tunnel's, outside max_connections
      co_await tunnel(x.c, x.cbuf, *x.up, sc.ubuf, res, x.svc);
      co_return false;
    }
    const bool up_keep = res.keep_alive() && !x.rp->need_eof();
    if (up_keep) heard_keep_alive(x.svc, res);
    const bool body_expected = !x.is_head && status >= 200 && status != 204 && status != 304;
    beast::error_code ec;
    char* buf = sc.body.data();
    if (x.sse_open && status >= 400) {
      // The stream's head went out while the request was held: the service's error becomes an
      // error event the clients raise, then the stream's end; never its raw body in the stream.
      std::string body;
      ec = co_await collect_body(*x.up, sc.ubuf, *x.rp, x.svc, buf, body);
      std::string bytes = chunk(error_event(status, body, x.svc.opt.name)) + "0\r\n\r\n";
      x.c.expires_after(kClientWriteTimeout);
      co_await asio::async_write(x.c, asio::buffer(bytes), asio::redirect_error(use_awaitable, ec));
      co_return false;
    }
    if (x.sse_open) {
      // The head went out while the request was held: the body follows as chunks.
      ec = co_await relay_chunks(x.c, *x.up, sc.ubuf, *x.rp, x.svc, buf, sc.usage);
      if (!ec) {
        x.c.expires_after(kClientWriteTimeout);
        co_await asio::async_write(x.c, asio::buffer("0\r\n\r\n", 5),
                                   asio::redirect_error(use_awaitable, ec));
      }
    } else {
      strip_hop_by_hop(res);
      bool chunked = false;
      if (body_expected && !res.has_content_length()) {
        if (x.version >= 11)
          res.chunked(chunked = true);
        else
          x.client_keep = false;  // HTTP/1.0: the end of the body is the end of the connection
      }
      res.keep_alive(x.client_keep);
      response_head(sc.head, res);
      if (!body_expected) {
        x.c.expires_after(kClientWriteTimeout);
        co_await asio::async_write(x.c, asio::buffer(sc.head),
                                   asio::redirect_error(use_awaitable, ec));
      } else {
        ec = co_await relay_body(x.c, *x.up, sc.ubuf, *x.rp, sc.head, chunked, x.svc, buf,
                                 sc.usage);
      }
    }
    if (ec) {
      if (ec == beast::error::timeout) metrics.upstream_error(x.svc.opt.name);
      co_return false;
    }
    if (up_keep && x.rp->is_done()) x.up.give_back(kIdleUpstreams);
    co_return x.client_keep;
  }

  // `Keep-Alive: timeout=5, max=100` (cpp-httplib's): the service's idle timeout, heard.
  static void heard_keep_alive(Upstream& svc, const http::fields& res) {
    auto it = res.find(http::field::keep_alive);
    if (it == res.end()) return;
    std::string_view v = it->value();
    std::size_t at = v.find("timeout=");
    if (at == std::string_view::npos) return;
    int secs = 0;
    auto [end, ec] = std::from_chars(v.data() + at + 8, v.data() + v.size(), secs);
    if (ec == std::errc() && secs > 0) svc.heard_timeout(std::chrono::seconds(secs));
  }

  asio::awaitable<bool> respond_upstream_error(Client& c, unsigned& status, bool sse_open,
                                               unsigned code, const std::string& service,
                                               const std::string& error, bool keep,
                                               unsigned version) {
    status = code;
    std::string message = fmt::format("{} did not answer: {}", service, error);
    if (sse_open) {
      std::string ev = "event: error\ndata: " + error_body("upstream_error", message) + "\n\n";
      std::string bytes = chunk(ev) + "0\r\n\r\n";
      beast::error_code ec;
      c.expires_after(kClientWriteTimeout);
      co_await asio::async_write(c, asio::buffer(bytes), asio::redirect_error(use_awaitable, ec));
      co_return false;
    }
    std::string body = error_body("upstream_error", message);
    bool again = co_await respond(c, code, body, keep, version);
    co_return again;
  }

  // The request head, then its body piece by piece as the client sends it.
  asio::awaitable<beast::error_code> send_streamed(Client& c, beast::flat_buffer& cbuf,
                                                   http::request_parser<http::buffer_body>& p,
                                                   Client& up, Upstream& svc, char* buf) {
    beast::error_code ec;
    http::request_serializer<http::buffer_body> sr{p.get()};
    co_await http::async_write_header(up, sr, asio::redirect_error(use_awaitable, ec));
    if (ec) co_return ec;
    do {
      if (!p.is_done()) {
        p.get().body().data = buf;
        p.get().body().size = kChunk;
        c.expires_after(std::chrono::seconds(60));
        co_await http::async_read_some(c, cbuf, p, asio::redirect_error(use_awaitable, ec));
        if (ec == http::error::need_buffer) ec = {};
        if (ec) co_return ec;
        p.get().body().size = kChunk - p.get().body().size;
        // No bytes (a chunk header alone): no data, or the serializer would write an empty
        // chunk, which ends a chunked body.
        p.get().body().data = p.get().body().size ? buf : nullptr;
        p.get().body().more = !p.is_done();
      } else {
        p.get().body().data = nullptr;
        p.get().body().size = 0;
        p.get().body().more = false;
      }
      if (sr.is_done()) break;
      up.expires_after(svc.opt.first_byte_timeout);
      co_await http::async_write(up, sr, asio::redirect_error(use_awaitable, ec));
      if (ec == http::error::need_buffer) ec = {};
      if (ec) co_return ec;
    } while (!p.is_done() || !sr.is_done());
    co_return ec;
  }

  // The response body, each piece written to the client as soon as it is read (never held
  // back to fill a buffer: an SSE event goes out alone), as chunks when `chunked`. The head
  // goes out with the body's first bytes when they came with it (most answers: one write);
  // else at once, so that a stream whose first event is late is not held back.
  asio::awaitable<beast::error_code> relay_body(Client& c, Client& up, beast::flat_buffer& ubuf,
                                                http::response_parser<http::buffer_body>& p,
                                                const std::string& head, bool chunked,
                                                Upstream& svc, char* buf, UsageScan& usage) {
    beast::error_code ec;
    bool head_sent = false;
    if (ubuf.size() == 0 && !p.is_done()) {
      c.expires_after(kClientWriteTimeout);
      co_await asio::async_write(c, asio::buffer(head), asio::redirect_error(use_awaitable, ec));
      if (ec) co_return ec;
      head_sent = true;
    }
    for (;;) {
      std::size_t n = 0;
      if (!p.is_done()) {
        p.get().body().data = buf;
        p.get().body().size = kChunk;
        if (!parse_buffered(p, ubuf, ec)) {
          up.expires_after(svc.opt.first_byte_timeout);
          ec = co_await read_some(up, ubuf, p);
        }
        if (ec == http::error::need_buffer) ec = {};
        if (ec == http::error::end_of_stream && p.is_done()) ec = {};
        if (ec) co_return ec;
        n = kChunk - p.get().body().size;
        usage.feed(buf, n);
      }
      const bool last = p.is_done();
      std::array<asio::const_buffer, 5> out;
      std::size_t k = 0;
      char size_line[24];
      if (!head_sent) out[k++] = asio::buffer(head);
      if (n > 0) {
        if (chunked) {
          auto r = fmt::format_to_n(size_line, sizeof size_line, "{:x}\r\n", n);
          out[k++] = asio::buffer(size_line, r.size);
        }
        out[k++] = asio::buffer(buf, n);
        if (chunked) out[k++] = asio::buffer("\r\n", 2);
      }
      if (last && chunked) out[k++] = asio::buffer("0\r\n\r\n", 5);
      if (k > 0) {
        c.expires_after(kClientWriteTimeout);
        co_await asio::async_write(c, std::span<const asio::const_buffer>(out.data(), k),
                                   asio::redirect_error(use_awaitable, ec));
        if (ec) co_return ec;
        head_sent = true;
      }
      if (last) co_return ec;
    }
  }

  // The next piece of a response body into `buf` (`n` bytes; none at its end, or for a chunk
  // header alone).
  asio::awaitable<beast::error_code> next_piece(Client& up, beast::flat_buffer& ubuf,
                                                http::response_parser<http::buffer_body>& p,
                                                Upstream& svc, char* buf, std::size_t& n) {
    beast::error_code ec;
    p.get().body().data = buf;
    p.get().body().size = kChunk;
    up.expires_after(svc.opt.first_byte_timeout);
    co_await http::async_read_some(up, ubuf, p, asio::redirect_error(use_awaitable, ec));
    if (ec == http::error::need_buffer) ec = {};
    if (ec == http::error::end_of_stream && p.is_done()) ec = {};
    n = ec ? 0 : kChunk - p.get().body().size;
    co_return ec;
  }

  // An error answer's body, up to 64 KiB (the rest is read and dropped), to put in an event.
  asio::awaitable<beast::error_code> collect_body(Client& up, beast::flat_buffer& ubuf,
                                                  http::response_parser<http::buffer_body>& p,
                                                  Upstream& svc, char* buf, std::string& out) {
    constexpr std::size_t kKept = std::size_t{64} * 1024;
    beast::error_code ec;
    std::size_t n = 0;
    while (!ec && !p.is_done()) {
      ec = co_await next_piece(up, ubuf, p, svc, buf, n);
      out.append(buf, std::min(n, kKept - std::min(out.size(), kKept)));
    }
    co_return ec;
  }

  // A service's error answer as one SSE error event: `event: error` and `data: {"error": ...}`,
  // which the OpenAI clients raise (they read `error` in any event's data) and Anthropic's too
  // (its `error` event). The service's own error object where it sent one, else its words.
  static std::string error_event(unsigned status, const std::string& body,
                                 const std::string& service) {
    nlohmann::json j = nlohmann::json::parse(body, nullptr, false);
    nlohmann::json err;
    if (j.is_object() && j.contains("error") && j["error"].is_object()) {
      err = j["error"];
    } else {
      std::string said = j.is_object() && j.contains("error") && j["error"].is_string()
                             ? j["error"].get<std::string>()
                         : j.is_object() && j.contains("detail") && j["detail"].is_string()
                             ? j["detail"].get<std::string>()
                             : body.substr(0, 1024);
      err = {{"message", fmt::format("{} answered {}: {}", service, status, said)},
             {"type", "upstream_error"}};
    }
    if (!err.contains("code")) err["code"] = status;
    std::string data = nlohmann::json{{"error", err}}.dump(
        -1, ' ', false, nlohmann::json::error_handler_t::replace);
    return "event: error\ndata: " + data + "\n\n";
  }

  // The response body as chunks of an already open chunked response.
  asio::awaitable<beast::error_code> relay_chunks(Client& c, Client& up, beast::flat_buffer& ubuf,
                                                  http::response_parser<http::buffer_body>& p,
                                                  Upstream& svc, char* buf, UsageScan& usage) {
    beast::error_code ec;
    while (!p.is_done()) {
      std::size_t n = 0;
      ec = co_await next_piece(up, ubuf, p, svc, buf, n);
      if (ec) co_return ec;
      if (n == 0) continue;
      usage.feed(buf, n);
      std::string bytes = chunk(std::string_view(buf, n));
      c.expires_after(kClientWriteTimeout);
      co_await asio::async_write(c, asio::buffer(bytes), asio::redirect_error(use_awaitable, ec));
      if (ec) co_return ec;
    }
    co_return ec;
  }

  // A WebSocket (or other upgrade): the 101 goes to the client, then bytes both ways until one
  // side closes. Busy while messages flowed within websocket_idle.
  struct TunnelState {
    explicit TunnelState(const asio::any_io_executor& ex) : done(ex), idle(ex) {}
    asio::steady_timer done;
    asio::steady_timer idle;
    int running = 0;
    bool closed = false;
    bool busy = false;
    Clock::time_point last;
  };

  asio::awaitable<void> tunnel(Client& c, beast::flat_buffer& cbuf, Client& up,
                               beast::flat_buffer& ubuf, http::response<http::buffer_body>& res,
                               Upstream& svc) {
    http::response<http::empty_body> head{static_cast<http::response_header<>&>(res)};
    beast::error_code ec;
    c.expires_after(kClientWriteTimeout);
    co_await http::async_write(c, head, asio::redirect_error(use_awaitable, ec));
    if (ec) co_return;
    c.expires_never();
    up.expires_never();
    if (ubuf.size())
      co_await asio::async_write(c, ubuf.data(), asio::redirect_error(use_awaitable, ec));
    if (!ec && cbuf.size())
      co_await asio::async_write(up, cbuf.data(), asio::redirect_error(use_awaitable, ec));
    if (ec) co_return;
    TunnelState st(io.get_executor());
    st.done.expires_at(Clock::time_point::max());
    st.running = 3;
    const std::string& name = svc.opt.name;
    asio::co_spawn(io, pump(c, up, st, name), asio::detached);
    asio::co_spawn(io, pump(up, c, st, name), asio::detached);
    asio::co_spawn(io, watch_idle(st, name), asio::detached);
    while (st.running > 0) {
      co_await st.done.async_wait(asio::redirect_error(use_awaitable, ec));
    }
    if (st.busy) {
      metrics.in_flight(name, -1);
      hooks.request_ended(name);
    }
  }

  void touch(TunnelState& st, const std::string& name) {
    st.last = Clock::now();
    if (!st.busy) {
      st.busy = true;
      metrics.in_flight(name, +1);
      hooks.request_started(name);
      st.idle.cancel();  // the watcher re-arms for last + idle
    }
  }

  asio::awaitable<void> pump(Client& from, Client& to, TunnelState& st, const std::string& name) {
    std::array<char, kChunk> buf;
    beast::error_code ec;
    while (!st.closed) {
      std::size_t n =
          co_await from.async_read_some(asio::buffer(buf), asio::redirect_error(use_awaitable, ec));
      if (ec) break;
      touch(st, name);
      co_await asio::async_write(to, asio::buffer(buf.data(), n),
                                 asio::redirect_error(use_awaitable, ec));
      if (ec) break;
    }
    if (!st.closed) {
      st.closed = true;
      beast::error_code ignored;
      from.socket().shutdown(tcp::socket::shutdown_both, ignored);
      to.socket().shutdown(tcp::socket::shutdown_both, ignored);
      from.socket().cancel(ignored);
      to.socket().cancel(ignored);
      st.idle.cancel();
    }
    --st.running;
    st.done.cancel();
  }

  asio::awaitable<void> watch_idle(TunnelState& st, const std::string& name) {
    beast::error_code ec;
    while (!st.closed) {
      if (st.busy)
        st.idle.expires_at(st.last + options.websocket_idle);
      else
        st.idle.expires_at(Clock::time_point::max());
      co_await st.idle.async_wait(asio::redirect_error(use_awaitable, ec));
      if (!st.closed && st.busy && Clock::now() - st.last >= options.websocket_idle) {
        st.busy = false;
        metrics.in_flight(name, -1);
        hooks.request_ended(name);
      }
    }
    --st.running;
    st.done.cancel();
  }
};

Proxy::Proxy(asio::io_context& io, ProxyOptions options, ProxyHooks& hooks)
    : impl_(std::make_shared<Impl>(io, std::move(options), hooks)) {
  for (const auto& s : impl_->options.services)
    impl_->upstreams.push_back(std::make_unique<Upstream>(s));
}

Proxy::~Proxy() {
  close();
  impl_->closed = true;
}

Status Proxy::start() {
  const bool keys = !impl_->options.api_keys.empty();
  std::vector<HostPort> ours;
  if (!impl_->options.listen.empty()) {
    if (Status s = check_proxy_listen("proxy.listen", impl_->options.listen, keys); !s) return s;
    ours.push_back(*parse_listen(impl_->options.listen));
  }
  std::vector<HostPort> forbidden;
  for (const auto& f : impl_->options.forbidden_upstreams)
    if (auto hp = parse_host_port(f)) forbidden.push_back(*hp);
  for (auto& u : impl_->upstreams) {
    if (!u->opt.listen.empty()) {
      std::string where = "services." + u->opt.name + ".proxy";
      if (Status s = check_proxy_listen(where, u->opt.listen, keys); !s) return s;
      ours.push_back(*parse_listen(u->opt.listen));
    }
  }
  impl_->ours = std::move(ours);
  impl_->forbidden = std::move(forbidden);
  for (auto& u : impl_->upstreams)
    if (Status s = impl_->reach(*u); !s) return s;
  if (!impl_->options.listen.empty()) {
    if (Status s = impl_->open(impl_->front, impl_->front_port, impl_->options.listen, nullptr);
        !s) {
      close();
      return make_error("proxy.listen: " + s.error());
    }
  }
  for (auto& u : impl_->upstreams) {
    if (u->opt.listen.empty()) continue;
    if (Status s = impl_->open(u->acceptor, u->port, u->opt.listen, u.get()); !s) {
      close();
      return make_error("services." + u->opt.name + ".proxy: " + s.error());
    }
  }
  return Ok{};
}

void Proxy::close() {
  beast::error_code ec;
  if (impl_->front) impl_->front->close(ec);
  for (auto& u : impl_->upstreams) {
    if (u->acceptor) u->acceptor->close(ec);
    u->shut = true;
    u->drop_idle();
    for (auto& w : u->waiting) w->timer.cancel();
    u->waiting.clear();
  }
}

int Proxy::front_door_port() const { return impl_->front_port; }
int Proxy::service_port(const std::string& service) const {
  Upstream* u = impl_->find(service);
  return u ? u->port : 0;
}
Status Proxy::add_service(ProxyServiceOptions service) {
  if (impl_->find(service.name)) return Ok{};
  service.listen.clear();  // the front door only: a listener of its own is the config's to ask
  auto u = std::make_unique<Upstream>(std::move(service));
  if (Status s = impl_->reach(*u); !s) return s;
  impl_->upstreams.push_back(std::move(u));
  return Ok{};
}

void Proxy::set_max_connections(const std::string& service, int max_connections) {
  Upstream* u = impl_->find(service);
  if (!u || u->opt.max_connections == max_connections) return;
  u->opt.max_connections = max_connections;
  u->admit_waiters();
}
const ProxyMetrics& Proxy::metrics() const { return impl_->metrics; }
std::vector<ModelEntry> Proxy::models() const { return impl_->model_entries(); }

}  // namespace vramd
