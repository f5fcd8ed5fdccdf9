#include "server/api.h"
#include "server/assets.h"

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

// Every JSON answer: messages may quote what the client sent, so bytes that are not UTF-8 are
// replaced, not thrown on.
HttpResponse json_reply(unsigned status, const json& body) {
  return json_response(status, body.dump(-1, ' ', false, json::error_handler_t::replace));
}

HttpResponse error(unsigned status, const std::string& code, const std::string& message) {
  return json_reply(status, error_json(code, message));
}

}  // namespace

boost::asio::awaitable<HttpResponse> Api::unload(const std::string& service, bool force) {
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

boost::asio::awaitable<HttpResponse> Api::free_idle() {
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
    if (std::string host = daemon_.host(); !host.empty()) j["host"] = host;
    if (!e.data.is_null()) j["data"] = e.data;
    out.push_back(std::move(j));
  }
  co_return json_reply(200, json{{"events", out}});
}

namespace {

// A size as bytes (a number) or text ("12GiB").
std::optional<std::string> read_size(const json& body, const char* key, std::optional<Bytes>& out) {
  if (!body.contains(key) || body[key].is_null()) return std::nullopt;
  const json& v = body[key];
  if (v.is_number_unsigned()) {
    out = v.get<Bytes>();
  } else if (v.is_string()) {
    auto b = parse_size(v.get<std::string>());
    if (!b) return fmt::format("{}: {}", key, b.error());
    out = *b;
  } else {
    return fmt::format("{}: expected bytes or a size like \"12GiB\"", key);
  }
  return std::nullopt;
}

// Percentile of sorted values (nearest rank).
template <typename T>
T percentile(const std::vector<T>& sorted, double p) {
  size_t rank = static_cast<size_t>(std::ceil(p * static_cast<double>(sorted.size())));
  return sorted[std::min(sorted.size() - 1, rank == 0 ? 0 : rank - 1)];
}

}  // namespace

boost::asio::awaitable<HttpResponse> Api::leases(const HttpRequest& req, HttpStream& stream) {
  auto store_error = [this] {
    for (const auto& f : daemon_.faults())
      if (f.backend == "store") return f.error;
    return std::string("the store has not answered yet");
  };
  Target t = parse_target(req.target());
  const Arbiter& arbiter = daemon_.arbiter();
  bool get = req.method() == http::verb::get || req.method() == http::verb::head;
  std::optional<Duration> wait;
  if (const auto* w = t.param("wait")) {
    auto d = parse_duration(*w);
    if (!d) co_return error(400, "bad_request", "wait: " + d.error());
    wait = std::min<Duration>(*d, std::chrono::minutes(5));
  }
  // ?watch=DURATION: as ?wait, until the lease ends (a holder's long poll while it runs).
  bool until_ended = false;
  if (const auto* w = t.param("watch")) {
    auto d = parse_duration(*w);
    if (!d) co_return error(400, "bad_request", "watch: " + d.error());
    wait = std::min<Duration>(*d, std::chrono::minutes(5));
    until_ended = true;
  }

  if (t.path == "/v1/leases") {
    if (get) {
      json out = json::array();
      Now now = daemon_.now();
      // ?host=all: every host's leases (on a shared store); ?host=NAME: that host's. Without
      // it (or naming this host), this host's, from the Arbiter, as before.
      const std::string* host = t.param("host");
      if (!host || *host == daemon_.host()) {
        for (const auto& l : arbiter.leases()) out.push_back(lease_json(l, now));
        co_return json_reply(200, json{{"leases", out}});
      }
      if (host->empty()) co_return error(400, "bad_request", "host: expected a host name or all");
      bool all = *host == "all";
      // (GCC 12: a temporary of a ?: inside a co_await expression is destroyed twice.)
      std::string only = all ? std::string() : *host;
      auto other = co_await daemon_.leases_elsewhere(only);
      if (!other) co_return error(503, "store", other.error());
      if (!all && std::find(other->hosts.begin(), other->hosts.end(), *host) == other->hosts.end())
        co_return error(400, "bad_request",
                        fmt::format("host: no host named '{}' shares this daemon's store (hosts: {}; or all)",
                                    *host, fmt::join(other->hosts, ", ")));
      std::set<uint64_t> there;  // the store's word on where a lease is beats this host's memory
      for (const auto& j : other->leases) there.insert(j["id"].get<uint64_t>());
      if (all)
        for (const auto& l : arbiter.leases())
          if (!there.count(l.id)) out.push_back(lease_json(l, now));
      for (auto& j : other->leases) out.push_back(std::move(j));
      std::stable_sort(out.begin(), out.end(), [](const json& a, const json& b) {
        return std::make_pair(a.value("host", ""), a.value("id", uint64_t{0})) <
               std::make_pair(b.value("host", ""), b.value("id", uint64_t{0}));
      });
      co_return json_reply(200, json{{"leases", out}});
    }
    if (req.method() != http::verb::post)
      co_return error(405, "method_not_allowed", "/v1/leases accepts GET and POST");
    json body = json::parse(req.body(), nullptr, false);
    if (body.is_discarded() || !body.is_object())
      co_return error(400, "bad_request", "expected a JSON object: {\"vram\": \"12GiB\", ...}");
    LeaseRequest r;
    std::optional<Bytes> vram, ram;
    if (auto e = read_size(body, "vram", vram)) co_return error(400, "bad_request", *e);
    if (auto e = read_size(body, "ram", ram)) co_return error(400, "bad_request", *e);
    if (!vram || *vram == 0) co_return error(400, "bad_request", "vram: required, more than 0");
    r.vram = *vram;
    r.ram = ram;
    // [issue 16: MIG] "gpu": an index, a MIG instance "0/2", or "any" (core/gpu_select.h).
    if (body.contains("gpu") && !body["gpu"].is_null()) {
      const json& g = body["gpu"];
      auto sel = parse_gpu_selector(g.is_string()           ? g.get<std::string>()
                                    : g.is_number_unsigned() ? std::to_string(g.get<uint64_t>())
                                                             : g.dump());
      if (!sel) co_return error(400, "bad_request", sel.error());
      r.gpu = *sel;
    }
    // [/issue 16]
    auto text = [&](const char* key, std::string& out) -> bool {
      if (!body.contains(key) || body[key].is_null()) return true;
      if (!body[key].is_string()) return false;
      out = body[key].get<std::string>();
      return true;
    };
    for (auto [key, field] : {std::pair{"holder", &r.holder}, {"label", &r.label},
                              {"service", &r.service}, {"group", &r.group}, {"command", &r.command},
                              {"host", &r.host}})
      if (!text(key, *field)) co_return error(400, "bad_request", fmt::format("{}: expected a string", key));
    if (body.contains("priority")) {
      if (!body["priority"].is_number_integer() || body["priority"].get<int64_t>() < INT_MIN ||
          body["priority"].get<int64_t>() > INT_MAX ||
          (body["priority"].is_number_unsigned() && body["priority"].get<uint64_t>() > INT_MAX))
        co_return error(400, "bad_request", "priority: expected a whole number");
      r.priority = body["priority"].get<int>();
    }
    if (body.contains("on_host_lost") && !body["on_host_lost"].is_null()) {
      auto o = body["on_host_lost"].is_string()
                   ? parse_on_host_lost(body["on_host_lost"].get<std::string>())
                   : std::nullopt;
      if (!o) co_return error(400, "bad_request", "on_host_lost: expected \"requeue\" or \"end\"");
      r.on_host_lost = *o;
    }
    if (body.contains("timeout") && !body["timeout"].is_null()) {
      auto d = body["timeout"].is_string() ? parse_duration(body["timeout"].get<std::string>())
                                           : Result<Duration>(make_error("expected a duration like \"1h\""));
      if (!d) co_return error(400, "bad_request", "timeout: " + d.error());
      r.wait_timeout = *d;
    }
    if (body.contains("pid") && !body["pid"].is_null()) {
      if (!body["pid"].is_number_unsigned() || body["pid"].get<uint64_t>() < 1 ||
          body["pid"].get<uint64_t>() > INT_MAX)
        co_return error(400, "bad_request", "pid: expected a process id");
      r.pid = body["pid"].get<int>();
    } else {
      r.pid = stream.peer_pid();  // on the unix socket: the client itself
    }
    if (!r.service.empty() && !arbiter.config().find_service(r.service))
      co_return error(400, "bad_request", fmt::format("service: no service named '{}'", r.service));
    // A lease that can never fit is refused now rather than queued forever (on this host: in the
    // shared queue another host may be larger).
    bool shared = daemon_.shared_queue() && r.service.empty();
    Bytes largest = 0;
    bool known_gpu = !r.gpu;
    bool here_only = !shared || r.host == daemon_.host();
    for (const auto& g : here_only ? arbiter.status().gpus : std::vector<GpuStatus>{}) {
      if (r.gpu && g.sample.index != *r.gpu) continue;
      // [issue 16: MIG] a MIG-enabled card's memory is its instances': lease one of those.
      if (r.gpu && g.sample.mig_enabled)
        co_return error(400, "bad_request",
                        fmt::format("gpu: GPU {} has MIG on; ask for one of its instances "
                                    "(GPU/GI, e.g. {}/1), listed by vramd status",
                                    gpu_label(g.sample), gpu_label(g.sample)));
      if (g.sample.mig_enabled) continue;  // its total is not room for a lease
      // [/issue 16]
      known_gpu = true;
      Bytes room = g.sample.total > arbiter.config().gpu.reserve ? g.sample.total - arbiter.config().gpu.reserve : 0;
      largest = std::max(largest, room);
    }
    if (!here_only) known_gpu = true;
    if (arbiter.status().sampled && !known_gpu)
      co_return error(400, "bad_request", fmt::format("gpu: no GPU {}", gpu_label(*r.gpu)));
    if (arbiter.status().sampled && largest > 0 && r.vram > largest)
      co_return error(400, "never_fits",
                      fmt::format("needs {}; the largest GPU it may use has {}", format_size(r.vram),
                                  format_size(largest)));
    auto id = daemon_.request_lease(std::move(r));
    if (!id) co_return error(400, "bad_request", id.error());
    co_await daemon_.wait_lease(*id, wait.value_or(Duration(0)));
    const Lease* l = daemon_.arbiter().lease(*id);
    if (!l) co_return error(500, "internal", "the lease vanished");
    if (!daemon_.lease_written(*id)) {
      // Never acknowledge what a restart would not keep: the client hears no, and the lease ends.
      daemon_.release_lease(*id, std::nullopt);
      co_return error(503, "store",
                      fmt::format("lease #{} could not be written: {}", *id, store_error()));
    }
    co_return json_reply(201, lease_json(*l, daemon_.now()));
  }

  // /v1/leases/ID[/heartbeat]
  std::string rest = t.path.substr(strlen("/v1/leases/"));
  std::string id_text = rest.substr(0, rest.find('/'));
  std::string action = rest.find('/') == std::string::npos ? "" : rest.substr(rest.find('/') + 1);
  if (id_text.empty() || id_text.size() > 18 || id_text.find_first_not_of("0123456789") != std::string::npos)
    co_return error(404, "not_found", fmt::format("no lease '{}'", id_text));
  uint64_t id = std::stoull(id_text);
  // ?token=T: is T the lease's current grant? (docs/api.md "Guarantees": a job that writes to
  // shared storage asks before it writes and refuses a stale writer.) 200 when it is, 409 when
  // not; never a heartbeat. A lease granted here answers from here (this host gives up its shared
  // leases before any other may take them); any other, on a shared store, from the store.
  if (const auto* token_text = t.param("token"); token_text && get && action.empty()) {
    if (token_text->empty() || token_text->size() > 19 ||
        token_text->find_first_not_of("0123456789") != std::string::npos)
      co_return error(400, "bad_request",
                      fmt::format("token: expected a whole number, got '{}'", *token_text));
    uint64_t token = std::stoull(*token_text);
    json now_is;  // the lease as the one who knows best has it: state, token, host
    const Lease* mine = arbiter.lease(id);
    if (mine && mine->state == LeaseState::granted && mine->elsewhere.empty()) {
      now_is = lease_json(*mine, daemon_.now());
    } else if (daemon_.shared_queue()) {
      auto op = daemon_.lease_elsewhere(id);
      auto there = co_await std::move(op);
      if (!there)
        co_return error(503, "store", fmt::format("cannot vouch for lease #{}'s token: {}", id,
                                                  there.error()));
      if (*there) now_is = **there;
    }
    if (now_is.is_null() && mine) now_is = lease_json(*mine, daemon_.now());
    if (now_is.is_null()) co_return error(404, "not_found", fmt::format("no lease #{}", id));
    const bool granted = now_is.value("state", "") == "granted" && !now_is.value("ended", false);
    const json current_token = granted && now_is.contains("token") ? now_is["token"] : json(nullptr);
    const bool current = current_token.is_number_unsigned() && current_token.get<uint64_t>() == token;
    json body = {{"id", id},
                 {"token", token},
                 {"current", current},
                 {"current_token", current_token},
                 {"state", now_is.value("state", "")},
                 {"host", now_is.contains("host") ? now_is["host"] : json(nullptr)}};
    if (!current)
      body["message"] =
          granted ? fmt::format("token {} of lease #{} is stale: its current grant is token {}",
                                token, id, current_token.dump())
                  : fmt::format("token {} of lease #{} is stale: the lease is {}", token, id,
                                now_is.value("state", std::string("ended")));
    co_return json_reply(current ? 200 : 409, body);
  }
  // Several hosts: a lease this host does not hold (granted elsewhere, or queued in another
  // host's keeping) is read from the store; an end is asked of the host that holds it, and a
  // heartbeat (a POST .../heartbeat, or a GET) is passed on to it through the store.
  if (const Lease* mine = arbiter.lease(id);
      daemon_.shared_queue() && (action.empty() || action == "heartbeat") &&
      (!mine || !mine->elsewhere.empty())) {
    if (action == "heartbeat" && req.method() != http::verb::post)
      co_return error(405, "method_not_allowed", "heartbeat accepts POST");
    if (req.method() == http::verb::delete_) {
      auto op = daemon_.release_elsewhere(id, "released from another host's API");
      auto asked = co_await std::move(op);
      if (!asked) co_return error(503, "store", asked.error());
    } else if (!get && action.empty()) {
      co_return error(405, "method_not_allowed", fmt::format("{} accepts GET and DELETE", t.path));
    } else {
      auto op = daemon_.heartbeat_elsewhere(id);
      auto passed = co_await std::move(op);
      if (!passed) co_return error(503, "store", passed.error());
    }
    auto op = daemon_.lease_elsewhere(id);
    auto there = co_await std::move(op);
    if (!there) co_return error(503, "store", there.error());
    if (*there) co_return json_reply(200, **there);
    if (!mine) co_return error(404, "not_found", fmt::format("no lease #{}", id));
  }
  if (!arbiter.lease(id)) {
    // Ended before a restart of vramd: its job record says how it ended.
    if (get && action.empty()) {
      auto op = daemon_.job(id);
      auto job = co_await std::move(op);
      if (!job) co_return error(500, "store", job.error());
      if (*job) {
        json j = to_json(**job);
        j["ended"] = true;
        co_return json_reply(200, j);
      }
    }
    co_return error(404, "not_found", fmt::format("no lease #{}", id));
  }
  if (action == "heartbeat") {
    if (req.method() != http::verb::post) co_return error(405, "method_not_allowed", "heartbeat accepts POST");
    daemon_.lease_heartbeat(id);
  } else if (!action.empty()) {
    co_return error(404, "not_found", fmt::format("no such endpoint: {}", t.path));
  } else if (get) {
    daemon_.lease_heartbeat(id);
    // Without ?wait this waits only for a write in flight (milliseconds; a restart's restored
    // leases are being written as the first requests come in).
    co_await daemon_.wait_lease(id, wait.value_or(Duration(0)), until_ended);
    const Lease* now_is = daemon_.arbiter().lease(id);
    if (!daemon_.lease_written(id) && !(now_is && now_is->state == LeaseState::lost))
      co_return error(
          503, "store",
          fmt::format("lease #{} is not on disk yet: {}; ask again", id, store_error()));
  } else if (req.method() == http::verb::delete_) {
    std::optional<int> exit_status;
    if (!req.body().empty()) {
      json body = json::parse(req.body(), nullptr, false);
      if (body.is_discarded() || !body.is_object())
        co_return error(400, "bad_request", "expected no body or {\"exit_status\": N}");
      if (body.contains("exit_status") && !body["exit_status"].is_null()) {
        const json& e = body["exit_status"];
        if (!e.is_number_integer() || e.get<int64_t>() < INT_MIN || e.get<int64_t>() > INT_MAX)
          co_return error(400, "bad_request", "exit_status: expected a whole number");
        exit_status = e.get<int>();
      }
    }
    daemon_.release_lease(id, exit_status);
    co_await daemon_.wait_lease(id, Duration(0));
  } else {
    co_return error(405, "method_not_allowed", fmt::format("{} accepts GET and DELETE", t.path));
  }
  const Lease* l = daemon_.arbiter().lease(id);
  if (!l) co_return error(404, "not_found", fmt::format("no lease #{}", id));
  co_return json_reply(200, lease_json(*l, daemon_.now()));
}

json Api::lease_json(const Lease& l, const Now& now) const {
  json j = to_json(l, daemon_.arbiter(), now);
  if (std::string host = daemon_.host(); !host.empty()) j["host"] = host;
  if (!l.elsewhere.empty()) j["host"] = l.elsewhere;
  j["elsewhere"] = !l.elsewhere.empty();
  return j;
}

boost::asio::awaitable<HttpResponse> Api::jobs(const HttpRequest& req) {
  Target t = parse_target(req.target());
  std::string label;
  if (const auto* l = t.param("label")) label = *l;
  size_t limit = 100;
  if (const auto* l = t.param("limit")) {
    if (l->empty() || l->size() > 5 || l->find_first_not_of("0123456789") != std::string::npos)
      co_return error(400, "bad_request", fmt::format("limit: expected a number, got '{}'", *l));
    limit = std::clamp<size_t>(std::stoul(*l), 1, 10000);
  }
  bool stats = t.path == "/v1/jobs/stats";
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

boost::asio::awaitable<HttpResponse> Api::lifecycle(const std::string& service,
                                                    const std::string& action, const Target& t) {
  if (!daemon_.arbiter().service(service))
    co_return error(404, "not_found", fmt::format("no service named '{}'", service));
  bool wait = t.flag("wait");
  std::optional<Command> command = parse_command(action);
  if (!command) co_return error(404, "not_found", fmt::format("no action '{}'", action));
  uint64_t id =
      daemon_.service_command(service, *command, *command == Command::start && t.flag("force"));
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

boost::asio::awaitable<HttpResponse> Api::logs(const std::string& service, const Target& t) {
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

boost::asio::awaitable<HttpResponse> Api::crashes(const std::string& service, const Target& t) {
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

boost::asio::awaitable<HttpResponse> Api::doctor(const Target& t) {
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
    Now now = daemon_.now();
    json out = to_json(arbiter.status(), now);
    if (std::string host = daemon_.host(); !host.empty()) out["host"] = host;
    json faults = json::array();
    for (const auto& f : daemon_.faults())
      faults.push_back(
          {{"backend", f.backend}, {"error", f.error}, {"since", format_rfc3339(f.since)}});
    out["faults"] = std::move(faults);
    co_return json_reply(200, out);
  }
  if (t.path == "/v1/hosts") {
    if (!get) co_return only("GET");
    auto hosts = co_await daemon_.hosts();
    if (!hosts) co_return error(503, "store", hosts.error());
    co_return json_reply(200, *hosts);
  }
  if (t.path == "/v1/services") {
    if (!get) co_return only("GET");
    json out = json::array();
    Now now = daemon_.now();
    for (const auto& s : arbiter.services()) out.push_back(to_json(s, now));
    co_return json_reply(200, json{{"services", out}});
  }
  if (t.path.starts_with("/v1/services/")) {
    std::string rest = t.path.substr(13);
    std::string name = rest.substr(0, rest.find('/'));
    std::string action = rest.find('/') == std::string::npos ? "" : rest.substr(rest.find('/') + 1);
    if (action.empty()) {
      if (!get) co_return only("GET");
      const ServiceStatus* s = arbiter.service(name);
      if (!s) co_return error(404, "not_found", fmt::format("no service named '{}'", name));
      co_return json_reply(200, to_json(*s, daemon_.now()));
    }
    if (action == "unload") {
      if (!post) co_return only("POST");
      co_return co_await unload(name, t.flag("force"));
    }
    if (action == "start" || action == "stop" || action == "restart") {
      if (!post) co_return only("POST");
      co_return co_await lifecycle(name, action, t);
    }
    if (action == "logs") {
      if (!get) co_return only("GET");
      co_return co_await logs(name, t);
    }
    if (action == "crashes") {
      if (!get) co_return only("GET");
      co_return co_await crashes(name, t);
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
      // [issue 16: MIG] an index or a MIG instance "0/2"
      auto sel = parse_gpu_selector(*g);
      if (!sel || !*sel)
        co_return error(400, "bad_request", fmt::format("gpu: expected a GPU index, got '{}'", *g));
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
    bool known = false;
    for (const auto& g : arbiter.status().gpus) known |= g.sample.index == gpu;
    if (!known) co_return error(404, "not_found", fmt::format("no GPU {}", gpu));
    co_return json_reply(200, to_json(arbiter.history(gpu, daemon_.now().mono, window, points), gpu, daemon_.now()));
  }
  if (t.path == "/v1/events") {
    if (!get) co_return only("GET");
    co_return co_await events(req, stream);
  }
  if (t.path == "/v1/leases" || t.path.starts_with("/v1/leases/")) co_return co_await leases(req, stream);
  if (t.path == "/v1/jobs" || t.path == "/v1/jobs/stats") {
    if (!get) co_return only("GET");
    co_return co_await jobs(req);
  }
  if (t.path == "/v1/proxy") {
    if (!get) co_return only("GET");
    co_return json_reply(200, daemon_.request_path());
  }
  if (t.path == "/v1/history/records" || t.path == "/v1/history/durations") {
    if (!get) co_return only("GET");
    co_return co_await history(t);
  }
  if (t.path == "/v1/doctor") {
    if (!get) co_return only("GET");
    co_return co_await doctor(t);
  }
  if (t.path == "/metrics") {
    if (!get) co_return only("GET");
    HttpResponse res{http::status::ok, req.version()};
    res.set(http::field::content_type, "text/plain; version=0.0.4; charset=utf-8");
    res.set(http::field::cache_control, "no-store");
    res.body() = render_metrics(arbiter, daemon_.metrics(), daemon_.now(), daemon_.host()) + daemon_.extra_metrics();
    res.prepare_payload();
    co_return res;
  }
  if (!t.path.starts_with("/v1/")) {
    if (auto asset = serve_asset(req)) co_return std::move(*asset);
  }
  if (t.path == "/v1/version") {
    if (!get) co_return only("GET");
    co_return json_reply(200, json{{"version", VRAMD_VERSION_STRING}});
  }
  co_return error(404, "not_found", fmt::format("no such endpoint: {} {}", std::string(req.method_string()), t.path));
}

}  // namespace vramd
