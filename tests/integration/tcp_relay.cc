#include "integration/tcp_relay.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace vramd::testing {

namespace {

// One relayed connection: the client's socket, the target's, and what is read but not yet
// written each way.
struct Pair {
  int client = -1, target = -1;
  std::string to_target, to_client;
  bool dead = false;
};

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

// Closes with an RST instead of a FIN.
void reset_fd(int& fd) {
  if (fd < 0) return;
  linger l{1, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
  close_fd(fd);
}

int connect_to(const std::string& host, int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, host.c_str(), &a.sin_addr);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  return fd;
}

// Reads what is there from `from` into `buf`; false when the peer closed or failed.
bool pump_in(int from, std::string& buf) {
  char tmp[16384];
  while (true) {
    ssize_t n = ::recv(from, tmp, sizeof tmp, 0);
    if (n > 0) {
      buf.append(tmp, static_cast<size_t>(n));
      if (buf.size() > (1u << 22)) return true;  // 4 MiB pending: let the writer catch up
      continue;
    }
    if (n == 0) return false;
    return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
  }
}

// Writes what it can of `buf` to `to`; false when the peer failed.
bool pump_out(int to, std::string& buf) {
  while (!buf.empty()) {
    ssize_t n = ::send(to, buf.data(), buf.size(), MSG_NOSIGNAL);
    if (n > 0) {
      buf.erase(0, static_cast<size_t>(n));
      continue;
    }
    return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR);
  }
  return true;
}

}  // namespace

struct TcpRelay::Impl {
  std::vector<Pair> pairs;
  std::thread thread;
};

TcpRelay::TcpRelay(std::string target_host, int target_port)
    : host_(std::move(target_host)), target_port_(target_port), impl_(std::make_unique<Impl>()) {
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  int one = 1;
  ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::listen(listen_fd_, 64) != 0)
    throw std::runtime_error(std::string("tcp relay: cannot listen: ") + std::strerror(errno));
  socklen_t len = sizeof a;
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len);
  port_ = ntohs(a.sin_port);
  if (::pipe2(wake_fd_, O_CLOEXEC | O_NONBLOCK) != 0)
    throw std::runtime_error("tcp relay: cannot make its wake pipe");
  impl_->thread = std::thread([this] { run(); });
}

TcpRelay::~TcpRelay() {
  stop_ = true;
  char c = 0;
  (void)!::write(wake_fd_[1], &c, 1);
  if (impl_->thread.joinable()) impl_->thread.join();
  for (Pair& p : impl_->pairs) {
    close_fd(p.client);
    close_fd(p.target);
  }
  close_fd(listen_fd_);
  close_fd(wake_fd_[0]);
  close_fd(wake_fd_[1]);
}

void TcpRelay::run() {
  std::vector<Pair>& pairs = impl_->pairs;
  while (!stop_) {
    Mode mode = mode_.load();
    if (mode == Mode::reset)
      for (Pair& p : pairs) {
        reset_fd(p.client);
        reset_fd(p.target);
        p.dead = true;
      }
    std::erase_if(pairs, [](const Pair& p) { return p.dead; });

    // Polled for reading only while passing: a blackhole reads nothing, so the peers' kernels
    // keep what they sent (and then stop sending), as they would behind dropped packets.
    std::vector<pollfd> fds;
    fds.push_back({wake_fd_[0], POLLIN, 0});
    fds.push_back({listen_fd_, POLLIN, 0});
    for (const Pair& p : pairs) {
      short in = mode == Mode::pass ? POLLIN : 0;
      fds.push_back({p.client, static_cast<short>(in | (!p.to_client.empty() && mode == Mode::pass ? POLLOUT : 0)), 0});
      fds.push_back({p.target, static_cast<short>(in | (!p.to_target.empty() && mode == Mode::pass ? POLLOUT : 0)), 0});
    }
    const size_t polled = pairs.size();  // those accepted below are polled from the next round
    // Mode changes are picked up within 20 ms.
    ::poll(fds.data(), fds.size(), 20);
    if (fds[0].revents & POLLIN) {
      char buf[64];
      while (::read(wake_fd_[0], buf, sizeof buf) > 0) {
      }
    }
    if (fds[1].revents & POLLIN) {
      while (true) {
        int c = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (c < 0) break;
        ++accepted_;
        if (mode_.load() == Mode::reset) {
          reset_fd(c);
          continue;
        }
        int t = connect_to(host_, target_port_);
        if (t < 0) {
          reset_fd(c);
          continue;
        }
        pairs.push_back(Pair{c, t, {}, {}, false});
      }
    }
    if (mode != Mode::pass) continue;
    for (size_t i = 0; i < polled; ++i) {
      Pair& p = pairs[i];
      const pollfd& cf = fds[2 + 2 * i];
      const pollfd& tf = fds[3 + 2 * i];
      bool ok = true;
      if (cf.revents & (POLLIN | POLLHUP | POLLERR)) ok = pump_in(p.client, p.to_target) && ok;
      if (tf.revents & (POLLIN | POLLHUP | POLLERR)) ok = pump_in(p.target, p.to_client) && ok;
      ok = pump_out(p.target, p.to_target) && ok;
      ok = pump_out(p.client, p.to_client) && ok;
      if (!ok) {  // one side closed: the other hears it (after what was pending)
        pump_out(p.target, p.to_target);
        pump_out(p.client, p.to_client);
        close_fd(p.client);
        close_fd(p.target);
        p.dead = true;
      }
    }
  }
}

}  // namespace vramd::testing
