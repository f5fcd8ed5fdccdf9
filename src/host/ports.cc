#include "host/ports.h"

#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

namespace vramd {
namespace {

namespace fs = std::filesystem;

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  std::ostringstream ss;
  if (in) ss << in.rdbuf();
  return ss.str();
}

template <typename T>
bool parse_int(std::string_view s, T& out, int base) {
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), out, base);
  return ec == std::errc() && ptr == s.data() + s.size();
}

std::vector<std::string_view> split_ws(std::string_view line) {
  std::vector<std::string_view> out;
  size_t pos = 0;
  while (pos < line.size()) {
    while (pos < line.size() && (line[pos] == ' ' || line[pos] == '\t')) ++pos;
    if (pos >= line.size()) break;
    size_t end = line.find_first_of(" \t", pos);
    if (end == std::string_view::npos) end = line.size();
    out.push_back(line.substr(pos, end - pos));
    pos = end;
  }
  return out;
}

}  // namespace

std::vector<TcpListener> parse_proc_net_tcp(std::string_view content) {
  std::vector<TcpListener> out;
  size_t pos = 0;
  while (pos < content.size()) {
    size_t eol = content.find('\n', pos);
    if (eol == std::string_view::npos) eol = content.size();
    std::string_view line = content.substr(pos, eol - pos);
    pos = eol + 1;
    // sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode ...
    auto f = split_ws(line);
    if (f.size() < 10 || f[3] != "0A") continue;
    size_t colon = f[1].rfind(':');
    if (colon == std::string_view::npos) continue;
    TcpListener l;
    unsigned long long inode = 0;
    // A port is 16 bits: a wider field is a bad row (found by fuzzing, tests/fuzz/README.md).
    if (!parse_int(f[1].substr(colon + 1), l.port, 16) || l.port < 0 || l.port > 0xFFFF) continue;
    if (!parse_int(f[9], inode, 10) || inode == 0) continue;
    l.inode = inode;
    out.push_back(l);
  }
  return out;
}

namespace {

// One inet_diag dump of `family`'s TCP sockets in LISTEN; false on any netlink error.
bool netlink_dump(int fd, std::uint8_t family, std::vector<TcpListener>& out, std::string& error) {
  struct {
    nlmsghdr nlh;
    inet_diag_req_v2 req;
  } msg{};
  msg.nlh.nlmsg_len = sizeof(msg);
  msg.nlh.nlmsg_type = SOCK_DIAG_BY_FAMILY;
  msg.nlh.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
  msg.nlh.nlmsg_seq = family;
  msg.req.sdiag_family = family;
  msg.req.sdiag_protocol = IPPROTO_TCP;
  msg.req.idiag_states = 1u << TCP_LISTEN;  // the kernel skips every other socket
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  if (sendto(fd, &msg, sizeof(msg), 0, reinterpret_cast<sockaddr*>(&kernel), sizeof(kernel)) < 0) {
    error = std::string("netlink sendto: ") + std::strerror(errno);
    return false;
  }
  alignas(nlmsghdr) char buf[32768];
  for (;;) {
    ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      error = std::string("netlink recv: ") + std::strerror(errno);
      return false;
    }
    if (n == 0) {
      error = "netlink: closed before the dump ended";
      return false;
    }
    int len = static_cast<int>(n);
    for (auto* h = reinterpret_cast<nlmsghdr*>(buf); NLMSG_OK(h, len); h = NLMSG_NEXT(h, len)) {
      if (h->nlmsg_type == NLMSG_DONE) return true;
      if (h->nlmsg_type == NLMSG_ERROR) {
        auto* e = static_cast<nlmsgerr*>(NLMSG_DATA(h));
        error = std::string("netlink: ") + std::strerror(-e->error);
        return false;
      }
      if (h->nlmsg_type != SOCK_DIAG_BY_FAMILY ||
          h->nlmsg_len < NLMSG_LENGTH(sizeof(inet_diag_msg)))
        continue;
      auto* d = static_cast<inet_diag_msg*>(NLMSG_DATA(h));
      if (d->idiag_state != TCP_LISTEN || d->idiag_inode == 0) continue;
      out.push_back({ntohs(d->id.idiag_sport), d->idiag_inode});
    }
  }
}

}  // namespace

std::optional<std::vector<TcpListener>> netlink_tcp_listeners(std::string* error) {
  std::string why;
  int fd = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
  if (fd < 0) {
    if (error) *error = std::string("netlink socket: ") + std::strerror(errno);
    return std::nullopt;
  }
  timeval timeout{1, 0};  // the kernel answers at once; never hang a sample on it
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  std::vector<TcpListener> out;
  bool ok = netlink_dump(fd, AF_INET, out, why) && netlink_dump(fd, AF_INET6, out, why);
  close(fd);
  if (!ok) {
    if (error) *error = why;
    return std::nullopt;
  }
  return out;
}

std::vector<TcpListener> proc_tcp_listeners(const std::string& root) {
  std::vector<TcpListener> out;
  for (const char* file : {"/net/tcp", "/net/tcp6"}) {
    for (const TcpListener& l : parse_proc_net_tcp(read_text(root + file))) out.push_back(l);
  }
  return out;
}

std::vector<std::pair<int, int>> match_listeners(const std::string& root,
                                                 const std::vector<int>& ports,
                                                 const std::vector<TcpListener>& listeners,
                                                 const std::vector<int>* candidates,
                                                 ListenerCache* cache) {
  std::vector<std::pair<int, int>> out;
  std::set<int> wanted(ports.begin(), ports.end());
  std::map<unsigned long long, int> port_of_inode;
  for (const TcpListener& l : listeners) {
    if (wanted.count(l.port)) port_of_inode[l.inode] = l.port;
  }
  if (cache) {
    // Sockets that are gone take what was learnt about them along.
    std::erase_if(cache->owners, [&](const auto& e) { return !port_of_inode.count(e.first); });
    std::erase_if(cache->searched, [&](const auto& e) { return !port_of_inode.count(e.first); });
  }
  if (port_of_inode.empty()) return out;

  std::vector<int> pids;
  if (candidates) {
    pids = *candidates;
  } else {
    std::error_code ec;
    for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
      int pid = 0;
      if (parse_int(it->path().filename().string(), pid, 10) && pid > 0) pids.push_back(pid);
    }
  }
  std::set<int> pid_set(pids.begin(), pids.end());
  auto has = [](const std::vector<int>& v, int pid) {
    return std::find(v.begin(), v.end(), pid) != v.end();
  };
  std::set<unsigned long long> unknown;
  for (const auto& [inode, port] : port_of_inode) {
    bool answered = false;
    if (cache) {
      if (auto k = cache->owners.find(inode); k != cache->owners.end()) {
        std::erase_if(k->second, [&](int pid) { return !pid_set.count(pid); });
        for (int pid : k->second) out.emplace_back(port, pid);
        answered = !k->second.empty();
      }
    }
    if (!answered) unknown.insert(inode);
  }
  if (!unknown.empty()) {
    for (int pid : pids) {
      if (cache) {
        bool searched_for_all = true;
        for (unsigned long long inode : unknown) {
          auto s = cache->searched.find(inode);
          if (s == cache->searched.end() || !has(s->second, pid)) searched_for_all = false;
        }
        if (searched_for_all) continue;
        ++cache->fd_scans;
      }
      std::error_code fd_ec;  // a process we may not read, or one that just exited
      fs::path fd_dir = fs::path(root) / std::to_string(pid) / "fd";
      std::set<unsigned long long> held;
      for (fs::directory_iterator fd(fd_dir, fd_ec), fd_end; !fd_ec && fd != fd_end;
           fd.increment(fd_ec)) {
        std::error_code link_ec;
        std::string target = fs::read_symlink(fd->path(), link_ec).string();
        if (link_ec || !target.starts_with("socket:[") || !target.ends_with("]")) continue;
        unsigned long long inode = 0;
        if (!parse_int(std::string_view(target).substr(8, target.size() - 9), inode, 10)) continue;
        if (!unknown.count(inode)) continue;
        out.emplace_back(port_of_inode[inode], pid);
        held.insert(inode);
      }
      if (!cache) continue;
      for (unsigned long long inode : unknown) {
        auto& list = held.count(inode) ? cache->owners[inode] : cache->searched[inode];
        if (!has(list, pid)) list.push_back(pid);
      }
    }
    if (cache) {  // pids no longer asked about are forgotten, so the lists stay bounded
      for (auto& [inode, list] : cache->searched)
        std::erase_if(list, [&](int pid) { return !pid_set.count(pid); });
    }
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::vector<std::pair<int, int>> find_listeners(const std::string& root,
                                                const std::vector<int>& ports,
                                                const std::vector<int>* candidates) {
  if (ports.empty()) return {};
  return match_listeners(root, ports, proc_tcp_listeners(root), candidates);
}

std::map<int, std::vector<int>> listening_ports_of(const std::string& root,
                                                   const std::vector<int>& candidates) {
  std::optional<std::vector<TcpListener>> netlink =
      root == "/proc" ? netlink_tcp_listeners() : std::nullopt;
  std::vector<TcpListener> sockets = netlink ? *netlink : proc_tcp_listeners(root);
  std::vector<int> ports;
  ports.reserve(sockets.size());
  for (const auto& l : sockets) ports.push_back(l.port);
  std::sort(ports.begin(), ports.end());
  ports.erase(std::unique(ports.begin(), ports.end()), ports.end());
  std::map<int, std::vector<int>> out;
  if (candidates.empty()) return out;
  for (const auto& [port, pid] : match_listeners(root, ports, sockets, &candidates))
    out[pid].push_back(port);
  return out;
}

}  // namespace vramd
