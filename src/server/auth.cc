#include "server/auth.h"
#include "core/text.h"

#include <sys/stat.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "core/config.h"
#include "server/api.h"
#include "server/json_view.h"

namespace vramd {

namespace http = boost::beast::http;

namespace {


// Host and port of a Host header or an Origin's authority; port 0 when absent.
std::pair<std::string, std::string> split_authority(std::string_view a) {
  if (!a.empty() && a.front() == '[') {
    size_t close = a.find(']');
    if (close == std::string_view::npos) return {std::string(a), ""};
    std::string_view rest = a.substr(close + 1);
    return {lower(a.substr(0, close + 1)), rest.starts_with(":") ? std::string(rest.substr(1)) : ""};
  }
  size_t colon = a.rfind(':');
  if (colon == std::string_view::npos || a.find(':') != colon) return {lower(a), ""};
  return {lower(a.substr(0, colon)), std::string(a.substr(colon + 1))};
}

// Whether an Origin ("http://127.0.0.1:7100") names the same host and port as the Host header.
bool same_origin(std::string_view origin, std::string_view host_header) {
  std::string_view default_port;
  if (origin.starts_with("http://")) {
    default_port = "80";
    origin.remove_prefix(7);
  } else if (origin.starts_with("https://")) {
    default_port = "443";
    origin.remove_prefix(8);
  } else {
    return false;  // "null" (a sandboxed page, a file: URL) or garbage
  }
  if (origin.find('/') != std::string_view::npos) return false;
  auto [oh, op] = split_authority(origin);
  auto [hh, hp] = split_authority(host_header);
  if (op.empty()) op = default_port;
  // No port in Host: the default one of the scheme the browser used (https behind a proxy).
  if (hp.empty()) hp = default_port;
  return !oh.empty() && oh == hh && op == hp;
}

std::string quoted(std::string_view s) {
  // Enough to recognise it; a Host header is not a place to store a novel.
  return s.size() > 100 ? std::string(s.substr(0, 100)) + "..." : std::string(s);
}

HttpResponse refuse(unsigned status, const std::string& code, const std::string& message,
                    unsigned version) {
  // Header bytes may be anything (obs-text): never let them make the JSON writer throw.
  HttpResponse res = json_response(
      status, error_json(code, message).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace),
      version);
  if (status == 401) res.set(http::field::www_authenticate, "Bearer realm=\"vramd\"");
  return res;
}

}  // namespace

bool is_loopback_host_header(std::string_view host_header) {
  auto [host, port] = split_authority(host_header);
  return is_loopback_host(host);
}

bool tokens_equal(std::string_view given, std::string_view expected) {
  // Every byte of `expected` is looked at whatever `given` is: the time says nothing about
  // how much of a guess was right. The length check is folded in, not returned early.
  volatile unsigned char diff = given.size() == expected.size() ? 0 : 1;
  for (size_t i = 0; i < expected.size(); ++i) {
    unsigned char g = i < given.size() ? static_cast<unsigned char>(given[i]) : 0;
    diff = static_cast<unsigned char>(diff | (g ^ static_cast<unsigned char>(expected[i])));
  }
  return diff == 0 && !expected.empty();
}

bool bearer_ok(std::string_view authorization, std::string_view token) {
  size_t space = authorization.find(' ');
  if (space == std::string_view::npos || lower(authorization.substr(0, space)) != "bearer")
    return false;
  std::string_view given = authorization.substr(space + 1);
  while (!given.empty() && given.front() == ' ') given.remove_prefix(1);
  while (!given.empty() && (given.back() == ' ' || given.back() == '\t')) given.remove_suffix(1);
  return tokens_equal(given, token);
}

bool is_public_path(std::string_view path) {
  return path == "/" || path == "/index.html" || path.starts_with("/assets/");
}

std::optional<HttpResponse> check_request(const HttpRequest& req, const HttpSecurity& security,
                                          bool over_tcp) {
  if (!security.enabled || !over_tcp) return std::nullopt;
  unsigned v = req.version();
  auto host_field = req.find(http::field::host);
  std::string_view host = host_field == req.end() ? std::string_view() : host_field->value();
  if (host_field == req.end() && v >= 11)
    return refuse(400, "bad_request", "an HTTP/1.1 request needs a Host header", v);

  // DNS rebinding: a page on evil.example whose name now resolves to 127.0.0.1 reaches this
  // daemon with "Host: evil.example". Without a token, only loopback names are this daemon.
  if (security.token.empty() && !is_loopback_host_header(host))
    return refuse(403, "forbidden",
                  fmt::format("Host header '{}' is not this daemon's address; use localhost, "
                              "127.0.0.1 or [::1] (or set daemon.token to listen beyond loopback)",
                              quoted(host)),
                  v);

  // CSRF: a page elsewhere may make a browser POST here; browsers say where the page came from.
  bool reads = req.method() == http::verb::get || req.method() == http::verb::head ||
               req.method() == http::verb::options;
  auto origin = req.find(http::field::origin);
  if (!reads && origin != req.end() && !same_origin(origin->value(), host))
    return refuse(403, "forbidden",
                  fmt::format("cross-origin request from '{}' refused: Origin is not '{}'",
                              quoted(origin->value()), quoted(host)),
                  v);

  if (security.token.empty()) return std::nullopt;
  Target target = parse_target(req.target());  // the same decoding the API routes by
  if (is_public_path(target.path)) return std::nullopt;
  if (target.param("token") || target.param("access_token"))
    return refuse(401, "unauthorized",
                  "a token in the URL is never accepted (URLs end up in logs and histories); "
                  "send the header Authorization: Bearer TOKEN",
                  v);
  auto auth = req.find(http::field::authorization);
  if (auth == req.end())
    return refuse(401, "unauthorized",
                  "this daemon needs a token: send the header Authorization: Bearer TOKEN", v);
  if (!bearer_ok(auth->value(), security.token))
    return refuse(401, "unauthorized", "wrong token in Authorization: Bearer", v);
  return std::nullopt;
}

Result<std::string> read_token_file(const std::string& path, std::string* warning) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return make_error(fmt::format("cannot read token file {}: {}", path, std::strerror(errno)));
  std::ostringstream text;
  text << f.rdbuf();
  std::string token = text.str();
  while (!token.empty() && (token.back() == '\n' || token.back() == '\r')) token.pop_back();
  if (token.empty()) return make_error(fmt::format("token file {} is empty", path));
  for (char c : token)
    if (c <= ' ' || c == 0x7f)
      return make_error(fmt::format(
          "token file {}: the token must be one line of printable ASCII without spaces", path));
  struct stat st{};
  if (warning && ::stat(path.c_str(), &st) == 0 && (st.st_mode & S_IROTH))
    *warning = fmt::format("token file {} is readable by every user (mode {:o}); chmod o-r it",
                           path, st.st_mode & 07777);
  return token;
}

}  // namespace vramd
