// AUTOMATIC1111 and Forge: busy from /sdapi/v1/progress, memory from /sdapi/v1/memory,
// unload-checkpoint / reload-checkpoint (docs/adapters.md "a1111, forge").
#include "services/http_adapter_base.h"
#include "services/kinds.h"
#include "services/parsers.h"

namespace vramd {
namespace {

using boost::asio::awaitable;

class A1111Adapter final : public HttpAdapter {
 public:
  using HttpAdapter::HttpAdapter;

  awaitable<ServiceProbe> probe() override {
    ServiceProbe p;
    Deadline d = probe_deadline();
    if (auto j = co_await probe_json("/sdapi/v1/progress?skip_current_image=true", d, p)) {
      Result<bool> busy = parse_a1111_progress(*j);
      if (busy) {
        p.busy = *busy;
      } else {
        add_error(p, "GET /sdapi/v1/progress: " + busy.error());
      }
    }
    if (!p.reachable) co_return p;
    if (auto j = co_await probe_json("/sdapi/v1/memory", d, p)) {
      Result<A1111Memory> m = parse_a1111_memory(*j);
      if (m) {
        // cuda.reserved.current: PyTorch's reserved pool (the caching allocator), the closest
        // figure to what this process holds; cuda.system is the whole card.
        p.self_reported_vram = m->cuda_reserved;
        p.self_reported_ram = m->ram_used;  // the process's RSS
      } else {
        add_error(p, "GET /sdapi/v1/memory: " + m.error());
      }
    }
    co_return p;
  }

  awaitable<UnloadCall> unload(SleepDepth) override {
    co_return co_await request("POST", "/sdapi/v1/unload-checkpoint", "{}");
  }

  bool can_wake() const override { return true; }
  awaitable<UnloadCall> wake(SleepDepth) override {
    co_return co_await request("POST", "/sdapi/v1/reload-checkpoint", "{}");
  }

  awaitable<HealthCheck> health() override {
    co_return co_await health_get("/sdapi/v1/progress?skip_current_image=true");
  }
};

}  // namespace

std::unique_ptr<Adapter> make_a1111_adapter(const ServiceConfig& c, boost::asio::any_io_executor ex,
                                            std::string key) {
  return std::make_unique<A1111Adapter>(c, std::move(ex), std::move(key));
}

}  // namespace vramd
