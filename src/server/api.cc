#include "server/api.h"

#include <algorithm>

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

bool Target::flag(std::string_view name) const {
  const std::string* v = param(name);
  return v && *v != "0" && *v != "false" && *v != "no";
}

boost::asio::awaitable<HttpResponse> Api::unload(const std::string& service, bool force) {
  if (!daemon_.arbiter().service(service))
    co_return error(404, "not_found", fmt::format("no service named '{}'", service));
  uint64_t id = daemon_.request_unload(service, force);
  UnloadFinished f = co_await daemon_.wait_unload(id);
  json body = to_json(f.verdict);
  if (f.refused) {
    body["error"] = {{"code", "refused"}, {"message", f.verdict.message}};
    co_return json_response(409, body.dump());
  }
  co_return json_response(200, body.dump());
}

boost::asio::awaitable<HttpResponse> Api::free_idle() {
  // Every idle service holding memory, unloaded side by side; the answer waits for all verdicts.
  std::vector<uint64_t> ids;
  TimePoint now = daemon_.now();
  for (const auto& s : daemon_.arbiter().services(now)) {
    if (!s.idle_since || s.bytes < 256 * MiB) continue;
    if (s.backoff_until && now < *s.backoff_until) continue;
    ids.push_back(daemon_.request_unload(s.name, false));
  }
  json out = json::array();
  for (uint64_t id : ids) {
    UnloadFinished f = co_await daemon_.wait_unload(id);
    json v = to_json(f.verdict);
    v["refused"] = f.refused;
    out.push_back(std::move(v));
  }
  co_return json_response(200, json{{"unloads", out}}.dump());
}

boost::asio::awaitable<HttpResponse> Api::events(const HttpRequest& req, HttpStream& stream) {
  Target t = parse_target(req.target());
  std::optional<TimePoint> since;
  if (const auto* s = t.param("since")) {
    auto p = parse_rfc3339(*s);
    if (!p) co_return error(400, "bad_request", "since: " + p.error());
    since = *p;
  }
  int64_t after = 0;
  const std::string* after_text = t.param("after");
  std::string last_event_id(req["Last-Event-ID"]);
  if (!after_text && !last_event_id.empty()) after_text = &last_event_id;
  if (after_text) {
    if (after_text->empty() || after_text->size() > 18 ||
        after_text->find_first_not_of("0123456789") != std::string::npos)
      co_return error(400, "bad_request", fmt::format("after: expected an event id, got '{}'", *after_text));
    after = std::stoll(*after_text);
  }
  size_t limit = 1000;
  if (const auto* l = t.param("limit")) {
    if (l->empty() || l->size() > 5 || l->find_first_not_of("0123456789") != std::string::npos)
      co_return error(400, "bad_request", fmt::format("limit: expected a number, got '{}'", *l));
    limit = std::clamp<size_t>(std::stoul(*l), 1, 10000);
  }
  if (req[http::field::accept].find("text/event-stream") != std::string_view::npos) {
    co_await daemon_.stream_events(stream, after);
    co_return json_response(200, "{}");
  }
  auto events = co_await daemon_.events(after, since, limit);
  if (!events) co_return error(500, "store", events.error());
  json out = json::array();
  for (const auto& e : *events) {
    json j = to_json(e.event);
    j["id"] = e.id;
    if (!e.data.is_null()) j["data"] = e.data;
    out.push_back(std::move(j));
  }
  co_return json_response(200, json{{"events", out}}.dump());
}

boost::asio::awaitable<HttpResponse> Api::handle(HttpRequest req, HttpStream& stream) {
  Target t = parse_target(req.target());
  bool get = req.method() == http::verb::get || req.method() == http::verb::head;
  bool post = req.method() == http::verb::post;
  const Arbiter& arbiter = daemon_.arbiter();
  auto only = [&](const char* method) {
    return error(405, "method_not_allowed", fmt::format("{} only accepts {}", t.path, method));
  };

  if (t.path == "/v1/status") {
    if (!get) co_return only("GET");
    co_return json_response(200, to_json(arbiter.status()).dump());
  }
  if (t.path == "/v1/services") {
    if (!get) co_return only("GET");
    json out = json::array();
    for (const auto& s : arbiter.services(daemon_.now())) out.push_back(to_json(s, daemon_.now()));
    co_return json_response(200, json{{"services", out}}.dump());
  }
  if (t.path.starts_with("/v1/services/")) {
    std::string rest = t.path.substr(13);
    std::string name = rest.substr(0, rest.find('/'));
    std::string action = rest.find('/') == std::string::npos ? "" : rest.substr(rest.find('/') + 1);
    if (action.empty()) {
      if (!get) co_return only("GET");
      const ServiceStatus* s = arbiter.service(name);
      if (!s) co_return error(404, "not_found", fmt::format("no service named '{}'", name));
      co_return json_response(200, to_json(*s, daemon_.now()).dump());
    }
    if (action == "unload") {
      if (!post) co_return only("POST");
      co_return co_await unload(name, t.flag("force"));
    }
    co_return error(404, "not_found", fmt::format("no such endpoint: {} {}", std::string(req.method_string()), t.path));
  }
  if (t.path == "/v1/free") {
    if (!post) co_return only("POST");
    if (!t.flag("idle"))
      co_return error(400, "bad_request", "POST /v1/free needs ?idle=true (or unload one service with POST /v1/services/NAME/unload)");
    co_return co_await free_idle();
  }
  if (t.path == "/v1/history") {
    if (!get) co_return only("GET");
    unsigned gpu = 0;
    if (const auto* g = t.param("gpu")) {
      if (g->empty() || g->size() > 2 || g->find_first_not_of("0123456789") != std::string::npos)
        co_return error(400, "bad_request", fmt::format("gpu: expected a GPU index, got '{}'", *g));
      gpu = static_cast<unsigned>(std::stoul(*g));
    }
    Duration window = std::chrono::minutes(15);
    if (const auto* w = t.param("window")) {
      auto d = parse_duration(*w);
      if (!d) co_return error(400, "bad_request", "window: " + d.error());
      window = *d;
    }
    size_t points = 600;
    if (const auto* p = t.param("points")) {
      if (p->empty() || p->size() > 5 || p->find_first_not_of("0123456789") != std::string::npos)
        co_return error(400, "bad_request", fmt::format("points: expected a number, got '{}'", *p));
      points = std::max<size_t>(2, std::stoul(*p));
    }
    bool known = false;
    for (const auto& g : arbiter.status().gpus) known |= g.sample.index == gpu;
    if (!known) co_return error(404, "not_found", fmt::format("no GPU {}", gpu));
    co_return json_response(200, to_json(arbiter.history(gpu, daemon_.now(), window, points), gpu).dump());
  }
  if (t.path == "/v1/events") {
    if (!get) co_return only("GET");
    co_return co_await events(req, stream);
  }
  if (t.path == "/v1/version") {
    if (!get) co_return only("GET");
    co_return json_response(200, json{{"version", VRAMD_VERSION_STRING}}.dump());
  }
  co_return error(404, "not_found", fmt::format("no such endpoint: {} {}", std::string(req.method_string()), t.path));
}

}  // namespace vramd
