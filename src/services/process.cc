// process: a GPU program without an API. vramd attributes its memory and can start and stop it;
// there is nothing to ask and nothing to unload.
#include "services/kinds.h"

namespace vramd {
namespace {

using boost::asio::awaitable;

class ProcessAdapter final : public Adapter {
 public:
  explicit ProcessAdapter(const ServiceConfig& c) : unload_timeout_(c.unload_timeout) {}
  std::string kind() const override { return "process"; }

  awaitable<ServiceProbe> probe() override {
    ServiceProbe p;
    p.reachable = true;  // nothing to reach; busy stays unknown
    co_return p;
  }
  awaitable<UnloadCall> unload(SleepDepth) override {
    co_return unload_call(UnloadCall::Result::not_supported,
                          "no API: stopping the process frees its memory");
  }
  awaitable<HealthCheck> health() override { co_return HealthCheck{true, "no health check"}; }
  Duration unload_timeout() const override {
    return unload_timeout_.value_or(std::chrono::seconds(20));
  }

 private:
  std::optional<Duration> unload_timeout_;
};

}  // namespace

// One signature for every kind's factory (services/adapter.cc), used or not.
// NOLINTBEGIN(performance-unnecessary-value-param)
std::unique_ptr<Adapter> make_process_adapter(const ServiceConfig& c, boost::asio::any_io_executor,
                                              std::string) {
  // NOLINTEND(performance-unnecessary-value-param)
  return std::make_unique<ProcessAdapter>(c);
}

}  // namespace vramd
