// Listening-port lookup per sample (issue 14 item 6), the old way and the new, side by side, with
// 1,000 extra sockets in this network namespace (500 listening, 250 connected pairs) opened by
// the bench. The wanted port is held by a child process (the "service", few fds), which is the
// only candidate pid, as in a sample where the GPU pid is the service.
//   old: /proc/net/tcp + tcp6 (the kernel formats a line per socket, listening or not), then the
//        candidate's fd links, every sample;
//   new: NETLINK_SOCK_DIAG with the LISTEN filter applied in the kernel, then fd links only for
//        a listener not attributed yet (ListenerCache: none once warm).
// bench/run.sh prints the ratios; bench/RESULTS.md records them.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <vector>

#include <benchmark/benchmark.h>

#include "host/ports.h"

namespace vramd {
namespace {

int listen_loopback(int& port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&a), len) != 0 || listen(fd, 64) != 0)
    std::abort();
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  port = ntohs(a.sin_port);
  return fd;
}

struct Sockets {
  int port = 0;        // the service's port
  pid_t service = -1;  // holds it
  std::vector<int> fds;
  size_t extra = 0;

  Sockets() {
    rlimit r{};
    getrlimit(RLIMIT_NOFILE, &r);
    r.rlim_cur = r.rlim_max;
    setrlimit(RLIMIT_NOFILE, &r);
    int fd = listen_loopback(port);
    service = fork();
    if (service == 0) {
      pause();
      _exit(0);
    }
    close(fd);  // the child holds it alone
    for (int i = 0; i < 500; ++i) {
      int p = 0;
      fds.push_back(listen_loopback(p));
    }
    for (int i = 0; i < 250; ++i) {
      int lp = 0;
      int l = listen_loopback(lp);
      int c = socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      a.sin_port = htons(static_cast<uint16_t>(lp));
      if (connect(c, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) std::abort();
      fds.push_back(c);
      fds.push_back(accept(l, nullptr, nullptr));
      close(l);
    }
    extra = fds.size();
  }
  ~Sockets() {
    kill(service, SIGKILL);
    waitpid(service, nullptr, 0);
    for (int fd : fds) close(fd);
  }
};

Sockets& sockets() {
  static Sockets s;
  return s;
}

void check(benchmark::State& state, const std::vector<std::pair<int, int>>& got) {
  if (got.size() != 1 || got[0].second != sockets().service)
    state.SkipWithError("the service's listener was not found");
}

void BM_PortsProcNetTcp(benchmark::State& state) {
  Sockets& s = sockets();
  std::vector<int> candidates = {s.service};
  std::vector<std::pair<int, int>> got;
  for (auto _ : state) {
    got = find_listeners("/proc", {s.port}, &candidates);
    benchmark::DoNotOptimize(got);
  }
  check(state, got);
  state.counters["extra_sockets"] = static_cast<double>(s.extra);
}
BENCHMARK(BM_PortsProcNetTcp);

void BM_PortsNetlinkCached(benchmark::State& state) {
  Sockets& s = sockets();
  std::vector<int> candidates = {s.service};
  ListenerCache cache;
  std::vector<std::pair<int, int>> got;
  for (auto _ : state) {
    auto table = netlink_tcp_listeners();
    if (!table) {
      state.SkipWithError("netlink refused");
      return;
    }
    got = match_listeners("/proc", {s.port}, *table, &candidates, &cache);
    benchmark::DoNotOptimize(got);
  }
  check(state, got);
  state.counters["fd_scans"] = static_cast<double>(cache.fd_scans);
}
BENCHMARK(BM_PortsNetlinkCached);

void BM_PortsNetlinkUncached(benchmark::State& state) {
  Sockets& s = sockets();
  std::vector<int> candidates = {s.service};
  std::vector<std::pair<int, int>> got;
  for (auto _ : state) {
    auto table = netlink_tcp_listeners();
    if (!table) {
      state.SkipWithError("netlink refused");
      return;
    }
    got = match_listeners("/proc", {s.port}, *table, &candidates);
    benchmark::DoNotOptimize(got);
  }
  check(state, got);
}
BENCHMARK(BM_PortsNetlinkUncached);

// The socket table alone, both ways.
void BM_PortsTableProc(benchmark::State& state) {
  sockets();
  for (auto _ : state) benchmark::DoNotOptimize(proc_tcp_listeners("/proc"));
}
BENCHMARK(BM_PortsTableProc);

void BM_PortsTableNetlink(benchmark::State& state) {
  sockets();
  for (auto _ : state) benchmark::DoNotOptimize(netlink_tcp_listeners());
}
BENCHMARK(BM_PortsTableNetlink);

}  // namespace
}  // namespace vramd
