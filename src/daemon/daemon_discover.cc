// The daemon's discovery (`[daemon] discover`): every `discover_interval`, the GPU processes that
// no configured service, lease or baseline owns are looked at as `vramd discover` does (their
// parents, the ports they listen on, each kind's fingerprint there) and each server found is
// handed to the core as ServiceDiscovered. The host is read on the sampler thread; the
// fingerprint GETs run on the loop (short timeouts, GET only). Part of class Daemon.
// GCC 12 needs <utility> before Boost's awaitable.hpp.
#include <unistd.h>

#include <utility>

#include <boost/asio/detached.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "core/owners.h"
#include "daemon/daemon.h"
#include "host/ports.h"
#include "services/discovery.h"
#include "services/http_client.h"

namespace vramd {

namespace asio = boost::asio;
using asio::use_awaitable;

namespace {

// A GPU process is looked at this many times (a server may hold memory before it listens), then
// left as it is until it ends.
constexpr int kDiscoverTries = 3;
constexpr auto kFingerprintTimeout = std::chrono::milliseconds(500);

}  // namespace

asio::awaitable<void> Daemon::discover_loop() {
  asio::steady_timer timer(io_);
  // The first look once a sample has named the GPUs' owners.
  Duration wait = std::chrono::seconds(1);
  while (!stopping_) {
    timer.expires_after(wait);
    boost::system::error_code ec;
    co_await timer.async_wait(asio::redirect_error(use_awaitable, ec));
    if (stopping_) break;
    if (!arbiter_.status().sampled) continue;
    auto pass = discover_once();
    co_await std::move(pass);
    wait = arbiter_.config().daemon.discover_interval;
  }
}

asio::awaitable<void> Daemon::discover_once() {
  DiscoveryInput in;
  std::set<int> gpu_pids;
  for (const auto& g : arbiter_.status().gpus)
    for (const auto& h : g.holdings) {
      std::vector<int> pids = h.pids;
      for (const auto& c : h.candidates) pids.push_back(c.pid);
      for (int pid : pids) gpu_pids.insert(pid);
      if (h.owner.kind == OwnerKind::service || h.owner.kind == OwnerKind::lease ||
          h.owner.kind == OwnerKind::baseline)
        continue;
      for (size_t i = 0; i < pids.size(); ++i) {
        if (discover_tries_[pids[i]] >= kDiscoverTries) continue;
        auto& held = in.gpu_procs[pids[i]];
        if (i == 0) held.bytes += h.bytes;  // a holding's bytes are not split by process
        held.gpus.insert(g.sample.index);
      }
    }
  // Processes that left the GPUs are forgotten (a new one with the same pid is new).
  std::erase_if(discover_tries_, [&](const auto& t) { return !gpu_pids.count(t.first); });
  if (in.gpu_procs.empty()) co_return;
  for (const auto& [pid, held] : in.gpu_procs) ++discover_tries_[pid];

  auto scan = [this, in]() mutable {
    HostScanRequest request;
    for (const auto& [pid, held] : in.gpu_procs) request.pids.push_back(pid);
    for (auto& p : sampling_.scanner().scan(request).processes) in.processes[p.pid] = std::move(p);
    in.ports_of = listening_ports_of("/proc", chain_pids(in));
    // vramd's own ports (its API, its proxies: a service proxy answers as its service) are never
    // a server to discover, whatever runs below it (the demo's batch job is its child).
    in.ports_of.erase(static_cast<int>(::getpid()));
    return in;
  };
  auto scanned = sampling_.run(std::move(scan));
  in = co_await std::move(scanned);
  if (stopping_) co_return;

  std::map<int, std::map<std::string, ProbeAnswer>> probed;
  HttpOptions options;
  options.connect_timeout = kFingerprintTimeout;
  options.total_timeout = kFingerprintTimeout;
  options.body_limit = std::size_t{256} * 1024;
  for (int port : ports_to_probe(in)) {
    // A port a service already has is not asked again.
    bool known = false;
    for (const auto& svc : arbiter_.config().services) known |= url_port(svc.url) == port;
    if (known) continue;
    auto& answers = probed[port];
    for (const auto& path : fingerprint_paths()) {
      auto call = http_call(io_.get_executor(), "GET", fmt::format("http://127.0.0.1:{}{}", port, path),
                            {}, options);
      Result<HttpReply> r = co_await std::move(call);
      if (stopping_) co_return;
      if (!r) {
        if (answers.empty()) break;  // nothing answers there at all: no use asking further paths
        continue;
      }
      answers[path] = ProbeAnswer{r->status, std::move(r->body)};
    }
  }
  DiscoveryResult result = assemble_discovery(in, probed);
  for (const auto& server : result.found) {
    ServiceConfig cfg = service_config_of(server);
    bool known = false;
    for (const auto& svc : arbiter_.config().services) known |= url_port(svc.url) == server.port;
    if (known) continue;
    std::string base = cfg.name;
    for (int n = 2; arbiter_.config().find_service(cfg.name); ++n) cfg.name = fmt::format("{}-{}", base, n);
    feed(ServiceDiscovered{std::move(cfg)});
  }
}

void Daemon::watch_service(const std::string& name) {
  const ServiceConfig* cfg = arbiter_.config().find_service(name);
  if (!cfg || adapters_.count(name)) return;
  auto adapter = make_adapter(*cfg, io_.get_executor());
  if (!adapter) {
    spdlog::warn("service {}: {}", name, adapter.error());
    return;
  }
  adapters_[name] = std::move(*adapter);
  // Its port (or pid file) is read from the next sample.
  sampling_.set_request(arbiter_.scan_request());
  asio::co_spawn(io_, probe_loop(name), asio::detached);
}

}  // namespace vramd
