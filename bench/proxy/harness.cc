// vramd's proxy alone, for bench/proxy and the openai client test: service proxies and the
// front door with hooks that find everything ready (no daemon).
// Usage: vramd_proxy_harness [--front LISTEN] [--alias NAME=MODEL]... [--record]
//          --service NAME URL [LISTEN|-] [MODEL,MODEL...|-] [--max-connections N] ...
// Prints "ready FRONT_PORT SERVICE_PORT..." once listening. --record: each request's sample goes
// into a request log drained once a second on the same thread, as vramd serve does
// (docs/history.md). On SIGTERM or SIGINT it prints "requests N allocations M" (heap
// allocations made on any thread since "ready") and exits.
#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <new>
#include <string>
#include <vector>

#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>

#include "proxy/proxy.h"
#include "proxy/request_log.h"

namespace {
std::atomic<unsigned long long> g_allocations{0};
}  // namespace

// Every heap allocation counted (the bench's "added allocations per request").
void* operator new(std::size_t n) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n) { return operator new(n); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }

int main(int argc, char** argv) {
  std::signal(SIGPIPE, SIG_IGN);
  vramd::ProxyOptions options;
  bool record = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--record") {
      record = true;
    } else if (a == "--front" && i + 1 < argc) {
      options.listen = argv[++i];
    } else if (a == "--alias" && i + 1 < argc) {
      std::string kv = argv[++i];
      auto eq = kv.find('=');
      if (eq == std::string::npos) return 2;
      options.aliases[kv.substr(0, eq)] = kv.substr(eq + 1);
    } else if (a == "--service" && i + 2 < argc) {
      vramd::ProxyServiceOptions s;
      s.name = argv[++i];
      s.url = argv[++i];
      if (i + 1 < argc && std::strncmp(argv[i + 1], "--", 2) != 0) {
        std::string l = argv[++i];
        if (l != "-") s.listen = l;
      }
      if (i + 1 < argc && std::strncmp(argv[i + 1], "--", 2) != 0) {
        std::string m = argv[++i];
        for (size_t at = 0; m != "-" && at <= m.size();) {
          size_t comma = m.find(',', at);
          s.models.push_back(m.substr(at, comma == std::string::npos ? comma : comma - at));
          if (comma == std::string::npos) break;
          at = comma + 1;
        }
      }
      options.services.push_back(s);
    } else if (a == "--max-connections" && i + 1 < argc && !options.services.empty()) {
      options.services.back().max_connections = std::atoi(argv[++i]);  // the last --service's
    } else {
      std::fprintf(stderr,
                   "usage: vramd_proxy_harness [--front LISTEN] [--alias NAME=MODEL]... [--record] "
                   "--service NAME URL [LISTEN|-] [MODELS|-] [--max-connections N] ...\n");
      return 2;
    }
  }
  boost::asio::io_context io(1);
  vramd::NullProxyHooks hooks;
  vramd::RequestLog log;
  std::vector<vramd::RequestSample> drained;
  drained.reserve(1 << 16);
  if (record) options.request_log = &log;
  vramd::Proxy proxy(io, options, hooks);
  if (auto s = proxy.start(); !s) {
    std::fprintf(stderr, "vramd_proxy_harness: %s\n", s.error().c_str());
    return 1;
  }
  std::printf("ready %d", proxy.front_door_port());
  for (const auto& s : options.services) std::printf(" %d", proxy.service_port(s.name));
  std::printf("\n");
  std::fflush(stdout);
  // The drain, once a second, as the daemon's recorder does (the records themselves go nowhere).
  boost::asio::steady_timer drain(io);
  std::function<void()> tick = [&] {
    drain.expires_after(std::chrono::seconds(1));
    drain.async_wait([&](const boost::system::error_code& ec) {
      if (ec) return;
      drained.clear();
      log.drain(drained);
      tick();
    });
  };
  if (record) {
    tick();
    log.on_half_full([&] {
      boost::asio::post(io, [&] {
        drained.clear();
        log.drain(drained);
      });
    });
  }
  boost::asio::signal_set stop(io, SIGTERM, SIGINT);
  unsigned long long at_ready = g_allocations.load();
  stop.async_wait([&](const boost::system::error_code&, int) {
    unsigned long long allocations = g_allocations.load() - at_ready;
    unsigned long long requests = 0;
    for (const auto& s : options.services) requests += proxy.metrics().requests_total(s.name);
    std::printf("requests %llu allocations %llu recorded %llu dropped %llu\n", requests,
                allocations, static_cast<unsigned long long>(log.pushed()),
                static_cast<unsigned long long>(log.dropped()));
    std::fflush(stdout);
    io.stop();
  });
  io.run();
}
