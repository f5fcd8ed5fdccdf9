// Adapter: how vramd talks to one kind of GPU server (ComfyUI, Ollama, vLLM, ...). One file per
// kind; every call runs on the event loop with connect and total timeouts, so a hung server never
// delays anything else. Facts about each server: docs/adapters.md.
#pragma once

#include <utility>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <memory>
#include <string>

#include "core/config.h"
#include "core/result.h"
#include "core/sleep.h"
#include "core/service_model.h"

namespace vramd {

class Adapter {
 public:
  virtual ~Adapter() = default;
  virtual std::string kind() const = 0;

  // Busy or idle, queue depth, loaded models, self-reported memory, within the service's
  // probe_timeout. Never throws. A server that does not answer (refused, timeout) is
  // reachable = false with an error; one that answers an error status or garbage is
  // reachable = true with an error and busy = nullopt (never taken for idle).
  virtual boost::asio::awaitable<ServiceProbe> probe() = 0;
  // Asks the server to release its GPU memory without ending the process, as deep as `depth`
  // (core/sleep.h; sleep1 or sleep2, one of its kind's sleeps): vLLM's sleep level, ComfyUI's
  // free_memory. Kinds with one sleep ignore it.
  virtual boost::asio::awaitable<UnloadCall> unload(SleepDepth depth) = 0;
  // Reloads what unload(depth) released, where the server has such a call (vLLM wake_up, SGLang
  // resume, A1111 reload-checkpoint). Others reload on the next request.
  virtual bool can_wake() const { return false; }
  virtual boost::asio::awaitable<UnloadCall> wake(SleepDepth depth);
  // The kind's default health check (docs/adapters.md).
  virtual boost::asio::awaitable<HealthCheck> health() = 0;
  // How long memory may take to come back after unload() before the verdict.
  virtual Duration unload_timeout() const { return std::chrono::seconds(20); }
};

// The adapter for `service.kind`. Error for an unknown kind or unusable settings.
Result<std::unique_ptr<Adapter>> make_adapter(const ServiceConfig& service,
                                              boost::asio::any_io_executor executor);

}  // namespace vramd
