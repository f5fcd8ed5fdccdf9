// TabbyAPI: the loaded model from GET /v1/model; unload cancels jobs in flight, so it is refused
// unless the probe just before says idle or unknown (docs/adapters.md "tabbyapi").
#include "services/http_adapter_base.h"
#include "services/kinds.h"
#include "services/parsers.h"

namespace vramd {
namespace {

using boost::asio::awaitable;

class TabbyAdapter final : public HttpAdapter {
 public:
  TabbyAdapter(const ServiceConfig& c, boost::asio::any_io_executor ex, std::string key)
      : HttpAdapter(c, std::move(ex), std::move(key)) {
    if (!c.models.empty()) last_model_ = c.models.front();
  }

  awaitable<ServiceProbe> probe() override {
    ServiceProbe p;
    Result<HttpReply> r = co_await call("GET", "/v1/model", {}, probe_deadline());
    if (!r) {
      add_error(p, describe("GET", "/v1/model", r));
      co_return p;
    }
    p.reachable = true;
    if (r->status == 400 || r->status == 404) co_return p;  // "No models are currently loaded"
    if (!ok_status(r->status)) {
      add_error(p, describe("GET", "/v1/model", r));
      co_return p;
    }
    auto j = nlohmann::json::parse(r->body, nullptr, false);
    Result<std::optional<std::string>> id =
        j.is_discarded() ? Result<std::optional<std::string>>(make_error("the answer is not JSON"))
                         : parse_tabby_model(j);
    if (!id) {
      add_error(p, "GET /v1/model: " + id.error());
    } else if (*id) {
      p.models.push_back(**id);
      last_model_ = **id;
    }
    co_return p;
  }

  awaitable<UnloadCall> unload(SleepDepth) override {
    ServiceProbe p = co_await probe();
    if (p.busy.value_or(false)) {
      co_return unload_call(UnloadCall::Result::failed,
                            "busy: TabbyAPI cancels jobs in flight on unload");
    }
    co_return co_await request("POST", "/v1/model/unload");
  }

  bool can_wake() const override { return true; }
  awaitable<UnloadCall> wake(SleepDepth) override {
    if (last_model_.empty()) {
      co_return unload_call(UnloadCall::Result::failed,
                            "no model to load: none seen loaded and `models` not set");
    }
    co_return co_await request("POST", "/v1/model/load", model_name_body(last_model_));
  }

  awaitable<HealthCheck> health() override {
    Result<HttpReply> r = co_await call("GET", "/health", {}, probe_deadline());
    HealthCheck out{false, describe("GET", "/health", r)};
    if (!r || !ok_status(r->status)) co_return out;
    auto j = nlohmann::json::parse(r->body, nullptr, false);
    Result<std::pair<bool, std::string>> h =
        j.is_discarded() ? Result<std::pair<bool, std::string>>(make_error("not JSON"))
                         : parse_tabby_health(j);
    if (!h) {
      out.message += ": " + h.error();
    } else {
      out.healthy = h->first;
      out.message += " " + h->second;
    }
    co_return out;
  }

 private:
  static std::string model_name_body(const std::string& m) {
    return nlohmann::json{{"model_name", m}}.dump();
  }

  std::string last_model_;
};

}  // namespace

std::unique_ptr<Adapter> make_tabbyapi_adapter(const ServiceConfig& c,
                                               boost::asio::any_io_executor ex, std::string key) {
  return std::make_unique<TabbyAdapter>(c, std::move(ex), std::move(key));
}

}  // namespace vramd
