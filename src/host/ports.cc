#include "host/ports.h"

#include <algorithm>
#include <charconv>
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
    if (!parse_int(f[1].substr(colon + 1), l.port, 16)) continue;
    if (!parse_int(f[9], inode, 10) || inode == 0) continue;
    l.inode = inode;
    out.push_back(l);
  }
  return out;
}

std::vector<std::pair<int, int>> find_listeners(const std::string& root,
                                                const std::vector<int>& ports,
                                                const std::vector<int>* candidates) {
  std::vector<std::pair<int, int>> out;
  if (ports.empty()) return out;
  std::set<int> wanted(ports.begin(), ports.end());
  std::map<unsigned long long, int> port_of_inode;
  for (const char* file : {"/net/tcp", "/net/tcp6"}) {
    for (const TcpListener& l : parse_proc_net_tcp(read_text(root + file))) {
      if (wanted.count(l.port)) port_of_inode[l.inode] = l.port;
    }
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
  for (int pid : pids) {
    std::error_code fd_ec;  // a process we may not read, or one that just exited
    fs::path fd_dir = fs::path(root) / std::to_string(pid) / "fd";
    for (fs::directory_iterator fd(fd_dir, fd_ec), fd_end; !fd_ec && fd != fd_end;
         fd.increment(fd_ec)) {
      std::error_code link_ec;
      std::string target = fs::read_symlink(fd->path(), link_ec).string();
      if (link_ec || !target.starts_with("socket:[") || !target.ends_with("]")) continue;
      unsigned long long inode = 0;
      if (!parse_int(std::string_view(target).substr(8, target.size() - 9), inode, 10)) continue;
      if (auto p = port_of_inode.find(inode); p != port_of_inode.end()) {
        out.emplace_back(p->second, pid);
      }
    }
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace vramd
