// The lease routes (docs/api.md "Leases"): GET and POST /v1/leases, GET and DELETE
// /v1/leases/ID, POST /v1/leases/ID/heartbeat.
#include <algorithm>
#include <climits>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/gpu_select.h"
#include "server/api.h"
#include "server/api_reply.h"
#include "server/json_view.h"

namespace vramd {

namespace {

namespace http = boost::beast::http;
using nlohmann::json;

using api::fail;
using api::reply;

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

// POST /v1/leases's body as a request (the pid, when the body names none, is the caller's).
Result<LeaseRequest> parse_lease_request(const std::string& text) {
  json body = json::parse(text, nullptr, false);
  if (body.is_discarded() || !body.is_object())
    return make_error("expected a JSON object: {\"vram\": \"12GiB\", ...}");
  LeaseRequest r;
  std::optional<Bytes> vram, ram;
  if (auto e = read_size(body, "vram", vram)) return make_error(*e);
  if (auto e = read_size(body, "ram", ram)) return make_error(*e);
  if (!vram || *vram == 0) return make_error("vram: required, more than 0");
  r.vram = *vram;
  r.ram = ram;
  // [issue 16: MIG] "gpu": an index, a MIG instance "0/2", or "any" (core/gpu_select.h).
  if (body.contains("gpu") && !body["gpu"].is_null()) {
    const json& g = body["gpu"];
    auto sel = parse_gpu_selector(g.is_string()           ? g.get<std::string>()
                                  : g.is_number_unsigned() ? std::to_string(g.get<uint64_t>())
                                                           : g.dump());
    if (!sel) return make_error(sel.error());
    r.gpu = *sel;
  }
  // [/issue 16]
  for (auto [key, field] : {std::pair{"holder", &r.holder}, {"label", &r.label},
                            {"service", &r.service}, {"group", &r.group}, {"command", &r.command},
                            {"host", &r.host}}) {
    if (!body.contains(key) || body[key].is_null()) continue;
    if (!body[key].is_string()) return make_error(fmt::format("{}: expected a string", key));
    *field = body[key].get<std::string>();
  }
  if (body.contains("priority")) {
    const json& p = body["priority"];
    if (!p.is_number_integer() || p.get<int64_t>() < INT_MIN || p.get<int64_t>() > INT_MAX ||
        (p.is_number_unsigned() && p.get<uint64_t>() > INT_MAX))
      return make_error("priority: expected a whole number");
    r.priority = p.get<int>();
  }
  if (body.contains("preemptible") && !body["preemptible"].is_null()) {
    if (!body["preemptible"].is_boolean()) return make_error("preemptible: expected true or false");
    r.preemptible = body["preemptible"].get<bool>();
    if (r.preemptible && !r.service.empty())
      return make_error("preemptible: a lease for a service cannot be suspended (its service's "
                        "processes are not the lease's)");
  }
  if (body.contains("on_host_lost") && !body["on_host_lost"].is_null()) {
    auto o = body["on_host_lost"].is_string()
                 ? parse_on_host_lost(body["on_host_lost"].get<std::string>())
                 : std::nullopt;
    if (!o) return make_error("on_host_lost: expected \"requeue\" or \"end\"");
    r.on_host_lost = *o;
  }
  if (body.contains("timeout") && !body["timeout"].is_null()) {
    auto d = body["timeout"].is_string() ? parse_duration(body["timeout"].get<std::string>())
                                         : Result<Duration>(make_error("expected a duration like \"1h\""));
    if (!d) return make_error("timeout: " + d.error());
    r.wait_timeout = *d;
  }
  if (body.contains("pid") && !body["pid"].is_null()) {
    if (!body["pid"].is_number_unsigned() || body["pid"].get<uint64_t>() < 1 ||
        body["pid"].get<uint64_t>() > INT_MAX)
      return make_error("pid: expected a process id");
    r.pid = body["pid"].get<int>();
  }
  return r;
}

// ?wait=DURATION: answer once the lease is no longer queued; ?watch=DURATION: as ?wait, until
// the lease ends (a holder's long poll while it runs). At most 5 minutes.
struct Wait {
  std::optional<Duration> max;
  bool until_ended = false;
};
Result<Wait> read_wait(const Target& t) {
  Wait w;
  for (const char* key : {"wait", "watch"}) {
    const std::string* v = t.param(key);
    if (!v) continue;
    auto d = parse_duration(*v);
    if (!d) return make_error(fmt::format("{}: {}", key, d.error()));
    w.max = std::min<Duration>(*d, std::chrono::minutes(5));
    w.until_ended = std::string_view(key) == "watch";
  }
  return w;
}

// The ID of /v1/leases/ID: digits, else there is no such lease.
std::optional<uint64_t> lease_id(const std::string& text) {
  if (text.empty() || text.size() > 18 || text.find_first_not_of("0123456789") != std::string::npos)
    return std::nullopt;
  return std::stoull(text);
}

}  // namespace

std::string Api::store_error() const {
  for (const auto& f : daemon_.faults())
    if (f.backend == "store") return f.error;
  return "the store has not answered yet";
}

json Api::lease_json(const Lease& l, const Now& now) const {
  json j = to_json(l, daemon_.arbiter(), now);
  if (std::string host = daemon_.host(); !host.empty()) j["host"] = host;
  if (!l.elsewhere.empty()) j["host"] = l.elsewhere;
  j["elsewhere"] = !l.elsewhere.empty();
  // A shared lease granted here is this host's only while it is in touch with the store: how
  // long it keeps it without another word from the store (Admission's fence). Its holder, hearing
  // nothing more from this daemon for that long, must stop: vramd run does.
  if (l.state == LeaseState::granted && l.request.cluster && l.elsewhere.empty()) {
    const Arbiter& arbiter = daemon_.arbiter();
    std::optional<MonoTime> contact = arbiter.store_contact();
    Duration left = contact ? *contact + arbiter.config().daemon.host_timeout / 2 - now.mono
                            : Duration::zero();
    j["fence_in_ms"] = std::max<int64_t>(
        0, std::chrono::duration_cast<std::chrono::milliseconds>(left).count());
  }
  return j;
}

boost::asio::awaitable<HttpResponse> Api::list_leases(const Call& c) {
  const Arbiter& arbiter = daemon_.arbiter();
  json out = json::array();
  Now now = daemon_.now();
  // ?host=all: every host's leases (on a shared store); ?host=NAME: that host's. Without it
  // (or naming this host), this host's, from the Arbiter.
  const std::string* host = c.t.param("host");
  if (!host || *host == daemon_.host()) {
    for (const auto& l : arbiter.leases()) out.push_back(lease_json(l, now));
    co_return reply(200, json{{"leases", out}});
  }
  if (host->empty()) co_return fail(400, "bad_request", "host: expected a host name or all");
  bool all = *host == "all";
  // (GCC 12: a temporary of a ?: inside a co_await expression is destroyed twice.)
  std::string only = all ? std::string() : *host;
  auto other = co_await daemon_.leases_elsewhere(only);
  if (!other) co_return fail(503, "store", other.error());
  if (!all && std::find(other->hosts.begin(), other->hosts.end(), *host) == other->hosts.end())
    co_return fail(400, "bad_request",
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
  co_return reply(200, json{{"leases", out}});
}

boost::asio::awaitable<HttpResponse> Api::create_lease(const Call& c) {
  const Arbiter& arbiter = daemon_.arbiter();
  auto wait = read_wait(c.t);
  if (!wait) co_return fail(400, "bad_request", wait.error());
  auto parsed = parse_lease_request(c.req.body());
  if (!parsed) co_return fail(400, "bad_request", parsed.error());
  LeaseRequest r = std::move(*parsed);
  if (!r.pid) r.pid = c.stream.peer_pid();  // on the unix socket: the client itself
  if (!r.service.empty() && !arbiter.config().find_service(r.service))
    co_return fail(400, "bad_request", fmt::format("service: no service named '{}'", r.service));
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
      co_return fail(400, "bad_request",
                     fmt::format("gpu: GPU {} has MIG on; ask for one of its instances "
                                 "(GPU/GI, e.g. {}/1), listed by vramd status",
                                 gpu_label(g.sample), gpu_label(g.sample)));
    if (g.sample.mig_enabled) continue;  // its total is not room for a lease
    // [/issue 16]
    known_gpu = true;
    Bytes reserve = arbiter.config().gpu.reserve;
    largest = std::max(largest, g.sample.total > reserve ? g.sample.total - reserve : 0);
  }
  if (!here_only) known_gpu = true;
  if (arbiter.status().sampled && !known_gpu)
    co_return fail(400, "bad_request", fmt::format("gpu: no GPU {}", gpu_label(*r.gpu)));
  if (arbiter.status().sampled && largest > 0 && r.vram > largest)
    co_return fail(400, "never_fits",
                   fmt::format("needs {}; the largest GPU it may use has {}", format_size(r.vram),
                               format_size(largest)));
  auto id = daemon_.request_lease(std::move(r));
  if (!id) co_return fail(400, "bad_request", id.error());
  co_await daemon_.wait_lease(*id, wait->max.value_or(Duration(0)));
  const Lease* l = daemon_.arbiter().lease(*id);
  if (!l) co_return fail(500, "internal", "the lease vanished");
  if (!daemon_.lease_written(*id)) {
    // Never acknowledge what a restart would not keep: the client hears no, and the lease ends.
    daemon_.release_lease(*id, std::nullopt);
    co_return fail(503, "store", fmt::format("lease #{} could not be written: {}", *id, store_error()));
  }
  co_return reply(201, lease_json(*l, daemon_.now()));
}

// Several hosts: a lease this host does not hold (granted elsewhere, or queued in another host's
// keeping) is read from the store; an end is asked of the host that holds it, and a heartbeat
// (a POST .../heartbeat, or a GET) is passed on to it through the store. nullopt: answer here.
boost::asio::awaitable<std::optional<HttpResponse>> Api::lease_elsewhere(uint64_t id, LeaseVerb verb) {
  const Lease* mine = daemon_.arbiter().lease(id);
  if (!daemon_.shared_queue() || (mine && mine->elsewhere.empty())) co_return std::nullopt;
  if (verb == LeaseVerb::release) {
    auto op = daemon_.release_elsewhere(id, "released from another host's API");
    auto asked = co_await std::move(op);
    if (!asked) co_return fail(503, "store", asked.error());
  } else {
    auto op = daemon_.heartbeat_elsewhere(id);
    auto passed = co_await std::move(op);
    if (!passed) co_return fail(503, "store", passed.error());
  }
  auto op = daemon_.lease_elsewhere(id);
  auto there = co_await std::move(op);
  if (!there) co_return fail(503, "store", there.error());
  if (*there) co_return reply(200, **there);
  if (!mine) co_return fail(404, "not_found", fmt::format("no lease #{}", id));
  co_return std::nullopt;
}

boost::asio::awaitable<HttpResponse> Api::lease_reply(uint64_t id) {
  const Lease* l = daemon_.arbiter().lease(id);
  if (!l) co_return fail(404, "not_found", fmt::format("no lease #{}", id));
  co_return reply(200, lease_json(*l, daemon_.now()));
}

boost::asio::awaitable<HttpResponse> Api::ended_lease(uint64_t id) {
  auto op = daemon_.job(id);
  auto job = co_await std::move(op);
  if (!job) co_return fail(500, "store", job.error());
  if (!*job) co_return fail(404, "not_found", fmt::format("no lease #{}", id));
  json j = to_json(**job);
  j["ended"] = true;
  co_return reply(200, j);
}

boost::asio::awaitable<HttpResponse> Api::get_lease(const Call& c) {
  auto id = lease_id(c.param());
  if (!id) co_return fail(404, "not_found", fmt::format("no lease '{}'", c.param()));
  auto wait = read_wait(c.t);
  if (!wait) co_return fail(400, "bad_request", wait.error());
  const Arbiter& arbiter = daemon_.arbiter();
  // ?token=T: is T the lease's current grant? (docs/api.md "Guarantees": a job that writes to
  // shared storage asks before it writes and refuses a stale writer.) 200 when it is, 409 when
  // not; never a heartbeat. A lease granted here answers from here (this host gives up its shared
  // leases before any other may take them); any other, on a shared store, from the store.
  if (const auto* token_text = c.t.param("token")) {
    if (token_text->empty() || token_text->size() > 19 ||
        token_text->find_first_not_of("0123456789") != std::string::npos)
      co_return fail(400, "bad_request", fmt::format("token: expected a whole number, got '{}'", *token_text));
    uint64_t token = std::stoull(*token_text);
    json now_is;  // the lease as the one who knows best has it: state, token, host
    const Lease* mine = arbiter.lease(*id);
    if (mine && holds_grant(mine->state) && mine->elsewhere.empty()) {
      now_is = lease_json(*mine, daemon_.now());
    } else if (daemon_.shared_queue()) {
      auto op = daemon_.lease_elsewhere(*id);
      auto there = co_await std::move(op);
      if (!there)
        co_return fail(503, "store", fmt::format("cannot vouch for lease #{}'s token: {}", *id, there.error()));
      if (*there) now_is = **there;
    }
    if (now_is.is_null() && mine) now_is = lease_json(*mine, daemon_.now());
    if (now_is.is_null()) co_return fail(404, "not_found", fmt::format("no lease #{}", *id));
    const bool granted = now_is.value("state", "") == "granted" && !now_is.value("ended", false);
    const json current_token = granted && now_is.contains("token") ? now_is["token"] : json(nullptr);
    const bool current = current_token.is_number_unsigned() && current_token.get<uint64_t>() == token;
    json body = {{"id", *id},
                 {"token", token},
                 {"current", current},
                 {"current_token", current_token},
                 {"state", now_is.value("state", "")},
                 {"host", now_is.contains("host") ? now_is["host"] : json(nullptr)}};
    if (!current)
      body["message"] =
          granted ? fmt::format("token {} of lease #{} is stale: its current grant is token {}",
                                token, *id, current_token.dump())
                  : fmt::format("token {} of lease #{} is stale: the lease is {}", token, *id,
                                now_is.value("state", std::string("ended")));
    co_return reply(current ? 200 : 409, body);
  }
  auto there_op = lease_elsewhere(*id, LeaseVerb::get);
  if (auto there = co_await std::move(there_op)) co_return std::move(*there);
  if (!arbiter.lease(*id)) co_return co_await ended_lease(*id);
  daemon_.lease_heartbeat(*id);
  // Without ?wait this waits only for a write in flight (milliseconds; a restart's restored
  // leases are being written as the first requests come in).
  co_await daemon_.wait_lease(*id, wait->max.value_or(Duration(0)), wait->until_ended);
  const Lease* now_is = daemon_.arbiter().lease(*id);
  if (!daemon_.lease_written(*id) && !(now_is && now_is->state == LeaseState::lost))
    co_return fail(503, "store", fmt::format("lease #{} is not on disk yet: {}; ask again", *id, store_error()));
  co_return co_await lease_reply(*id);
}

boost::asio::awaitable<HttpResponse> Api::release_lease(const Call& c) {
  auto id = lease_id(c.param());
  if (!id) co_return fail(404, "not_found", fmt::format("no lease '{}'", c.param()));
  auto there_op = lease_elsewhere(*id, LeaseVerb::release);
  if (auto there = co_await std::move(there_op)) co_return std::move(*there);
  if (!daemon_.arbiter().lease(*id)) co_return co_await ended_lease(*id);
  std::optional<int> exit_status;
  if (!c.req.body().empty()) {
    json body = json::parse(c.req.body(), nullptr, false);
    if (body.is_discarded() || !body.is_object())
      co_return fail(400, "bad_request", "expected no body or {\"exit_status\": N}");
    if (body.contains("exit_status") && !body["exit_status"].is_null()) {
      const json& e = body["exit_status"];
      if (!e.is_number_integer() || e.get<int64_t>() < INT_MIN || e.get<int64_t>() > INT_MAX)
        co_return fail(400, "bad_request", "exit_status: expected a whole number");
      exit_status = e.get<int>();
    }
  }
  daemon_.release_lease(*id, exit_status);
  co_await daemon_.wait_lease(*id, Duration(0));
  co_return co_await lease_reply(*id);
}

boost::asio::awaitable<HttpResponse> Api::heartbeat(const Call& c) {
  auto id = lease_id(c.param());
  if (!id) co_return fail(404, "not_found", fmt::format("no lease '{}'", c.param()));
  auto there_op = lease_elsewhere(*id, LeaseVerb::heartbeat);
  if (auto there = co_await std::move(there_op)) co_return std::move(*there);
  if (!daemon_.arbiter().lease(*id)) co_return co_await ended_lease(*id);
  daemon_.lease_heartbeat(*id);
  co_return co_await lease_reply(*id);
}

}  // namespace vramd
