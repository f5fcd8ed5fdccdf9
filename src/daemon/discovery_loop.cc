#include "daemon/discovery_loop.h"

#include <unistd.h>

#include <set>

#include <fmt/format.h>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "core/arbiter.h"
#include "daemon/sample_loop.h"
#include "host/ports.h"
#include "services/http_client.h"

namespace vramd {

namespace asio = boost::asio;
using asio::use_awaitable;

namespace {

constexpr auto kFingerprintTimeout = std::chrono::milliseconds(500);

bool port_configured(const Config& config, int port) {
  for (const auto& svc : config.services)
    if (url_port(svc.url) == port) return true;
  return false;
}

}  // namespace

DiscoveryLoop::DiscoveryLoop(asio::io_context& io, const Arbiter& arbiter, SampleLoop& sampling,
                             Found found)
    : io_(io), arbiter_(arbiter), sampling_(sampling), found_(std::move(found)), timer_(io) {}

void DiscoveryLoop::stop() {
  stopping_ = true;
  timer_.cancel();
}

asio::awaitable<void> DiscoveryLoop::run() {
  Duration wait = std::chrono::seconds(1);
  while (!stopping_) {
    timer_.expires_after(wait);
    boost::system::error_code ec;
    co_await timer_.async_wait(asio::redirect_error(use_awaitable, ec));
    if (stopping_) break;
    if (!arbiter_.status().sampled) continue;
    auto pass = once();
    co_await std::move(pass);
    wait = arbiter_.config().daemon.discover_interval;
  }
}

DiscoveryInput DiscoveryPicker::pick(const StatusSnapshot& status) {
  DiscoveryInput in;
  std::set<int> gpu_pids;
  for (const auto& g : status.gpus)
    for (const auto& h : g.holdings) {
      std::vector<int> pids = h.pids;
      for (const auto& c : h.candidates) pids.push_back(c.pid);
      for (int pid : pids) gpu_pids.insert(pid);
      if (h.owner.kind == OwnerKind::service || h.owner.kind == OwnerKind::lease ||
          h.owner.kind == OwnerKind::baseline)
        continue;
      for (size_t i = 0; i < pids.size(); ++i) {
        auto t = tries_.find(pids[i]);
        if (t != tries_.end() && t->second >= kTries) continue;
        auto& held = in.gpu_procs[pids[i]];
        if (i == 0) held.bytes += h.bytes;  // a holding's bytes are not split by process
        held.gpus.insert(g.sample.index);
      }
    }
  std::erase_if(tries_, [&](const auto& t) { return !gpu_pids.count(t.first); });
  for (const auto& [pid, held] : in.gpu_procs) ++tries_[pid];
  return in;
}

std::vector<ServiceConfig> DiscoveryPicker::new_services(const DiscoveryResult& result,
                                                         const Config& config) {
  std::vector<ServiceConfig> out;
  auto taken = [&](const std::string& name) {
    if (config.find_service(name)) return true;
    for (const auto& s : out)
      if (s.name == name) return true;
    return false;
  };
  for (const auto& server : result.found) {
    if (port_configured(config, server.port)) continue;
    ServiceConfig cfg = service_config_of(server);
    std::string base = cfg.name;
    for (int n = 2; taken(cfg.name); ++n) cfg.name = fmt::format("{}-{}", base, n);
    out.push_back(std::move(cfg));
  }
  return out;
}

asio::awaitable<void> DiscoveryLoop::once() {
  DiscoveryInput in = picker_.pick(arbiter_.status());
  if (in.gpu_procs.empty()) co_return;

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
    if (port_configured(arbiter_.config(), port)) continue;  // not asked again
    auto& answers = probed[port];
    for (const auto& path : fingerprint_paths()) {
      auto call = http_call(io_.get_executor(), "GET",
                            fmt::format("http://127.0.0.1:{}{}", port, path), {}, options);
      Result<HttpReply> r = co_await std::move(call);
      if (stopping_) co_return;
      if (!r) {
        if (answers.empty()) break;  // nothing answers there at all: no use asking further paths
        continue;
      }
      answers[path] = ProbeAnswer{r->status, std::move(r->body)};
    }
  }
  for (ServiceConfig& cfg :
       DiscoveryPicker::new_services(assemble_discovery(in, probed), arbiter_.config()))
    found_(std::move(cfg));
}

}  // namespace vramd
