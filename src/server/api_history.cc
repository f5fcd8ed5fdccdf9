// GET /v1/history/records and /v1/history/durations (docs/api.md "History").
#include <charconv>

#include <fmt/format.h>

#include "server/api.h"
#include "server/api_reply.h"
#include "server/history_view.h"
#include "server/json_view.h"

namespace vramd {

namespace {

using nlohmann::json;

using api::fail;
using api::reply;

}  // namespace

boost::asio::awaitable<HttpResponse> Api::history(const Call& c) {
  const Target& t = c.t;
  const bool compare = t.path == "/v1/history/durations";
  DurationQuery q;
  if (const auto* s = t.param("service")) q.service = *s;
  if (compare && q.service.empty())
    co_return fail(400, "bad_request", "/v1/history/durations needs ?service=NAME");
  if (const auto* k = t.param("kind"); k && !k->empty()) {
    q.kind = record_kind_from(*k);
    if (!q.kind)
      co_return fail(400, "bad_request", fmt::format("kind: expected prompt or request, got '{}'", *k));
  }
  if (const auto* w = t.param("workflow")) q.workflow = *w;
  if (const auto* m = t.param("model")) q.model = *m;
  Now now = daemon_.now();
  if (const auto* s = t.param("since"); s && !s->empty()) {
    auto since = parse_since(*s, now.wall);
    if (!since) co_return fail(400, "bad_request", "since: " + since.error());
    q.since = *since;
  }
  CompareBy by = CompareBy::version;
  if (const auto* b = t.param("by"); b && !b->empty()) {
    auto parsed = compare_by_from(*b);
    if (!parsed)
      co_return fail(400, "bad_request", fmt::format("by: expected version or args, got '{}'", *b));
    by = *parsed;
  }
  q.limit = compare ? 200000 : 50;
  if (const auto* l = t.param("limit")) {
    size_t v = 0;
    auto [p, ec] = std::from_chars(l->data(), l->data() + l->size(), v);
    if (ec != std::errc() || p != l->data() + l->size() || v == 0 || v > 100000)
      co_return fail(400, "bad_request", fmt::format("limit: expected 1 to 100000, got '{}'", *l));
    q.limit = v;
  }
  auto records_op = daemon_.durations(q);
  auto records = co_await std::move(records_op);
  if (!records) co_return fail(500, "store", records.error());
  auto variants_op = daemon_.variants(q.service);
  auto variants = co_await std::move(variants_op);
  if (!variants) co_return fail(500, "store", variants.error());
  json body = {{"service", q.service.empty() ? json(nullptr) : json(q.service)},
               {"variants", variants_json(*variants)}};
  if (!compare) {
    json list = json::array();
    for (const auto& r : *records) list.push_back(to_json(r));
    body["records"] = std::move(list);
    co_return reply(200, body);
  }
  json groups = json::array();
  for (const auto& g : compare_durations(*records, by)) groups.push_back(to_json(g));
  body["by"] = to_string(by);
  body["groups"] = std::move(groups);
  body["records"] = records->size();
  co_return reply(200, body);
}

}  // namespace vramd
