// generic_http: every call from the config: busy_url with busy_json_pointer or busy_metric,
// unload_method + unload_url + unload_body, health_url (docs/adapters.md "generic_http").
#include "services/http_adapter_base.h"
#include "services/kinds.h"
#include "services/parsers.h"

namespace vramd {
namespace {

using boost::asio::awaitable;

class GenericHttpAdapter final : public HttpAdapter {
 public:
  using HttpAdapter::HttpAdapter;

  awaitable<ServiceProbe> probe() override {
    ServiceProbe p;
    Deadline d = probe_deadline();
    if (config_.busy_url.empty()) {
      // No busy call: reachable is what the health check says.
      Result<HttpReply> r = co_await call("GET", health_path(), {}, d);
      p.reachable = r.ok();
      if (!r || !ok_status(r->status)) add_error(p, describe("GET", health_path(), r));
      co_return p;
    }
    if (!config_.busy_metric.empty()) {
      if (auto text = co_await probe_text(config_.busy_url, d, p)) {
        p.busy = busy_from_metrics(parse_prometheus(*text), {config_.busy_metric});
        if (!p.busy) add_error(p, "GET " + config_.busy_url + ": no " + config_.busy_metric);
      }
    } else if (auto j = co_await probe_json(config_.busy_url, d, p)) {
      Result<bool> busy = busy_at_pointer(*j, config_.busy_json_pointer);
      if (busy) {
        p.busy = *busy;
      } else {
        add_error(p, "GET " + config_.busy_url + ": " + busy.error());
      }
    }
    co_return p;
  }

  awaitable<UnloadCall> unload(SleepDepth) override {
    if (config_.unload_url.empty()) {
      co_return unload_call(UnloadCall::Result::not_supported,
                            "no unload_url configured: stopping the process frees its memory");
    }
    co_return co_await request(config_.unload_method, config_.unload_url, config_.unload_body);
  }

  awaitable<HealthCheck> health() override { co_return co_await health_get(health_path()); }

 private:
  std::string health_path() const { return config_.health_url.empty() ? "/" : config_.health_url; }
};

}  // namespace

std::unique_ptr<Adapter> make_generic_http_adapter(const ServiceConfig& c,
                                                   boost::asio::any_io_executor ex,
                                                   std::string key) {
  return std::make_unique<GenericHttpAdapter>(c, std::move(ex), std::move(key));
}

}  // namespace vramd
