// A TCP relay for partition tests (issue 30): listens on a free port of 127.0.0.1 and forwards
// each connection to a target, in one of three modes that can change at any time:
//   pass       bytes flow both ways;
//   blackhole  nothing is read or forwarded, and nothing is closed: the peers see silence, never
//              an error, and give up only by their own timers; what they sent is delivered if
//              the relay passes again; new connections are accepted and held the same way.
//              Unlike dropped packets, the relay's kernel still ACKs what is sent to it (into
//              its socket's buffer) and answers keepalive probes, so TCP keepalives and
//              TCP_USER_TIMEOUT do not fire: only an application's own deadline ends the wait;
//   reset      every connection is closed with an RST (SO_LINGER 0), and so is each new one.
// One thread runs it (poll); the destructor stops it and closes everything.
#pragma once

#include <atomic>
#include <memory>
#include <string>

namespace vramd::testing {

class TcpRelay {
 public:
  enum class Mode { pass, blackhole, reset };

  TcpRelay(std::string target_host, int target_port);
  ~TcpRelay();
  TcpRelay(const TcpRelay&) = delete;
  TcpRelay& operator=(const TcpRelay&) = delete;

  int port() const { return port_; }
  void set_mode(Mode m) { mode_.store(m); }
  Mode mode() const { return mode_.load(); }
  // Connections accepted so far (for tests of the relay itself).
  int accepted() const { return accepted_.load(); }

 private:
  struct Impl;
  void run();

  std::string host_;
  int target_port_ = 0;
  int port_ = 0;
  int listen_fd_ = -1;
  int wake_fd_[2] = {-1, -1};
  std::atomic<Mode> mode_{Mode::pass};
  std::atomic<int> accepted_{0};
  std::atomic<bool> stop_{false};
  std::unique_ptr<Impl> impl_;
};

}  // namespace vramd::testing
