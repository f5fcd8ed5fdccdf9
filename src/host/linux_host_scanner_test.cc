#include "host/linux_host_scanner.h"

#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>

#include <gtest/gtest.h>

namespace vramd {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

constexpr char kDockerId[] = "d00dfeed0123456789abcdef0123456789abcdef0123456789abcdef01234567";

class FakeHost {
 public:
  FakeHost() {
    root_ = fs::temp_directory_path() / ("vramd-scan-" + std::to_string(getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_ / "proc");
    write("proc/stat", "btime 1700000000\n");
    write("proc/meminfo", "MemTotal: 1000 kB\nMemAvailable: 600 kB\n");
    write("proc/net/tcp",
          "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  "
          "timeout inode\n"
          "   0: 00000000:1FFC 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000 "
          "       0 51001 1 0000000000000000 100 0 0 10 0\n");
  }
  ~FakeHost() { fs::remove_all(root_); }
  void write(const std::string& rel, const std::string& content) {
    fs::path p = root_ / rel;
    fs::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary) << content;
  }
  void add(int pid, const std::string& comm, const std::string& cgroup) {
    std::string d = "proc/" + std::to_string(pid);
    std::string stat = std::to_string(pid) + " (" + comm + ") S 1";
    for (int field = 5; field <= 21; ++field) stat += " 0";
    write(d + "/stat", stat + " 4242 0 0\n");
    write(d + "/status", "Uid:\t0\t0\t0\t0\nVmRSS:\t10 kB\n");
    write(d + "/cmdline", comm + '\0');
    write(d + "/cgroup", cgroup);
  }
  std::string path(const std::string& rel) const { return (root_ / rel).string(); }

 private:
  fs::path root_;
};

TEST(LinuxHostScannerTest, ScansFakeHost) {
  FakeHost host;
  host.add(900, "python3", std::string("0::/system.slice/docker-") + kDockerId + ".scope\n");
  host.add(12, "ollama", "0::/system.slice/ollama.service\n");
  fs::create_directories(host.path("proc/12/fd"));
  fs::create_symlink("socket:[51001]", host.path("proc/12/fd/5"));
  host.write("run/ollama.pid", "  12\n");
  host.write("run/garbage.pid", "not a pid\n");

  std::vector<std::string> warnings;
  DockerNames::Options docker;
  docker.socket_path = host.path("no-docker.sock");
  docker.warn = [&](const std::string& m) { warnings.push_back(m); };
  LinuxHostScanner scanner(host.path("proc"), docker);

  HostScanRequest req;
  req.pids = {900, 12};
  req.ports = {8188, 9000};
  req.pid_files = {{"ollama", host.path("run/ollama.pid")},
                   {"broken", host.path("run/garbage.pid")},
                   {"missing", host.path("run/missing.pid")}};
  HostSnapshot snap = scanner.scan(req);

  ASSERT_EQ(snap.processes.size(), 2u);
  EXPECT_EQ(snap.processes[0].pid, 12);
  EXPECT_EQ(snap.processes[0].cgroup.unit, "ollama.service");
  const CgroupIdentity& cg = snap.processes[1].cgroup;
  EXPECT_EQ(cg.kind, CgroupIdentity::Kind::container);
  EXPECT_EQ(cg.container_id, kDockerId);
  EXPECT_EQ(cg.container_name, "");  // no engine: callers show the short id
  EXPECT_EQ(warnings.size(), 1u);

  std::vector<std::pair<int, int>> listeners = {{8188, 12}};
  EXPECT_EQ(snap.listeners, listeners);
  std::vector<std::pair<std::string, int>> pid_files = {{"ollama", 12}};
  EXPECT_EQ(snap.pid_files, pid_files);
  EXPECT_EQ(snap.mem_total, 1000u * KiB);
  EXPECT_EQ(snap.mem_available, 600u * KiB);

  scanner.scan(req);  // still no engine: no second warning
  EXPECT_EQ(warnings.size(), 1u);
}

TEST(LinuxHostScannerTest, PidFile) {
  FakeHost host;
  host.write("a.pid", "4321");
  host.write("b.pid", "0\n");
  host.write("c.pid", "-5\n");
  EXPECT_EQ(read_pid_file(host.path("a.pid")), 4321);
  EXPECT_FALSE(read_pid_file(host.path("b.pid")));
  EXPECT_FALSE(read_pid_file(host.path("c.pid")));
  EXPECT_FALSE(read_pid_file(host.path("none.pid")));
}

TEST(LinuxHostScannerTest, RealHostSmoke) {
  LinuxHostScanner scanner("/proc", (fs::temp_directory_path() / "vramd-none.sock").string());
  HostScanRequest all;
  all.all_processes = true;
  HostSnapshot snap = scanner.scan(all);
  bool found = false;
  for (size_t i = 0; i < snap.processes.size(); ++i) {
    found = found || snap.processes[i].pid == getpid();
    if (i > 0) {
      EXPECT_LT(snap.processes[i - 1].pid, snap.processes[i].pid);
    }
  }
  EXPECT_TRUE(found);
  EXPECT_TRUE(snap.mem_total);
  EXPECT_TRUE(snap.listeners.empty());
  // /proc/meminfo is read again through its kept descriptor: the same total, from the start.
  HostSnapshot again = scanner.scan(HostScanRequest{});
  EXPECT_EQ(again.mem_total, snap.mem_total);
  EXPECT_EQ(again.mem_total, read_meminfo("/proc").total);
  EXPECT_TRUE(again.mem_available);
}

}  // namespace
}  // namespace vramd

namespace vramd {
namespace {

// GPU pids and their parent chain are read; nothing else. Static fields come from the cache
// while (pid, start ticks) stays the same, and are read again when the pid is reused.
TEST(LinuxHostScannerTest, ReadsOnlyTheWantedPidsAndTheirAncestorsWithACache) {
  LinuxHostScanner scanner("/proc", (fs::temp_directory_path() / "vramd-none.sock").string());
  HostScanRequest req;
  req.pids = {getpid()};
  HostSnapshot snap = scanner.scan(req);
  ASSERT_GE(snap.processes.size(), 2u);  // us and at least our parent
  bool self = false, parent = false;
  for (const auto& p : snap.processes) {
    self |= p.pid == getpid();
    parent |= p.pid == getppid();
  }
  EXPECT_TRUE(self);
  EXPECT_TRUE(parent);
  EXPECT_EQ(scanner.cached_processes(), snap.processes.size());
  // A pid that is gone is dropped from the cache on the next scan.
  req.pids = {};
  EXPECT_TRUE(scanner.scan(req).processes.empty());
  EXPECT_EQ(scanner.cached_processes(), 0u);
}

}  // namespace
}  // namespace vramd

namespace vramd {
namespace {

// A process that execs another program keeps its pid and start ticks: what the cache kept of
// the program before is dropped and the new one read. Here with the same comm ("sh" both times),
// so only the kept command line can tell.
TEST(LinuxHostScannerTest, AProcessThatExecsAnotherProgramIsReadAgain) {
  int pipefd[2];
  ASSERT_EQ(pipe(pipefd), 0);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    dup2(pipefd[0], 0);
    close(pipefd[1]);
    execl("/bin/sh", "sh", "-c", "read x; exec /bin/sh -c 'read y; :'", nullptr);
    _exit(127);
  }
  close(pipefd[0]);
  auto cmdline_of = [&] {
    std::ifstream in("/proc/" + std::to_string(child) + "/cmdline", std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  auto wait_for = [&](const std::string& prefix) {
    for (int i = 0; i < 500 && !cmdline_of().starts_with(prefix); ++i)
      std::this_thread::sleep_for(10ms);
    return cmdline_of().starts_with(prefix);
  };
  auto read_child = [&](LinuxHostScanner& s) -> std::optional<ProcessInfo> {
    HostScanRequest r;
    r.pids = {child};
    for (const ProcessInfo& p : s.scan(r).processes)
      if (p.pid == child) return p;
    return std::nullopt;
  };
  ASSERT_TRUE(wait_for(std::string("sh\0-c\0read x", 12)));
  LinuxHostScanner scanner("/proc", (fs::temp_directory_path() / "vramd-none.sock").string());
  auto before = read_child(scanner);
  ASSERT_TRUE(before);
  EXPECT_EQ(before->comm, "sh");
  EXPECT_EQ(before->cmdline, "sh -c read x; exec /bin/sh -c 'read y; :'");
  EXPECT_EQ(read_child(scanner)->cmdline, before->cmdline);  // from the cache, kept descriptors

  ASSERT_EQ(write(pipefd[1], "\n", 1), 1);
  ASSERT_TRUE(wait_for(std::string("/bin/sh\0-c\0read y", 17)));
  auto after = read_child(scanner);
  ASSERT_TRUE(after);
  EXPECT_EQ(after->comm, "sh");
  EXPECT_EQ(after->cmdline, "/bin/sh -c read y; :");
  EXPECT_EQ(after->start_ticks, before->start_ticks);  // the same process
  EXPECT_EQ(read_child(scanner)->cmdline, after->cmdline);

  close(pipefd[1]);  // its read ends: it exits
  int status = 0;
  waitpid(child, &status, 0);
  EXPECT_TRUE(WIFEXITED(status));
}

// On a fixture root (stat read by path each scan) an exec shows as another comm in stat.
TEST(LinuxHostScannerTest, OnAFixtureRootAnotherCommIsAnExec) {
  FakeHost host;
  host.add(900, "python3", "0::/system.slice/comfy.service\n");
  DockerNames::Options docker;
  docker.socket_path = host.path("no-docker.sock");
  LinuxHostScanner scanner(host.path("proc"), docker);
  HostScanRequest req;
  req.pids = {900};
  ASSERT_EQ(scanner.scan(req).processes.at(0).comm, "python3");
  host.add(900, "vllm", "0::/system.slice/comfy.service\n");  // same pid, same start ticks
  HostSnapshot snap = scanner.scan(req);
  ASSERT_EQ(snap.processes.size(), 1u);
  EXPECT_EQ(snap.processes[0].comm, "vllm");
  EXPECT_EQ(snap.processes[0].cmdline, "vllm");
}

// On /proc each wanted pid's statm is read through a descriptor kept open; a process that exits
// (reaped) drops out of the scan and its descriptor is closed.
TEST(LinuxHostScannerTest, KeepsStatDescriptorsOnProcAndDropsThoseOfExitedProcesses) {
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    pause();
    _exit(0);
  }
  LinuxHostScanner scanner("/proc", (fs::temp_directory_path() / "vramd-none.sock").string());
  HostScanRequest r;
  r.pids = {child};
  HostSnapshot first = scanner.scan(r);
  auto has = [](const HostSnapshot& s, int pid) {
    return std::any_of(s.processes.begin(), s.processes.end(),
                       [&](const ProcessInfo& p) { return p.pid == pid; });
  };
  ASSERT_TRUE(has(first, child));
  EXPECT_TRUE(has(first, getpid()));  // its parent
  size_t kept = scanner.kept_stat_files();
  EXPECT_GE(kept, 2u);  // the child, this test, and up the chain
  HostSnapshot again = scanner.scan(r);
  EXPECT_TRUE(has(again, child));
  EXPECT_EQ(scanner.kept_stat_files(), kept);

  kill(child, SIGKILL);
  int status = 0;
  waitpid(child, &status, 0);
  HostSnapshot after = scanner.scan(r);
  EXPECT_FALSE(has(after, child));
  EXPECT_EQ(scanner.kept_stat_files(), 0u);  // nothing wanted any more
}

// After the first scan a process's parent is not read again, until that parent exits: then the
// walk reads the child's stat afresh and follows its new parent.
TEST(LinuxHostScannerTest, AChildWhoseParentExitsIsFollowedToItsNewParent) {
  ASSERT_EQ(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);  // orphans below come to this test
  int pipefd[2];
  ASSERT_EQ(pipe(pipefd), 0);
  pid_t middle = fork();
  ASSERT_GE(middle, 0);
  if (middle == 0) {
    pid_t leaf = fork();
    if (leaf == 0) {
      pause();
      _exit(0);
    }
    (void)!write(pipefd[1], &leaf, sizeof leaf);
    pause();  // until killed
    _exit(0);
  }
  pid_t leaf = 0;
  ASSERT_EQ(read(pipefd[0], &leaf, sizeof leaf), static_cast<ssize_t>(sizeof leaf));
  close(pipefd[0]);
  close(pipefd[1]);
  LinuxHostScanner scanner("/proc", (fs::temp_directory_path() / "vramd-none.sock").string());
  HostScanRequest r;
  r.pids = {leaf};
  auto find = [](const HostSnapshot& s, int pid) -> const ProcessInfo* {
    for (const auto& p : s.processes)
      if (p.pid == pid) return &p;
    return nullptr;
  };
  HostSnapshot first = scanner.scan(r);
  ASSERT_TRUE(find(first, leaf));
  EXPECT_EQ(find(first, leaf)->ppid, middle);
  EXPECT_TRUE(find(first, middle));
  EXPECT_GT(find(first, leaf)->rss, 0u);
  EXPECT_TRUE(find(scanner.scan(r), middle));  // the kept descriptors: the same chain

  kill(middle, SIGKILL);
  int status = 0;
  waitpid(middle, &status, 0);
  // The leaf now belongs to this test (the subreaper), as the kernel's stat says.
  HostSnapshot after;
  for (int i = 0; i < 100; ++i) {
    after = scanner.scan(r);
    if (find(after, leaf) && find(after, leaf)->ppid == getpid()) break;
    usleep(10'000);
  }
  ASSERT_TRUE(find(after, leaf));
  EXPECT_EQ(find(after, leaf)->ppid, getpid());
  EXPECT_FALSE(find(after, middle));
  EXPECT_TRUE(find(after, getpid()));
  EXPECT_GT(find(after, leaf)->rss, 0u);
  kill(leaf, SIGKILL);
  waitpid(leaf, &status, 0);
  prctl(PR_SET_CHILD_SUBREAPER, 0);
}

}  // namespace
}  // namespace vramd

namespace vramd {
namespace {

// The LISTEN table is dumped again only when its answer may have changed (a new candidate, other
// ports, kListenersRecheck with a port unowned, kListenersRefresh): not on every sample.
TEST(LinuxHostScannerTest, ListenersAreDumpedOnlyWhenTheAnswerMayHaveChanged) {
  FakeHost host;
  host.add(100, "comfyui", "0::/user.slice\n");
  host.add(200, "python3", "0::/user.slice\n");
  fs::create_directories(host.path("proc/100/fd"));
  fs::create_symlink("socket:[51001]", host.path("proc/100/fd/3"));  // 8188
  LinuxHostScanner scanner(host.path("proc"), DockerNames::Options{});
  auto now = std::chrono::steady_clock::time_point{} + 1h;
  scanner.set_clock([&] { return now; });
  HostScanRequest req;
  req.pids = {100};
  req.ports = {8188};
  using Found = std::vector<std::pair<int, int>>;
  EXPECT_EQ(scanner.scan(req).listeners, (Found{{8188, 100}}));
  EXPECT_EQ(scanner.listener_dumps(), 1u);
  EXPECT_EQ(scanner.last_listener_source(), "proc");
  // The same candidates and ports: the last answer, until kListenersRefresh.
  now += 20s;
  EXPECT_EQ(scanner.scan(req).listeners, (Found{{8188, 100}}));
  EXPECT_EQ(scanner.listener_dumps(), 1u);
  EXPECT_EQ(scanner.last_listener_source(), "kept");
  now += LinuxHostScanner::kListenersRefresh - 20s;
  EXPECT_EQ(scanner.scan(req).listeners, (Found{{8188, 100}}));
  EXPECT_EQ(scanner.listener_dumps(), 2u);
  // A new GPU process: dumped at once.
  now += 1s;
  req.pids = {100, 200};
  scanner.scan(req);
  EXPECT_EQ(scanner.listener_dumps(), 3u);
  // Another port wanted: dumped at once; nobody holds 8000 yet.
  req.ports = {8188, 8000};
  EXPECT_EQ(scanner.scan(req).listeners, (Found{{8188, 100}}));
  EXPECT_EQ(scanner.listener_dumps(), 4u);
  // pid 200 binds 8000 after it took GPU memory (vLLM does): found within kListenersRecheck.
  host.write("proc/net/tcp",
             "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  "
             "timeout inode\n"
             "   0: 00000000:1FFC 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000 "
             "       0 51001 1 0000000000000000 100 0 0 10 0\n"
             "   1: 00000000:1F40 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000 "
             "       0 51002 1 0000000000000000 100 0 0 10 0\n");
  fs::create_directories(host.path("proc/200/fd"));
  fs::create_symlink("socket:[51002]", host.path("proc/200/fd/4"));
  now += LinuxHostScanner::kListenersRecheck - 1s;
  EXPECT_EQ(scanner.scan(req).listeners, (Found{{8188, 100}}));
  EXPECT_EQ(scanner.listener_dumps(), 4u);
  now += 1s;
  EXPECT_EQ(scanner.scan(req).listeners, (Found{{8000, 200}, {8188, 100}}));
  EXPECT_EQ(scanner.listener_dumps(), 5u);
  // An owner that is no longer a candidate drops out of the kept answer, with no dump.
  now += 1s;
  req.pids = {200};
  EXPECT_EQ(scanner.scan(req).listeners, (Found{{8000, 200}}));
  EXPECT_EQ(scanner.listener_dumps(), 5u);
  // A pid taken again by another process (other start ticks) is a new candidate.
  std::string stat = "200 (python3) S 1";
  for (int field = 5; field <= 21; ++field) stat += " 0";
  host.write("proc/200/stat", stat + " 9999 0 0\n");
  now += 1s;
  scanner.scan(req);
  EXPECT_EQ(scanner.listener_dumps(), 6u);
  // No port wanted: nothing dumped, nothing kept.
  req.ports = {};
  EXPECT_TRUE(scanner.scan(req).listeners.empty());
  EXPECT_EQ(scanner.last_listener_source(), "");
  EXPECT_EQ(scanner.listener_dumps(), 6u);
}

}  // namespace
}  // namespace vramd
