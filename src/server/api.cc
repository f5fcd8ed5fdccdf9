#include "server/api.h"
#include "server/assets.h"
#include "server/api_reply.h"

#include <algorithm>
#include <charconv>
#include <climits>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/gpu_select.h"
#include "supervisor/children.h"
#include "server/json_view.h"
#include "server/history_view.h"
#include "core/eviction.h"

namespace vramd {

namespace http = boost::beast::http;
using nlohmann::json;

namespace {

HttpResponse json_reply(unsigned status, const json& body) { return api::reply(status, body); }
HttpResponse error(unsigned status, const std::string& code, const std::string& message) {
  return api::fail(status, code, message);
}

}  // namespace

boost::asio::awaitable<HttpResponse> Api::unload(const Call& c) {
  const std::string service = c.param();
  const bool force = c.t.flag("force");
  if (!daemon_.arbiter().service(service))
    co_return error(404, "not_found", fmt::format("no service named '{}'", service));
  uint64_t id = daemon_.request_unload(service, force);
  UnloadFinished f = co_await daemon_.wait_unload(id);
  json body = to_json(f.verdict);
  if (f.refused) {
    body["error"] = {{"code", "refused"}, {"message", f.verdict.message}};
    co_return json_reply(409, body);
  }
  co_return json_reply(200, body);
}

boost::asio::awaitable<HttpResponse> Api::free_idle(const Call& c) {
  if (!c.t.flag("idle"))
    co_return error(400, "bad_request", "POST /v1/free needs ?idle=true (or unload one service with POST /v1/services/NAME/unload)");
  // Every idle service holding memory, unloaded side by side; the answer waits for all verdicts.
  std::vector<uint64_t> ids;
  MonoTime now = daemon_.now().mono;
  for (const auto& s : daemon_.arbiter().services()) {
    if (!s.idle_since || s.bytes < kWorthUnloading) continue;
    if (s.backoff_until && now < *s.backoff_until) continue;
    if (s.discovered && !s.can_unload) continue;  // discovered and left alone (discover_unload)
    ids.push_back(daemon_.request_unload(s.name, false));
  }
  json out = json::array();
  for (uint64_t id : ids) {
    UnloadFinished f = co_await daemon_.wait_unload(id);
    json v = to_json(f.verdict);
    v["refused"] = f.refused;
    out.push_back(std::move(v));
  }
  co_return json_reply(200, json{{"unloads", out}});
}

boost::asio::awaitable<HttpResponse> Api::events(const Call& c) {
  const Target& t = c.t;
  const HttpRequest& req = c.req;
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
    co_await daemon_.stream_events(c.stream, after);
    co_return json_response(200, "{}");
  }
  auto events = co_await daemon_.events(after, since, limit);
  if (!events) co_return error(500, "store", events.error());
  json out = json::array();
  for (const auto& e : *events) {
    json j = to_json(e.event);
    j["id"] = e.id;
    if (std::string host = daemon_.host(); !host.empty()) j["host"] = host;
    if (!e.data.is_null()) j["data"] = e.data;
    out.push_back(std::move(j));
  }
  co_return json_reply(200, json{{"events", out}});
}

namespace {

// Percentile of sorted values (nearest rank).
template <typename T>
T percentile(const std::vector<T>& sorted, double p) {
  size_t rank = static_cast<size_t>(std::ceil(p * static_cast<double>(sorted.size())));
  return sorted[std::min(sorted.size() - 1, rank == 0 ? 0 : rank - 1)];
}

}  // namespace

boost::asio::awaitable<HttpResponse> Api::jobs(const Call& c) {
  const Target& t = c.t;
  std::string label;
  if (const auto* l = t.param("label")) label = *l;
  size_t limit = 100;
  if (const auto* l = t.param("limit")) {
    if (l->empty() || l->size() > 5 || l->find_first_not_of("0123456789") != std::string::npos)
      co_return error(400, "bad_request", fmt::format("limit: expected a number, got '{}'", *l));
    limit = std::clamp<size_t>(std::stoul(*l), 1, 10000);
  }
  const bool stats = t.path == "/v1/jobs/stats";
  if (stats && label.empty()) co_return error(400, "bad_request", "/v1/jobs/stats needs ?label=LABEL");
  auto jobs = co_await daemon_.jobs(label, stats ? 100000 : limit);
  if (!jobs) co_return error(500, "store", jobs.error());
  if (!stats) {
    json out = json::array();
    for (const auto& j : *jobs) out.push_back(to_json(j));
    co_return json_reply(200, json{{"jobs", out}});
  }
  std::vector<int64_t> wait, run;
  std::vector<Bytes> peak;
  size_t failed = 0, ran = 0;
  for (const auto& j : *jobs) {
    wait.push_back(j.wait.count());
    if (!j.run) continue;
    ++ran;
    run.push_back(j.run->count());
    peak.push_back(j.peak_vram);
    if (j.exit_status.value_or(0) != 0 || j.state != LeaseState::released) ++failed;
  }
  std::sort(wait.begin(), wait.end());
  std::sort(run.begin(), run.end());
  std::sort(peak.begin(), peak.end());
  auto pct = [](const auto& v, double p) { return v.empty() ? json(nullptr) : json(percentile(v, p)); };
  json out = {{"label", label},
              {"count", jobs->size()},
              {"ran", ran},
              {"failed", failed},
              {"wait_ms", {{"p50", pct(wait, 0.5)}, {"p95", pct(wait, 0.95)}}},
              {"run_ms", {{"p50", pct(run, 0.5)}, {"p95", pct(run, 0.95)}}},
              {"peak_bytes", {{"p50", pct(peak, 0.5)}, {"max", peak.empty() ? json(nullptr) : json(peak.back())}}}};
  co_return json_reply(200, out);
}

boost::asio::awaitable<HttpResponse> Api::start(const Call& c) { return lifecycle(c, Command::start); }
boost::asio::awaitable<HttpResponse> Api::stop(const Call& c) { return lifecycle(c, Command::stop); }
boost::asio::awaitable<HttpResponse> Api::restart(const Call& c) { return lifecycle(c, Command::restart); }

boost::asio::awaitable<HttpResponse> Api::lifecycle(const Call& c, Command command) {
  const std::string service = c.param();
  const std::string action = to_string(command);
  if (!daemon_.arbiter().service(service))
    co_return error(404, "not_found", fmt::format("no service named '{}'", service));
  bool wait = c.t.flag("wait");
  uint64_t id =
      daemon_.service_command(service, command, command == Command::start && c.t.flag("force"));
  // A first model load can take minutes: --wait waits up to 15 min.
  CommandFinished f = co_await daemon_.wait_command(id, wait ? Duration(std::chrono::minutes(15)) : Duration(0));
  const ServiceStatus* st = daemon_.arbiter().service(service);
  json body = {{"service", service},
               {"action", action},
               {"done", !f.message.empty() || f.ok},
               {"ok", f.ok},
               {"message", f.message},
               {"state", st && st->managed ? json(to_string(st->managed->state)) : json(nullptr)}};
  if (f.message.empty() && !f.ok) co_return json_reply(202, body);  // under way
  if (!f.ok) {
    body["error"] = {{"code", "failed"}, {"message", f.message}};
    co_return json_reply(409, body);
  }
  co_return json_reply(200, body);
}

boost::asio::awaitable<HttpResponse> Api::logs(const Call& c) {
  const std::string service = c.param();
  const Target& t = c.t;
  if (!daemon_.arbiter().service(service))
    co_return error(404, "not_found", fmt::format("no service named '{}'", service));
  std::string path = daemon_.log_path(service);
  size_t lines = 100;
  if (const auto* n = t.param("lines")) {
    if (n->empty() || n->size() > 6 || n->find_first_not_of("0123456789") != std::string::npos)
      co_return error(400, "bad_request", fmt::format("lines: expected a number, got '{}'", *n));
    lines = std::clamp<size_t>(std::stoul(*n), 1, 100000);
  }
  std::optional<uint64_t> after;
  if (const auto* a = t.param("after")) {
    // A byte offset, or a container's log timestamp in ns (19 digits): anything uint64 holds.
    uint64_t v = 0;
    auto [p, ec] = std::from_chars(a->data(), a->data() + a->size(), v);
    if (a->empty() || ec != std::errc() || p != a->data() + a->size())
      co_return error(400, "bad_request", fmt::format("after: expected a byte offset, got '{}'", *a));
    after = v;
  }
  // A container's output is the engine's (its offsets are the engine's timestamps).
  const ServiceConfig* cfg = daemon_.arbiter().config().find_service(service);
  if (cfg && cfg->start.empty() && !cfg->match.container.empty()) {
    auto from_engine = daemon_.read_container_log(cfg->match.container, lines, after);
    Result<LogPage> got = co_await std::move(from_engine);
    if (!got)
      co_return error(502, "backend_failed",
                      fmt::format("logs of container {}: {}", cfg->match.container, got.error()));
    json out = {{"lines", std::move(got->lines)},
                {"offset", got->offset},
                {"container", cfg->match.container}};
    co_return json_reply(200, out);
  }
  // A unit's output is the journal's (its offsets are the entries' realtime µs).
  if (cfg && cfg->start.empty() && cfg->match.container.empty() && !cfg->match.unit.empty()) {
    auto from_journal = daemon_.read_unit_log(cfg->match.unit, lines, after);
    Result<LogPage> got = co_await std::move(from_journal);
    if (!got)
      co_return error(502, "backend_failed",
                      fmt::format("journal of unit {}: {}", cfg->match.unit, got.error()));
    json out = {{"lines", std::move(got->lines)}, {"offset", got->offset}, {"unit", cfg->match.unit}};
    co_return json_reply(200, out);
  }
  // Up to 20 MiB of log: read on the worker, not on the event loop.
  auto read = daemon_.read_log(path, lines, after);  // GCC 12: no temporaries inside co_await
  LogPage page = co_await std::move(read);
  json out = {{"lines", std::move(page.lines)}, {"offset", page.offset}, {"path", path}};
  co_return json_reply(200, out);
}

namespace {
json crash_json(const CrashRecord& c, bool with_log) {
  json holders = json::array();
  for (const auto& [o, b] : c.gpu_holders) holders.push_back({{"owner", o}, {"bytes", b}});
  json j = {{"id", c.id},
            {"service", c.service},
            {"at", format_rfc3339(c.at)},
            {"pid", c.pid},
            {"exit_code", c.exit_code ? json(*c.exit_code) : json(nullptr)},
            {"signal", c.signal ? json(*c.signal) : json(nullptr)},
            {"reason", c.reason.empty() ? json(nullptr) : json(c.reason)},
            {"signature", c.signature},
            {"title", c.title},
            {"explanation", c.explanation},
            {"suggestion", c.suggestion},
            {"evidence", c.evidence},
            {"gpu_holders", holders}};
  if (with_log) j["log_tail"] = c.log_tail;
  return j;
}
}  // namespace

boost::asio::awaitable<HttpResponse> Api::crashes(const Call& c) {
  const std::string service = c.param();
  const Target& t = c.t;
  if (!daemon_.arbiter().service(service))
    co_return error(404, "not_found", fmt::format("no service named '{}'", service));
  size_t limit = 20;
  if (const auto* l = t.param("limit")) {
    if (l->empty() || l->size() > 4 || l->find_first_not_of("0123456789") != std::string::npos)
      co_return error(400, "bad_request", fmt::format("limit: expected a number, got '{}'", *l));
    limit = std::clamp<size_t>(std::stoul(*l), 1, 1000);
  }
  auto list = co_await daemon_.crashes(service, limit);
  if (!list) co_return error(500, "store", list.error());
  json out = json::array();
  for (const auto& c : *list) out.push_back(crash_json(c, true));
  co_return json_reply(200, json{{"crashes", out}});
}

boost::asio::awaitable<HttpResponse> Api::doctor(const Call& c) {
  const Target& t = c.t;
  std::string only;
  if (const auto* s = t.param("service")) {
    only = *s;
    if (!daemon_.arbiter().service(only))
      co_return error(404, "not_found", fmt::format("no service named '{}'", only));
  }
  auto list = co_await daemon_.crashes(only, 5000);
  if (!list) co_return error(500, "store", list.error());
  // The versions and argument sets each service ran: crashes split by them. A daemon that
  // keeps no history gives none (nothing split).
  auto variants_op = daemon_.variants(only);
  auto variants = co_await std::move(variants_op);
  std::vector<ServiceVariant> all_variants = variants ? std::move(*variants) : std::vector<ServiceVariant>{};
  json services = json::array();
  for (const auto& st : daemon_.arbiter().services()) {
    if (!only.empty() && st.name != only) continue;
    // Crashes grouped by signature, most frequent first.
    std::map<std::string, json> groups;
    for (const auto& c : *list) {  // newest first
      if (c.service != st.name) continue;
      json& g = groups[c.signature];
      if (g.is_null()) {
        g = {{"signature", c.signature}, {"title", c.title}, {"count", 0}, {"last_seen", format_rfc3339(c.at)},
             {"explanation", c.explanation}, {"suggestion", c.suggestion}, {"evidence", c.evidence},
             {"last_exit", c.signal ? fmt::format("signal {}", *c.signal)
                                    : c.exit_code ? fmt::format("status {}", *c.exit_code) : "unknown"},
             {"gpu_holders", crash_json(c, false)["gpu_holders"]}};
      }
      g["count"] = g["count"].get<int>() + 1;
      g["first_seen"] = format_rfc3339(c.at);
    }
    std::vector<json> sorted;
    sorted.reserve(groups.size());
    for (auto& [sig, g] : groups) sorted.push_back(std::move(g));
    std::stable_sort(sorted.begin(), sorted.end(),
                     [](const json& a, const json& b) { return a["count"].get<int>() > b["count"].get<int>(); });
    if (sorted.empty() && !st.managed && only.empty()) continue;
    {
      std::vector<CrashRecord> mine;
      std::vector<ServiceVariant> ran;
      for (const auto& c : *list)
        if (c.service == st.name) mine.push_back(c);
      for (const auto& v : all_variants)
        if (v.service == st.name) ran.push_back(v);
      json split = crash_split_json(mine, ran, st.args, daemon_.now().wall);
      for (json& g : sorted)
        for (const json& s : split)
          if (s["signature"] == g["signature"]) {
            g["by_variant"] = s["by_variant"];
            g["summary"] = s["summary"];
            g["applied"] = s["applied"];
          }
    }
    json entry = {{"service", st.name}, {"crashes", sorted}};
    if (st.managed) {
      entry["state"] = to_string(st.managed->state);
      entry["reason"] = st.managed->reason.empty() ? json(nullptr) : json(st.managed->reason);
      entry["restarts"] = st.managed->restart_count;
    }
    services.push_back(std::move(entry));
  }
  co_return json_reply(200, json{{"services", services}});
}

const std::vector<Api::Route>& Api::routes() {
  static const std::vector<Route> table = {
      {kGet, "/v1/version", &Api::version},
      {kGet, "/v1/status", &Api::status},
      {kGet, "/v1/history", &Api::chart},
      {kGet, "/v1/history/records", &Api::history},
      {kGet, "/v1/history/durations", &Api::history},
      {kGet, "/v1/services", &Api::services},
      {kGet, "/v1/services/{name}", &Api::service},
      {kPost, "/v1/services/{name}/unload", &Api::unload},
      {kPost, "/v1/services/{name}/start", &Api::start},
      {kPost, "/v1/services/{name}/stop", &Api::stop},
      {kPost, "/v1/services/{name}/restart", &Api::restart},
      {kGet, "/v1/services/{name}/logs", &Api::logs},
      {kGet, "/v1/services/{name}/crashes", &Api::crashes},
      {kPost, "/v1/free", &Api::free_idle},
      {kGet, "/v1/proxy", &Api::request_path},
      {kGet, "/v1/doctor", &Api::doctor},
      {kGet, "/v1/hosts", &Api::hosts},
      {kGet, "/v1/leases", &Api::list_leases},
      {kPost, "/v1/leases", &Api::create_lease},
      {kGet, "/v1/leases/{id}", &Api::get_lease},
      {kDelete, "/v1/leases/{id}", &Api::release_lease},
      {kPost, "/v1/leases/{id}/heartbeat", &Api::heartbeat},
      {kGet, "/v1/jobs", &Api::jobs},
      {kGet, "/v1/jobs/stats", &Api::jobs},
      {kGet, "/v1/events", &Api::events},
      {kGet, "/metrics", &Api::metrics},
      {kGet, "/", &Api::dashboard},
      {kGet, "/assets/{name}", &Api::dashboard},
  };
  return table;
}

boost::asio::awaitable<HttpResponse> Api::handle(HttpRequest req, HttpStream& stream) {
  Target t = parse_target(req.target());
  unsigned allowed = 0;  // the methods of the routes whose path matched
  for (const Route& r : routes()) {
    PathParams params;
    if (!match_path(r.pattern, t.path, params)) continue;
    if (method_in(req.method(), r.methods)) {
      const Call call{req, stream, t, params};
      co_return co_await (this->*r.handler)(call);
    }
    allowed |= r.methods;
  }
  if (allowed) {
    HttpResponse res = error(405, "method_not_allowed",
                             fmt::format("{} only accepts {}", t.path, methods_text(allowed)));
    res.set(http::field::allow, allow_header(allowed));
    co_return res;
  }
  // The dashboard's other paths (index.html, a traversal attempt) answer as files do.
  if (!t.path.starts_with("/v1/"))
    if (auto asset = serve_asset(req)) co_return std::move(*asset);
  co_return error(404, "not_found", fmt::format("no such endpoint: {} {}", std::string(req.method_string()), t.path));
}

boost::asio::awaitable<HttpResponse> Api::version(const Call&) {
  co_return json_reply(200, json{{"version", VRAMD_VERSION_STRING}});
}

boost::asio::awaitable<HttpResponse> Api::status(const Call&) {
  Now now = daemon_.now();
  json out = to_json(daemon_.arbiter().status(), now);
  if (std::string host = daemon_.host(); !host.empty()) out["host"] = host;
  out["suspend"] = to_json(daemon_.arbiter().suspend_offer());
  json faults = json::array();
  for (const auto& f : daemon_.faults())
    faults.push_back({{"backend", f.backend}, {"error", f.error}, {"since", format_rfc3339(f.since)}});
  out["faults"] = std::move(faults);
  co_return json_reply(200, out);
}

boost::asio::awaitable<HttpResponse> Api::hosts(const Call&) {
  auto hosts = co_await daemon_.hosts();
  if (!hosts) co_return error(503, "store", hosts.error());
  co_return json_reply(200, *hosts);
}

// A service as the API shows it: its `models` are those its probe lists, then its configured
// `models` (the front door routes both).
json Api::service_json(const ServiceStatus& s, const Now& now) const {
  json out = to_json(s, now);
  if (const ServiceConfig* cfg = daemon_.arbiter().config().find_service(s.name)) {
    json& models = out["models"];
    for (const auto& m : cfg->models)
      if (std::find(models.begin(), models.end(), m) == models.end()) models.push_back(m);
  }
  return out;
}

boost::asio::awaitable<HttpResponse> Api::services(const Call&) {
  json out = json::array();
  Now now = daemon_.now();
  for (const auto& s : daemon_.arbiter().services()) out.push_back(service_json(s, now));
  co_return json_reply(200, json{{"services", out}});
}

boost::asio::awaitable<HttpResponse> Api::service(const Call& c) {
  const ServiceStatus* s = daemon_.arbiter().service(c.param());
  if (!s) co_return error(404, "not_found", fmt::format("no service named '{}'", c.param()));
  co_return json_reply(200, service_json(*s, daemon_.now()));
}

boost::asio::awaitable<HttpResponse> Api::chart(const Call& c) {
  const Target& t = c.t;
  unsigned gpu = 0;
  if (const auto* g = t.param("gpu")) {
    // [issue 16: MIG] an index or a MIG instance "0/2"
    auto sel = parse_gpu_selector(*g);
    if (!sel || !*sel) co_return error(400, "bad_request", fmt::format("gpu: expected a GPU index, got '{}'", *g));
    gpu = **sel;
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
  const Arbiter& arbiter = daemon_.arbiter();
  bool known = false;
  for (const auto& g : arbiter.status().gpus) known |= g.sample.index == gpu;
  if (!known) co_return error(404, "not_found", fmt::format("no GPU {}", gpu));
  co_return json_reply(200, to_json(arbiter.history(gpu, daemon_.now().mono, window, points), gpu, daemon_.now()));
}

boost::asio::awaitable<HttpResponse> Api::request_path(const Call&) {
  co_return json_reply(200, daemon_.request_path());
}

boost::asio::awaitable<HttpResponse> Api::metrics(const Call& c) {
  HttpResponse res{http::status::ok, c.req.version()};
  res.set(http::field::content_type, "text/plain; version=0.0.4; charset=utf-8");
  res.set(http::field::cache_control, "no-store");
  res.body() = render_metrics(daemon_.arbiter(), daemon_.metrics(), daemon_.now(), daemon_.host()) +
               daemon_.extra_metrics();
  res.prepare_payload();
  co_return res;
}

boost::asio::awaitable<HttpResponse> Api::dashboard(const Call& c) {
  if (auto asset = serve_asset(c.req)) co_return std::move(*asset);
  co_return error(404, "not_found", "no such file");
}

}  // namespace vramd
