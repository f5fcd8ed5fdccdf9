// What the request path (daemon/request_path.h) asks of the Daemon: whether a service's adapter
// can wake it, the wake calls the core makes (CallWake), and the models each proxied service
// serves. Part of class Daemon.
// GCC 12 needs <utility> before Boost's awaitable.hpp.
#include <utility>

#include <boost/asio/detached.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "core/eviction.h"
#include "core/service_kinds.h"
#include "core/wake.h"
#include "daemon/daemon.h"

namespace vramd {

namespace asio = boost::asio;

// Its probed models (loaded, then installed), then its configured ones (the same list the proxy
// adds; here they carry whether the service serves Ollama's API, so that /api/tags lists them).
void Daemon::each_models(const RequestPath::Hooks::EachModels& each) const {
  for (const auto& cfg : arbiter_.config().services) {
    if (!proxied(cfg)) continue;  // the front door routes only to what it reaches
    const ServiceKind* kind = find_service_kind(cfg.kind);
    bool ollama_api = kind && kind->ollama_api;
    if (const ServiceStatus* st = arbiter_.service_policy_status(cfg.name)) {
      each(cfg.name, ollama_api, st->models);
      each(cfg.name, ollama_api, st->installed);  // loaded on the request (Ollama's /api/tags)
    }
    each(cfg.name, ollama_api, cfg.models);
  }
}

}  // namespace vramd
