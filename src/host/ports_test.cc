#include "host/ports.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace vramd
