#include "server/api.h"

#include <fmt/format.h>

#include "server/json_view.h"

namespace vramd {

namespace http = boost::beast::http;
using nlohmann::json;

namespace {

int hex(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string url_decode(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && hex(s[i + 1]) >= 0 && hex(s[i + 2]) >= 0) {
      out += static_cast<char>(hex(s[i + 1]) * 16 + hex(s[i + 2]));
      i += 2;
    } else if (s[i] == '+') {
      out += ' ';
    } else {
      out += s[i];
    }
  }
  return out;
}

HttpResponse error(unsigned status, const std::string& code, const std::string& message) {
  return json_response(status, error_json(code, message).dump());
}

}  // namespace

const std::string* Target::param(std::string_view name) const {
  for (const auto& [k, v] : query)
    if (k == name) return &v;
  return nullptr;
}

Target parse_target(std::string_view target) {
  Target t;
  auto q = target.find('?');
  t.path = url_decode(target.substr(0, q));
  if (q == std::string_view::npos) return t;
  std::string_view rest = target.substr(q + 1);
  while (!rest.empty()) {
    auto amp = rest.find('&');
    std::string_view pair = rest.substr(0, amp);
    auto eq = pair.find('=');
    t.query.emplace_back(url_decode(pair.substr(0, eq)),
                         eq == std::string_view::npos ? "" : url_decode(pair.substr(eq + 1)));
    if (amp == std::string_view::npos) break;
    rest.remove_prefix(amp + 1);
  }
  return t;
}

boost::asio::awaitable<HttpResponse> Api::handle(HttpRequest req) { co_return route(req); }

HttpResponse Api::route(const HttpRequest& req) {
  Target t = parse_target(req.target());
  bool get = req.method() == http::verb::get || req.method() == http::verb::head;
  auto only_get = [&]() { return error(405, "method_not_allowed", fmt::format("{} only accepts GET", t.path)); };

  if (t.path == "/v1/status") {
    if (!get) return only_get();
    return json_response(200, to_json(arbiter_.status()).dump());
  }
  if (t.path == "/v1/history") {
    if (!get) return only_get();
    unsigned gpu = 0;
    if (const auto* g = t.param("gpu")) {
      if (g->empty() || g->size() > 2 || g->find_first_not_of("0123456789") != std::string::npos)
        return error(400, "bad_request", fmt::format("gpu: expected a GPU index, got '{}'", *g));
      gpu = static_cast<unsigned>(std::stoul(*g));
    }
    Duration window = std::chrono::minutes(15);
    if (const auto* w = t.param("window")) {
      auto d = parse_duration(*w);
      if (!d) return error(400, "bad_request", "window: " + d.error());
      window = *d;
    }
    size_t points = 600;
    if (const auto* p = t.param("points")) {
      if (p->empty() || p->size() > 5 || p->find_first_not_of("0123456789") != std::string::npos)
        return error(400, "bad_request", fmt::format("points: expected a number, got '{}'", *p));
      points = std::max<size_t>(2, std::stoul(*p));
    }
    bool known = false;
    for (const auto& g : arbiter_.status().gpus) known |= g.sample.index == gpu;
    if (!known) return error(404, "not_found", fmt::format("no GPU {}", gpu));
    return json_response(200, to_json(arbiter_.history(gpu, clock_(), window, points), gpu).dump());
  }
  if (t.path == "/v1/events") {
    if (!get) return only_get();
    std::optional<TimePoint> since;
    if (const auto* s = t.param("since")) {
      auto p = parse_rfc3339(*s);
      if (!p) return error(400, "bad_request", "since: " + p.error());
      since = *p;
    }
    json out = json::array();
    for (const auto& e : events_)
      if (!since || e.at > *since) out.push_back(to_json(e));
    return json_response(200, json{{"events", out}}.dump());
  }
  if (t.path == "/v1/version") {
    if (!get) return only_get();
    return json_response(200, json{{"version", VRAMD_VERSION_STRING}}.dump());
  }
  return error(404, "not_found", fmt::format("no such endpoint: {} {}", std::string(req.method_string()), t.path));
}

}  // namespace vramd
