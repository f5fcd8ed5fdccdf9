// An upstream that is served as cpp-httplib serves llama-server (../shared/reference/transport.md):
// a fixed pool of worker threads, one connection per worker for the connection's whole life
// (idle keep-alive time included), further connections accepted but left waiting in a queue;
// an idle connection closed `keep_alive` after its last response (`Keep-Alive: timeout=N,
// max=M` advertised), the M-th response with `Connection: close`; and, as builds before about
// b4760, no TCP_NODELAY and a response's head and body in two send() calls.
// Blocking sockets on plain threads, as the real one: what the proxy meets is the same.
#pragma once

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace vramd::testing {

class ThreadedServer {
 public:
  struct Options {
    int workers = 3;                                  // --threads-http
    std::chrono::milliseconds keep_alive{5000};       // CPPHTTPLIB_KEEPALIVE_TIMEOUT_SECOND
    int max_requests = 100;                           // CPPHTTPLIB_KEEPALIVE_MAX_COUNT
    bool split_writes = true;                         // head, then body: two sends
    bool nodelay = false;                             // TCP_NODELAY on accepted sockets
    std::string body = R"({"choices":[{"text":"hi"}]})";
  };

  explicit ThreadedServer(Options o) : o_(std::move(o)) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof a);
    ::listen(listen_fd_, 512);
    socklen_t len = sizeof a;
    ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    for (int i = 0; i < o_.workers; ++i) workers_.emplace_back([this] { work(); });
    acceptor_ = std::thread([this] { accept_loop(); });
  }
  ~ThreadedServer() {
    stop_ = true;
    ::shutdown(listen_fd_, SHUT_RDWR);
    ::close(listen_fd_);
    acceptor_.join();
    {
      std::lock_guard lock(mu_);
      for (int fd : active_) ::shutdown(fd, SHUT_RDWR);  // a worker in its keep-alive wait
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
    for (auto& q : waiting_) ::close(q.fd);
  }
  ThreadedServer(const ThreadedServer&) = delete;
  ThreadedServer& operator=(const ThreadedServer&) = delete;

  int port() const { return port_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  int accepted() const { return accepted_; }
  int requests() const { return requests_; }
  // The most connections accepted and not yet closed at one time (served or waiting).
  int most_open() const { return most_open_; }
  // The longest a connection waited in the queue for a worker, in ms.
  long longest_queue_wait_ms() const { return longest_wait_ms_; }

 private:
  struct Queued {
    int fd;
    std::chrono::steady_clock::time_point since;
  };

  void accept_loop() {
    for (;;) {
      int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) {
        if (stop_) return;
        continue;
      }
      int flag = o_.nodelay ? 1 : 0;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &flag, sizeof flag);
      ++accepted_;
      int now_open = ++open_;
      int seen = most_open_;
      while (now_open > seen && !most_open_.compare_exchange_weak(seen, now_open)) {
      }
      std::lock_guard lock(mu_);
      waiting_.push_back({fd, std::chrono::steady_clock::now()});
      cv_.notify_one();
    }
  }

  void work() {
    for (;;) {
      Queued q{};
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [this] { return stop_ || !waiting_.empty(); });
        if (stop_) return;
        q = waiting_.front();
        waiting_.pop_front();
        active_.push_back(q.fd);
      }
      long waited = std::chrono::duration_cast<std::chrono::milliseconds>(
                        std::chrono::steady_clock::now() - q.since)
                        .count();
      long seen = longest_wait_ms_;
      while (waited > seen && !longest_wait_ms_.compare_exchange_weak(seen, waited)) {
      }
      serve(q.fd);
      ::shutdown(q.fd, SHUT_RDWR);
      {
        std::lock_guard lock(mu_);
        std::erase(active_, q.fd);
        ::close(q.fd);
      }
      --open_;
    }
  }

  // Waits up to `ms` for bytes; false on timeout, close or error.
  static bool readable(int fd, long ms) {
    pollfd p{fd, POLLIN, 0};
    return ::poll(&p, 1, static_cast<int>(ms)) > 0 && (p.revents & POLLIN);
  }

  void serve(int fd) {
    std::string in;
    for (int served = 0; !stop_;) {
      // The next request's head (the keep-alive wait for all but the first).
      std::size_t end;
      while ((end = in.find("\r\n\r\n")) == std::string::npos) {
        if (!readable(fd, o_.keep_alive.count())) return;
        char buf[4096];
        ssize_t n = ::recv(fd, buf, sizeof buf, 0);
        if (n <= 0) return;
        in.append(buf, static_cast<std::size_t>(n));
      }
      std::size_t length = 0;
      std::string head = in.substr(0, end);
      std::string lower = head;
      std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
      if (auto at = lower.find("content-length:"); at != std::string::npos)
        length = std::stoul(head.substr(at + 15));
      while (in.size() < end + 4 + length) {
        if (!readable(fd, 5000)) return;
        char buf[4096];
        ssize_t n = ::recv(fd, buf, sizeof buf, 0);
        if (n <= 0) return;
        in.append(buf, static_cast<std::size_t>(n));
      }
      in.erase(0, end + 4 + length);
      ++requests_;
      ++served;
      const bool last = served >= o_.max_requests || lower.find("connection: close") != std::string::npos;
      long secs = std::max<long>(1, o_.keep_alive.count() / 1000);
      std::string response_head =
          "HTTP/1.1 200 OK\r\nContent-Type: application/json; charset=utf-8\r\n"
          "Content-Length: " + std::to_string(o_.body.size()) + "\r\n" +
          (last ? std::string("Connection: close\r\n")
                : "Keep-Alive: timeout=" + std::to_string(secs) +
                      ", max=" + std::to_string(o_.max_requests) + "\r\n") +
          "\r\n";
      if (o_.split_writes) {
        if (!send_all(fd, response_head) || !send_all(fd, o_.body)) return;
      } else if (!send_all(fd, response_head + o_.body)) {
        return;
      }
      if (last) return;
    }
  }

  static bool send_all(int fd, const std::string& s) {
    std::size_t at = 0;
    while (at < s.size()) {
      ssize_t n = ::send(fd, s.data() + at, s.size() - at, MSG_NOSIGNAL);
      if (n <= 0) return false;
      at += static_cast<std::size_t>(n);
    }
    return true;
  }

  Options o_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> accepted_{0}, requests_{0}, open_{0}, most_open_{0};
  std::atomic<long> longest_wait_ms_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Queued> waiting_;
  std::vector<int> active_;  // connections being served
  std::vector<std::thread> workers_;
  std::thread acceptor_;
};

}  // namespace vramd::testing
