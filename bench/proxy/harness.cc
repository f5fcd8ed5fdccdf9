// vramd's proxy alone, for bench/proxy and the openai client test: service proxies and the
// front door with hooks that find everything ready (no daemon).
// Usage: vramd_proxy_harness [--front LISTEN] [--alias NAME=MODEL]...
//          --service NAME URL [LISTEN|-] [MODEL,MODEL...|-] ...
// Prints "ready FRONT_PORT SERVICE_PORT..." once listening.
#include <csignal>
#include <cstdio>
#include <cstring>
#include <string>

#include "proxy/proxy.h"

int main(int argc, char** argv) {
  std::signal(SIGPIPE, SIG_IGN);
  vramd::ProxyOptions options;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--front" && i + 1 < argc) {
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
    } else {
      std::fprintf(stderr,
                   "usage: vramd_proxy_harness [--front LISTEN] [--alias NAME=MODEL]... "
                   "--service NAME URL [LISTEN|-] [MODELS|-] ...\n");
      return 2;
    }
  }
  boost::asio::io_context io(1);
  vramd::NullProxyHooks hooks;
  vramd::Proxy proxy(io, options, hooks);
  if (auto s = proxy.start(); !s) {
    std::fprintf(stderr, "vramd_proxy_harness: %s\n", s.error().c_str());
    return 1;
  }
  std::printf("ready %d", proxy.front_door_port());
  for (const auto& s : options.services) std::printf(" %d", proxy.service_port(s.name));
  std::printf("\n");
  std::fflush(stdout);
  io.run();
}
