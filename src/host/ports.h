// Which process listens on a TCP port: /proc/net/tcp{,6} give LISTEN sockets by inode, and the
// fd links under /proc/PID/fd ("socket:[INODE]") give the processes holding them.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace vramd {

struct TcpListener {
  int port = 0;
  unsigned long long inode = 0;
};

// LISTEN (state 0A) rows of a /proc/net/tcp or tcp6 file, any local address. Bad rows skipped.
std::vector<TcpListener> parse_proc_net_tcp(std::string_view content);

// (port, pid) for each wanted port that a process under `root` listens on, sorted and unique.
// Several pids may share one socket (fork after listen). Reads no fd links when `ports` is empty.
// `candidates`: only these pids' fds are read (nullptr: every process under root).
std::vector<std::pair<int, int>> find_listeners(const std::string& root,
                                                const std::vector<int>& ports,
                                                const std::vector<int>* candidates = nullptr);

}  // namespace vramd
