#include "host/proc_table.h"

#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "host/cgroup.h"

namespace vramd {
namespace {

std::optional<std::string> read_proc_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return std::nullopt;
  return ss.str();
}

template <typename T>
std::optional<T> to_number(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  T v{};
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || ptr == s.data()) return std::nullopt;
  return v;
}

// The value after "Key:" in a status or meminfo style file.
std::optional<std::string_view> field(std::string_view text, std::string_view key) {
  size_t pos = 0;
  while (pos < text.size()) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    std::string_view line = text.substr(pos, eol - pos);
    if (line.size() > key.size() && line.starts_with(key) && line[key.size()] == ':') {
      return line.substr(key.size() + 1);
    }
    pos = eol + 1;
  }
  return std::nullopt;
}

std::optional<Bytes> kb_field(std::string_view text, std::string_view key) {
  auto v = field(text, key);
  if (!v) return std::nullopt;
  auto n = to_number<unsigned long long>(*v);
  if (!n) return std::nullopt;
  return *n * KiB;
}

std::optional<int> parse_pid(std::string_view name) {
  if (name.empty() ||
      !std::all_of(name.begin(), name.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return std::nullopt;
  }
  return to_number<int>(name);
}

long clock_ticks() {
  static const long ticks = [] {
    long t = sysconf(_SC_CLK_TCK);
    return t > 0 ? t : 100;
  }();
  return ticks;
}

long page_size() {
  static const long size = [] {
    long s = sysconf(_SC_PAGESIZE);
    return s > 0 ? s : 4096;
  }();
  return size;
}

}  // namespace

std::optional<StatFields> parse_stat(std::string_view line) {
  size_t open = line.find('(');
  size_t close = line.rfind(')');
  if (open == std::string_view::npos || close == std::string_view::npos || close < open) {
    return std::nullopt;
  }
  StatFields f;
  f.comm = std::string(line.substr(open + 1, close - open - 1));
  // After ')': field 3 (state) is token 0, so field N is token N - 3.
  std::string_view rest = line.substr(close + 1);
  int token = 0;
  size_t pos = 0;
  bool have_ppid = false, have_start = false;
  while (pos < rest.size() && token <= 21) {
    while (pos < rest.size() && (rest[pos] == ' ' || rest[pos] == '\n')) ++pos;
    if (pos >= rest.size()) break;
    size_t end = rest.find_first_of(" \n", pos);
    if (end == std::string_view::npos) end = rest.size();
    std::string_view tok = rest.substr(pos, end - pos);
    if (token == 1) {
      auto v = to_number<int>(tok);
      if (!v) return std::nullopt;
      f.ppid = *v;
      have_ppid = true;
    } else if (token == 19) {
      auto v = to_number<unsigned long long>(tok);
      if (!v) return std::nullopt;
      f.start_ticks = *v;
      have_start = true;
    } else if (token == 21) {
      f.rss_pages = to_number<unsigned long long>(tok);
    }
    ++token;
    pos = end;
  }
  if (!have_ppid || !have_start) return std::nullopt;
  return f;
}

ProcTable::ProcTable(std::string root) : root_(std::move(root)) {}

std::optional<long long> ProcTable::boot_time_s() const {
  auto stat = read_proc_text(root_ + "/stat");
  if (!stat) return std::nullopt;
  size_t pos = stat->find("\nbtime ");
  if (pos == std::string::npos) {
    if (!stat->starts_with("btime ")) return std::nullopt;
    pos = 0;
  } else {
    pos += 1;
  }
  return to_number<long long>(std::string_view(*stat).substr(pos + 6));
}

std::string ProcTable::user_name(unsigned uid) {
  if (auto it = users_.find(uid); it != users_.end()) return it->second;
  std::string name = std::to_string(uid);
  long max = sysconf(_SC_GETPW_R_SIZE_MAX);
  std::vector<char> buf(max > 0 ? static_cast<size_t>(max) : 16384);
  passwd pw{};
  passwd* found = nullptr;
  if (getpwuid_r(uid, &pw, buf.data(), buf.size(), &found) == 0 && found && found->pw_name) {
    name = found->pw_name;
  }
  users_.emplace(uid, name);
  return name;
}

std::optional<ProcessInfo> ProcTable::read_one(int pid, std::optional<long long> boot_time_s) {
  const std::string dir = root_ + "/" + std::to_string(pid);
  auto stat_text = read_proc_text(dir + "/stat");
  if (!stat_text) return std::nullopt;
  auto stat = parse_stat(*stat_text);
  if (!stat) return std::nullopt;
  auto status = read_proc_text(dir + "/status");
  if (!status) return std::nullopt;  // vanished between the two reads

  ProcessInfo p;
  p.pid = pid;
  p.ppid = stat->ppid;
  p.start_ticks = stat->start_ticks;
  if (auto comm = read_proc_text(dir + "/comm")) {
    p.comm = std::move(*comm);
    while (!p.comm.empty() && p.comm.back() == '\n') p.comm.pop_back();
  } else {
    p.comm = stat->comm;
  }
  if (auto cmdline = read_proc_text(dir + "/cmdline")) {
    std::string& c = *cmdline;
    while (!c.empty() && c.back() == '\0') c.pop_back();
    std::replace(c.begin(), c.end(), '\0', ' ');
    p.cmdline = std::move(c);
  }
  if (auto uid = field(*status, "Uid")) {
    if (auto n = to_number<unsigned>(*uid)) p.uid = *n;
  }
  p.user = user_name(p.uid);
  if (auto rss = kb_field(*status, "VmRSS")) {
    p.rss = *rss;
  } else if (auto statm = read_proc_text(dir + "/statm")) {
    std::string_view s = *statm;
    size_t sp = s.find(' ');
    if (sp != std::string_view::npos) {
      if (auto pages = to_number<unsigned long long>(s.substr(sp + 1))) {
        p.rss = *pages * static_cast<Bytes>(page_size());
      }
    }
  }
  if (boot_time_s) {
    long long ms =
        *boot_time_s * 1000 + static_cast<long long>(p.start_ticks * 1000 / clock_ticks());
    p.start_time = TimePoint(std::chrono::milliseconds(ms));
  }
  if (auto cgroup = read_proc_text(dir + "/cgroup")) p.cgroup = parse_cgroup(*cgroup);
  return p;
}

std::vector<ProcessInfo> ProcTable::read_all() {
  std::vector<int> pids;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(root_, ec), end; !ec && it != end; it.increment(ec)) {
    if (auto pid = parse_pid(it->path().filename().string())) pids.push_back(*pid);
  }
  std::sort(pids.begin(), pids.end());
  auto boot = boot_time_s();
  std::vector<ProcessInfo> out;
  out.reserve(pids.size());
  for (int pid : pids) {
    if (auto p = read_one(pid, boot)) out.push_back(std::move(*p));
  }
  return out;
}

std::optional<ProcessInfo> ProcTable::read(int pid) {
  if (pid <= 0) return std::nullopt;
  return read_one(pid, boot_time_s());
}

MemInfo parse_meminfo(const std::string& text) {
  MemInfo m;
  m.total = kb_field(text, "MemTotal");
  m.available = kb_field(text, "MemAvailable");
  return m;
}

MemInfo ProcTable::read_meminfo() const {
  auto text = read_proc_text(root_ + "/meminfo");
  return text ? parse_meminfo(*text) : MemInfo{};
}

std::optional<ProcessInfo> read_process(const std::string& root, int pid) {
  return ProcTable(root).read(pid);
}

bool process_alive(const std::string& root, int pid, unsigned long long start_ticks) {
  if (pid <= 0) return false;
  auto text = read_proc_text(root + "/" + std::to_string(pid) + "/stat");
  if (!text) return false;
  auto stat = parse_stat(*text);
  return stat && stat->start_ticks == start_ticks;
}

MemInfo read_meminfo(const std::string& root) { return ProcTable(root).read_meminfo(); }

}  // namespace vramd
