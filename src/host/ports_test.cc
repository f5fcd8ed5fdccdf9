#include "host/ports.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>

#include <gtest/gtest.h>

#include "host/linux_host_scanner.h"

namespace vramd {
namespace {

namespace fs = std::filesystem;

constexpr char kTcp[] =
    "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout "
    "inode\n"
    "   0: 00000000:1FFC 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 "
    "41001 1 0000000000000000 100 0 0 10 0\n"
    "   1: 0100007F:2B67 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 "
    "41002 1 0000000000000000 100 0 0 10 0\n"
    "   2: 0100007F:2B67 0100007F:D431 01 00000000:00000000 00:00000000 00000000  1000        0 "
    "41003 1 0000000000000000 20 4 30 10 -1\n"
    "   3: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 "
    "41004 1 0000000000000000 100 0 0 10 0\n";
constexpr char kTcp6[] =
    "  sl  local_address                         remote_address                        st "
    "tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
    "   0: 00000000000000000000000000000000:1F40 00000000000000000000000000000000:0000 0A "
    "00000000:00000000 00:00000000 00000000  1000        0 42001 1 0000000000000000 100 0 0 10 0\n"
    "   1: 00000000000000000000000001000000:2B67 00000000000000000000000000000000:0000 0A "
    "00000000:00000000 00:00000000 00000000  1000        0 42002 1 0000000000000000 100 0 0 10 0\n"
    "   garbage line\n";

class FakeProcNet {
 public:
  FakeProcNet() {
    root_ = fs::temp_directory_path() / ("vramd-ports-" + std::to_string(getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_ / "net");
    std::ofstream(root_ / "net/tcp") << kTcp;
    std::ofstream(root_ / "net/tcp6") << kTcp6;
  }
  ~FakeProcNet() { fs::remove_all(root_); }
  void fd(int pid, int fd, const std::string& target) {
    fs::path dir = root_ / std::to_string(pid) / "fd";
    fs::create_directories(dir);
    fs::create_symlink(target, dir / std::to_string(fd));
  }
  std::string root() const { return root_.string(); }

 private:
  fs::path root_;
};

TEST(PortsTest, ParsesOnlyListenRows) {
  auto v4 = parse_proc_net_tcp(kTcp);
  ASSERT_EQ(v4.size(), 3u);
  EXPECT_EQ(v4[0].port, 8188);
  EXPECT_EQ(v4[0].inode, 41001u);
  EXPECT_EQ(v4[1].port, 11111);
  EXPECT_EQ(v4[2].port, 8080);
  auto v6 = parse_proc_net_tcp(kTcp6);
  ASSERT_EQ(v6.size(), 2u);
  EXPECT_EQ(v6[0].port, 8000);
  EXPECT_EQ(v6[1].port, 11111);
  EXPECT_TRUE(parse_proc_net_tcp("").empty());
}

// Fuzzing found "09551615:0707E8" read as port 460776 (tests/fuzz/corpus/proc_net_tcp/
// regression-port-wider-than-16-bits): a port field wider than 16 bits is a bad row, skipped.
TEST(PortsTest, FuzzRegressionPortWiderThan16BitsIsSkipped) {
  constexpr char kRow[] =
      "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout "
      "inode\n"
      "   0: 09551615:0707E8 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000 0 "
      "49 1 0000000000000000 100 0 0 10 0\n"
      "   1: 0100007F:FFFF 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000 0 "
      "50 1 0000000000000000 100 0 0 10 0\n";
  auto got = parse_proc_net_tcp(kRow);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].port, 65535);
  EXPECT_EQ(got[0].inode, 50u);
}

TEST(PortsTest, MapsInodesToPidsInFakeTree) {
  FakeProcNet proc;
  proc.fd(100, 3, "socket:[41001]");  // 8188 on 0.0.0.0
  proc.fd(100, 4, "/dev/nvidia0");
  proc.fd(200, 5, "socket:[42001]");  // 8000 on ::
  proc.fd(300, 7, "socket:[41002]");  // 11111 on 127.0.0.1
  proc.fd(301, 7, "socket:[42002]");  // 11111 on ::1, another process
  proc.fd(400, 9, "socket:[41003]");  // established, not listening
  proc.fd(500, 1, "pipe:[41004]");    // same number, but a pipe
  auto got = find_listeners(proc.root(), {8188, 8000, 11111, 9999, 8080});
  std::vector<std::pair<int, int>> want = {{8000, 200}, {8188, 100}, {11111, 300}, {11111, 301}};
  EXPECT_EQ(got, want);
  EXPECT_TRUE(find_listeners(proc.root(), {}).empty());
  EXPECT_TRUE(find_listeners(proc.root() + "/missing", {8188}).empty());
}

TEST(PortsTest, FindsOurOwnListeningSocketInRealProc) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(fd, 1), 0);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  int port = ntohs(addr.sin_port);
  auto got = find_listeners("/proc", {port});
  close(fd);
  std::pair<int, int> self{port, static_cast<int>(getpid())};
  EXPECT_NE(std::find(got.begin(), got.end(), self), got.end()) << "port " << port;
}

// Real sockets opened by a test: listeners on 127.0.0.1 and ::1, and a connected pair (whose
// sockets are not listening and must not be found).
class RealSockets {
 public:
  RealSockets() {
    v4_ = listen_on(AF_INET);
    v6_ = listen_on(AF_INET6);
    // A connection to the v4 listener: a client socket and the accepted one, both established.
    client_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(v4_port_));
    if (connect(client_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0)
      accepted_ = accept(fds_[0], nullptr, nullptr);
  }
  ~RealSockets() {
    for (int fd : fds_) close(fd);
    if (client_ >= 0) close(client_);
    if (accepted_ >= 0) close(accepted_);
  }
  int v4_port() const { return v4_port_; }
  int v6_port() const { return v6_port_; }
  bool ok() const { return v4_port_ > 0 && accepted_ >= 0; }
  bool has_v6() const { return v6_port_ > 0; }
  // (port, inode) of our listening sockets, from fstat of their fds.
  std::set<std::pair<int, unsigned long long>> ours() const {
    std::set<std::pair<int, unsigned long long>> out;
    int ports[] = {v4_port_, v6_port_};
    for (size_t i = 0; i < fds_.size(); ++i) {
      struct stat st {};
      if (fstat(fds_[i], &st) == 0) out.insert({ports[i], st.st_ino});
    }
    return out;
  }
  int client_port() const {
    sockaddr_in a{};
    socklen_t len = sizeof(a);
    getsockname(client_, reinterpret_cast<sockaddr*>(&a), &len);
    return ntohs(a.sin_port);
  }

 private:
  int listen_on(int family) {
    int fd = socket(family, SOCK_STREAM, 0);
    if (fd < 0) return 0;
    sockaddr_storage ss{};
    socklen_t len = 0;
    if (family == AF_INET) {
      auto* a = reinterpret_cast<sockaddr_in*>(&ss);
      a->sin_family = AF_INET;
      a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      len = sizeof(*a);
    } else {
      auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
      a->sin6_family = AF_INET6;
      a->sin6_addr = in6addr_loopback;
      len = sizeof(*a);
    }
    if (bind(fd, reinterpret_cast<sockaddr*>(&ss), len) != 0 || listen(fd, 4) != 0) {
      close(fd);
      return 0;
    }
    getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
    int port = ntohs(family == AF_INET ? reinterpret_cast<sockaddr_in*>(&ss)->sin_port
                                       : reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
    fds_.push_back(fd);
    (family == AF_INET ? v4_port_ : v6_port_) = port;
    return fd;
  }

  std::vector<int> fds_;
  int v4_ = -1, v6_ = -1, client_ = -1, accepted_ = -1;
  int v4_port_ = 0, v6_port_ = 0;
};

std::set<std::pair<int, unsigned long long>> only_ports(const std::vector<TcpListener>& all,
                                                        std::set<int> ports) {
  std::set<std::pair<int, unsigned long long>> out;
  for (const auto& l : all)
    if (ports.count(l.port)) out.insert({l.port, l.inode});
  return out;
}

TEST(PortsTest, NetlinkAndProcNetTcpFindTheSameRealListeners) {
  RealSockets s;
  ASSERT_TRUE(s.ok());
  std::string error;
  auto netlink = netlink_tcp_listeners(&error);
  ASSERT_TRUE(netlink) << error;
  auto proc = proc_tcp_listeners("/proc");
  std::set<int> ports = {s.v4_port(), s.client_port()};
  if (s.has_v6()) ports.insert(s.v6_port());
  // Our listeners, by inode, on both paths; the connected client's port on neither.
  EXPECT_EQ(only_ports(*netlink, ports), s.ours());
  EXPECT_EQ(only_ports(proc, ports), s.ours());
  EXPECT_EQ(s.ours().size(), s.has_v6() ? 2u : 1u);
  // The whole LISTEN table is the same both ways. Other processes (tests run in parallel) open
  // and close listeners between two reads, so read both again until one pair agrees.
  std::set<std::pair<int, unsigned long long>> a, b;
  for (int attempt = 0; attempt < 20; ++attempt) {
    a.clear();
    b.clear();
    auto n = netlink_tcp_listeners(&error);
    ASSERT_TRUE(n) << error;
    for (const auto& l : *n) a.insert({l.port, l.inode});
    for (const auto& l : proc_tcp_listeners("/proc")) b.insert({l.port, l.inode});
    if (a == b) break;
  }
  EXPECT_EQ(a, b);
}

TEST(PortsTest, ScannerFindsRealListenersByNetlinkAndByTheFallbackAlike) {
  RealSockets s;
  ASSERT_TRUE(s.ok());
  std::vector<int> ports = {s.v4_port(), s.client_port()};
  if (s.has_v6()) ports.push_back(s.v6_port());
  HostScanRequest req;
  req.pids = {static_cast<int>(getpid())};
  req.ports = ports;
  LinuxHostScanner netlink("/proc", DockerNames::Options{});
  LinuxHostScanner files("/proc", DockerNames::Options{});
  files.set_listener_source(LinuxHostScanner::ListenerSource::proc_files);
  auto a = netlink.scan(req).listeners;
  auto b = files.scan(req).listeners;
  EXPECT_EQ(netlink.last_listener_source(), "netlink") << netlink.netlink_error();
  EXPECT_EQ(files.last_listener_source(), "proc");
  std::vector<std::pair<int, int>> want = {{s.v4_port(), static_cast<int>(getpid())}};
  if (s.has_v6()) want.push_back({s.v6_port(), static_cast<int>(getpid())});
  std::sort(want.begin(), want.end());
  EXPECT_EQ(a, want);
  EXPECT_EQ(b, want);
  // A fake proc root is another namespace's table: never netlink.
  char root[] = "/tmp/vramd-fake-proc-XXXXXX";
  ASSERT_NE(mkdtemp(root), nullptr);
  LinuxHostScanner fake(root, DockerNames::Options{});
  EXPECT_EQ(fake.scan(req).error, "");
  EXPECT_EQ(fake.last_listener_source(), "proc");
  rmdir(root);
  // One that cannot be read is an error, not an empty host.
  LinuxHostScanner missing("/nonexistent-proc", DockerNames::Options{});
  HostSnapshot gone = missing.scan(req);
  EXPECT_NE(gone.error.find("cannot read /nonexistent-proc"), std::string::npos) << gone.error;
  EXPECT_TRUE(gone.processes.empty());
}

TEST(PortsTest, CachedOwnersAreNotLookedForAgain) {
  FakeProcNet proc;
  proc.fd(100, 3, "socket:[41001]");  // 8188
  proc.fd(200, 5, "socket:[42001]");  // 8000
  auto sockets = proc_tcp_listeners(proc.root());
  ListenerCache cache;
  std::vector<int> candidates = {100, 200, 300};
  std::vector<std::pair<int, int>> want = {{8000, 200}, {8188, 100}};
  EXPECT_EQ(match_listeners(proc.root(), {8188, 8000, 8080}, sockets, &candidates, &cache), want);
  EXPECT_EQ(cache.fd_scans, 3u);
  // Same sockets, same candidates: answered from the cache; 8080 (held by no candidate) was
  // searched for in all three already.
  EXPECT_EQ(match_listeners(proc.root(), {8188, 8000, 8080}, sockets, &candidates, &cache), want);
  EXPECT_EQ(cache.fd_scans, 3u);
  // A new candidate is searched, and only it.
  proc.fd(400, 4, "socket:[41004]");  // 8080
  candidates.push_back(400);
  want = {{8000, 200}, {8080, 400}, {8188, 100}};
  EXPECT_EQ(match_listeners(proc.root(), {8188, 8000, 8080}, sockets, &candidates, &cache), want);
  EXPECT_EQ(cache.fd_scans, 4u);
  // An owner that is no longer a candidate is not named; its socket, still there, is looked for.
  candidates = {200, 400};
  want = {{8000, 200}, {8080, 400}};
  EXPECT_EQ(match_listeners(proc.root(), {8188, 8000, 8080}, sockets, &candidates, &cache), want);
  // A socket that is gone takes its cache entries along.
  std::vector<TcpListener> fewer;
  for (const auto& l : sockets)
    if (l.port != 8000) fewer.push_back(l);
  want = {{8080, 400}};
  EXPECT_EQ(match_listeners(proc.root(), {8188, 8000, 8080}, fewer, &candidates, &cache), want);
  EXPECT_FALSE(cache.owners.count(42001));
}

}  // namespace
}  // namespace vramd
