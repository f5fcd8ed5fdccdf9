// Which process listens on a TCP port: the kernel's socket table gives LISTEN sockets by inode
// (NETLINK_SOCK_DIAG, as `ss -ltn` asks it, or /proc/net/tcp{,6}), and the fd links under
// /proc/PID/fd ("socket:[INODE]") give the processes holding them.
#pragma once

#include <map>
#include <optional>
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

// LISTEN TCP sockets (IPv4 and IPv6) of this network namespace, asked of the kernel over
// NETLINK_SOCK_DIAG with the state filter applied in the kernel: unlike /proc/net/tcp, no line is
// formatted for the established sockets. nullopt (and `error` says why) when netlink is refused.
std::optional<std::vector<TcpListener>> netlink_tcp_listeners(std::string* error = nullptr);
// The same from ROOT/net/tcp and ROOT/net/tcp6 (what a fake proc tree in tests can offer).
std::vector<TcpListener> proc_tcp_listeners(const std::string& root);

// What earlier fd scans found, kept between samples: which pids hold a listening socket, and
// which pids' fds were read without finding it (so that a listener whose holder is not among the
// candidates does not cost a full fd scan on every sample). Entries go with their socket.
struct ListenerCache {
  std::map<unsigned long long, std::vector<int>> owners;    // inode → pids holding it
  std::map<unsigned long long, std::vector<int>> searched;  // inode → pids read, not holding it
  unsigned long long fd_scans = 0;                          // processes whose fds were read
};

// (port, pid) for each wanted port among `listeners` that a process under `root` holds, sorted
// and unique. `candidates`: only these pids' fds are read (nullptr: every process under root).
// `cache` (optional) is used and updated: an inode it names is answered from it when one of its
// pids is still a candidate, with no fd read; only candidates not yet searched for the other
// wanted inodes have their fds read. (A holder that gains a socket by fd passing after it was
// searched is missed while that socket lives; fork gives a new pid, which is searched.)
std::vector<std::pair<int, int>> match_listeners(const std::string& root,
                                                 const std::vector<int>& ports,
                                                 const std::vector<TcpListener>& listeners,
                                                 const std::vector<int>* candidates,
                                                 ListenerCache* cache = nullptr);

// (port, pid) for each wanted port that a process under `root` listens on, sorted and unique.
// Several pids may share one socket (fork after listen). Reads no fd links when `ports` is empty.
// `candidates`: only these pids' fds are read (nullptr: every process under root). Reads the
// sockets from ROOT/net/tcp{,6}.
std::vector<std::pair<int, int>> find_listeners(const std::string& root,
                                                const std::vector<int>& ports,
                                                const std::vector<int>* candidates = nullptr);

// pid -> every TCP port it listens on (sorted), for the `candidates` only: the kernel's LISTEN
// sockets over netlink, else ROOT/net/tcp{,6}. What discovery probes.
std::map<int, std::vector<int>> listening_ports_of(const std::string& root,
                                                   const std::vector<int>& candidates);

}  // namespace vramd
