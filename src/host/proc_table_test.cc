#include "host/proc_table.h"

#include <errno.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

namespace vramd {
namespace {

namespace fs = std::filesystem;

// argv as /proc/PID/cmdline holds it: each argument followed by a NUL.
std::string argv(std::initializer_list<std::string> args) {
  std::string out;
  for (const auto& a : args) out += a + '\0';
  return out;
}

// A fake proc root in a fresh temp dir, removed at the end of the test.
class FakeProc {
 public:
  FakeProc() {
    root_ = fs::temp_directory_path() /
            ("vramd-proc-" + std::to_string(getpid()) + "-" + std::to_string(counter_++));
    fs::remove_all(root_);
    fs::create_directories(root_);
    write("stat", "cpu  1 2 3 4\nbtime 1700000000\nprocesses 10\n");
    write("meminfo",
          "MemTotal:       65536000 kB\nMemFree:  1000 kB\nMemAvailable:   32768000 kB\n");
  }
  ~FakeProc() { fs::remove_all(root_); }

  void write(const std::string& rel, const std::string& content) {
    fs::path p = root_ / rel;
    fs::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary) << content;
  }

  // A process with the usual files; start ticks in field 22.
  void add(int pid, const std::string& comm, int ppid, unsigned long long start_ticks,
           const std::string& cmdline, unsigned uid = 1000, const std::string& rss_kb = "2048",
           const std::string& cgroup = "0::/system.slice/comfyui.service\n") {
    std::string d = std::to_string(pid);
    std::string stat = d + " (" + comm + ") S " + std::to_string(ppid);
    for (int field = 5; field <= 21; ++field) stat += " 0";
    stat += " " + std::to_string(start_ticks) + " 1000 200 18446744073709551615\n";
    write(d + "/stat", stat);
    write(d + "/comm", comm + "\n");
    write(d + "/cmdline", cmdline);
    std::string status = "Name:\t" + comm + "\nUid:\t" + std::to_string(uid) + "\t" +
                         std::to_string(uid) + "\t" + std::to_string(uid) + "\t" +
                         std::to_string(uid) + "\n";
    if (!rss_kb.empty()) status += "VmRSS:\t   " + rss_kb + " kB\n";
    write(d + "/status", status);
    write(d + "/statm", "0 0 0 0 0 0 0\n");
    write(d + "/cgroup", cgroup);
  }

  std::string root() const { return root_.string(); }

 private:
  static inline int counter_ = 0;
  fs::path root_;
};

TEST(ProcTableTest, ParseStatCommWithSpacesAndParens) {
  auto f = parse_stat(
      "42 (my (odd) prog) S 7 42 42 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 98765 "
      "1000 200\n");
  ASSERT_TRUE(f);
  EXPECT_EQ(f->comm, "my (odd) prog");
  EXPECT_EQ(f->ppid, 7);
  EXPECT_EQ(f->start_ticks, 98765u);
}

TEST(ProcTableTest, ParseStatRejectsTruncatedLines) {
  EXPECT_FALSE(parse_stat(""));
  EXPECT_FALSE(parse_stat("42 (x"));
  EXPECT_FALSE(parse_stat("42 (x) S 1 2 3"));
}

TEST(ProcTableTest, ReadsFakeTreeSortedByPid) {
  FakeProc proc;
  proc.add(300, "python3", 1, 5000, argv({"python3", "main.py", "--port", "8188"}));
  proc.add(20, "my (odd) prog", 1, 100, argv({"a b", "c"}), 0);
  proc.add(2, "kthreadd", 0, 0, "", 0, "", "0::/\n");  // kernel thread: no cmdline, no VmRSS
  fs::create_directories(proc.root() + "/77");         // vanished: its files are gone
  fs::create_directories(proc.root() + "/self");       // not a pid
  proc.write("88/stat", "88 (gone) S 1");              // vanished half-way through stat

  auto all = ProcTable(proc.root()).read_all();
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0].pid, 2);
  EXPECT_EQ(all[1].pid, 20);
  EXPECT_EQ(all[2].pid, 300);

  const ProcessInfo& k = all[0];
  EXPECT_EQ(k.comm, "kthreadd");
  EXPECT_EQ(k.cmdline, "");
  EXPECT_EQ(k.rss, 0u);
  EXPECT_EQ(k.cgroup.kind, CgroupIdentity::Kind::host);

  const ProcessInfo& odd = all[1];
  EXPECT_EQ(odd.comm, "my (odd) prog");
  EXPECT_EQ(odd.cmdline, "a b c");
  EXPECT_EQ(odd.uid, 0u);
  EXPECT_EQ(odd.user, "root");

  const ProcessInfo& py = all[2];
  EXPECT_EQ(py.ppid, 1);
  EXPECT_EQ(py.cmdline, "python3 main.py --port 8188");
  EXPECT_EQ(py.start_ticks, 5000u);
  EXPECT_EQ(py.rss, 2048u * KiB);
  EXPECT_EQ(py.cgroup.kind, CgroupIdentity::Kind::unit);
  EXPECT_EQ(py.cgroup.unit, "comfyui.service");
  ASSERT_TRUE(py.start_time);
  long long ticks = sysconf(_SC_CLK_TCK);
  EXPECT_EQ(py.start_time->time_since_epoch().count(), 1700000000LL * 1000 + 5000 * 1000 / ticks);
}

TEST(ProcTableTest, UnknownUidFallsBackToTheNumber) {
  FakeProc proc;
  proc.add(10, "x", 1, 1, "x", 3999999);
  auto p = read_process(proc.root(), 10);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->user, "3999999");
}

TEST(ProcTableTest, MissingProcessIsNullopt) {
  FakeProc proc;
  EXPECT_FALSE(read_process(proc.root(), 4242));
  EXPECT_FALSE(read_process(proc.root(), 0));
  EXPECT_FALSE(read_process(proc.root() + "/nonexistent", 1));
}

TEST(ProcTableTest, PidReuseIsNotAlive) {
  FakeProc proc;
  proc.add(500, "old", 1, 1111, "old");
  EXPECT_TRUE(process_alive(proc.root(), 500, 1111));
  proc.add(500, "new", 1, 2222, "new");  // the pid came back for another process
  EXPECT_FALSE(process_alive(proc.root(), 500, 1111));
  EXPECT_TRUE(process_alive(proc.root(), 500, 2222));
  EXPECT_FALSE(process_alive(proc.root(), 501, 2222));
}

TEST(ProcTableTest, MemInfo) {
  FakeProc proc;
  MemInfo m = read_meminfo(proc.root());
  ASSERT_TRUE(m.total);
  ASSERT_TRUE(m.available);
  EXPECT_EQ(*m.total, 65536000u * KiB);
  EXPECT_EQ(*m.available, 32768000u * KiB);
  EXPECT_FALSE(read_meminfo(proc.root() + "/nonexistent").total);
}

TEST(ProcTableTest, RealProcFindsOurselves) {
  auto self = read_process("/proc", getpid());
  ASSERT_TRUE(self);
  EXPECT_EQ(self->pid, getpid());
  EXPECT_EQ(self->ppid, getppid());
  // argv[0] as this test binary was started (GNU), whatever the binary is called.
  EXPECT_TRUE(self->cmdline.starts_with(program_invocation_name)) << self->cmdline;
  EXPECT_GT(self->rss, 0u);
  EXPECT_TRUE(self->start_time);
  EXPECT_TRUE(process_alive("/proc", getpid(), self->start_ticks));
  EXPECT_FALSE(process_alive("/proc", getpid(), self->start_ticks + 1));

  auto all = ProcTable().read_all();
  bool found = false;
  for (const auto& p : all) found = found || p.pid == getpid();
  EXPECT_TRUE(found);
  EXPECT_TRUE(read_meminfo().total);
}

}  // namespace
}  // namespace vramd
