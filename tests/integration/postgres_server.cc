#include "integration/postgres_server.h"

#include <fcntl.h>
#include <grp.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <stdexcept>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "integration/test_util.h"

namespace vramd::testing {

namespace fs = std::filesystem;

namespace {

constexpr uid_t kNobody = 65534;
constexpr gid_t kNogroup = 65534;

std::string& reason() {
  static std::string r;
  return r;
}

// The newest Debian PostgreSQL's bin folder (VRAMD_PG_BIN overrides); empty when none.
std::string find_bin() {
  if (const char* env = std::getenv("VRAMD_PG_BIN"); env && *env) return env;
  std::vector<fs::path> found;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/usr/lib/postgresql", ec))
    if (fs::exists(e.path() / "bin" / "postgres") && fs::exists(e.path() / "bin" / "initdb"))
      found.push_back(e.path() / "bin");
  if (found.empty()) return "";
  std::sort(found.begin(), found.end(), [](const fs::path& a, const fs::path& b) {
    return std::stoi(a.parent_path().filename().string()) <
           std::stoi(b.parent_path().filename().string());
  });
  return found.back().string();
}

std::string slurp_file(const std::string& path) {
  std::ifstream f(path);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

std::string tail(const std::string& text, size_t n = 1500) {
  return text.size() <= n ? text : text.substr(text.size() - n);
}

// Runs argv (as nobody when `as_nobody`), output to `log`; its exit status (-1: not run).
// `keep`: the process is left running and its pid returned instead (it gets SIGQUIT when this
// test process dies, so that no server outlives a killed test).
int spawn(const std::vector<std::string>& argv, bool as_nobody, const std::string& log, bool keep) {
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
      ::close(fd);
    }
    if (as_nobody) {
      if (setgroups(0, nullptr) != 0 || setgid(kNogroup) != 0 || setuid(kNobody) != 0) _exit(126);
    }
    // After the change of user: a change of credentials clears the parent-death signal.
    if (keep) prctl(PR_SET_PDEATHSIG, SIGQUIT);
    setenv("LC_ALL", "C", 1);
    setenv("HOME", "/tmp", 1);
    // The test's folder (the build folder) may be out of nobody's reach: initdb and postgres
    // refuse a working directory they cannot enter.
    if (::chdir("/tmp") != 0) _exit(125);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  if (keep) return pid;
  int status = 0;
  waitpid(pid, &status, 0);
  return status;
}

void own(const std::string& path, bool as_nobody) {
  if (!as_nobody) return;
  if (::chown(path.c_str(), kNobody, kNogroup) != 0)
    throw std::runtime_error(fmt::format("chown {}: {}", path, std::strerror(errno)));
}

std::unique_ptr<PostgresServer>& instance() {
  static std::unique_ptr<PostgresServer> s;
  return s;
}

}  // namespace

const std::string& PostgresServer::skip_reason() { return reason(); }

bool PostgresServer::installed() { return !find_bin().empty(); }

PostgresServer* PostgresServer::get() {
  static bool tried = false;
  if (!tried) {
    tried = true;
    std::unique_ptr<PostgresServer> s(new PostgresServer());
    std::string why;
    if (s->init(why)) {
      instance() = std::move(s);
    } else {
      reason() = "PostgreSQL cannot start here: " + why;
    }
  }
  return instance().get();
}

bool PostgresServer::init(std::string& why) {
  bin_ = find_bin();
  if (bin_.empty()) {
    why = "no /usr/lib/postgresql/*/bin/postgres (install Debian's postgresql: make deps)";
    return false;
  }
  as_nobody_ = ::geteuid() == 0;
  try {
    // One template cluster per build folder (initdb takes a second or two), copied for each test
    // process: every process has its own server, data and port. Under /tmp, not the build
    // folder: `nobody` must reach it, and a clone in /root (mode 0700) is out of its reach.
    std::string base = fmt::format("/tmp/vramd-pgtest-{}-{:016x}", ::geteuid(),
                                   std::hash<std::string>{}(build_dir()));
    fs::create_directories(base);
    fs::permissions(base, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                              fs::perms::others_read | fs::perms::others_exec,
                    fs::perm_options::replace);
    std::string tmpl = base + "/template";
    {
      int lock = ::open((base + "/template.lock").c_str(), O_RDWR | O_CREAT, 0644);
      if (lock < 0 || flock(lock, LOCK_EX) != 0) throw std::runtime_error("cannot lock the template");
      if (!fs::exists(tmpl + "/PG_VERSION") || !fs::exists(base + "/template.done")) {
        fs::remove_all(tmpl);
        fs::create_directories(tmpl);
        own(tmpl, as_nobody_);
        std::string log = base + "/initdb.log";
        fs::remove(log);
        int st = spawn({bin_ + "/initdb", "-D", tmpl, "-U", "vramd", "--auth=trust", "-E", "UTF8",
                        "--no-sync", "--no-instructions"},
                       as_nobody_, log, false);
        if (st != 0) {
          ::close(lock);
          why = "initdb failed: " + tail(slurp_file(log));
          return false;
        }
        std::ofstream(base + "/template.done") << "ok\n";
      }
      ::close(lock);
    }
    // What a test process killed before its exit left behind (its server died with it).
    for (const auto& e : fs::directory_iterator(base)) {
      std::string name = e.path().filename().string();
      if (name.rfind("run-", 0) != 0) continue;
      int pid = std::atoi(name.c_str() + 4);
      if (pid > 0 && ::kill(pid, 0) != 0 && errno == ESRCH) fs::remove_all(e.path());
    }
    char root[] = "/tmp/vramd-pg-XXXXXX";  // short: the socket's path must fit in sun_path
    if (!mkdtemp(root)) throw std::runtime_error("mkdtemp failed");
    socket_dir_ = root;
    own(socket_dir_, as_nobody_);
    root_ = fmt::format("{}/run-{}", base, ::getpid());
    fs::remove_all(root_);
    fs::create_directories(root_);
    data_ = root_ + "/data";
    fs::copy(tmpl, data_, fs::copy_options::recursive);
    if (as_nobody_) {
      own(root_, true);
      for (const auto& e : fs::recursive_directory_iterator(data_)) own(e.path().string(), true);
      own(data_, true);
    }
    fs::permissions(data_, fs::perms::owner_all, fs::perm_options::replace);
    log_ = root_ + "/postgres.log";
    port_ = free_port();
  } catch (const std::exception& e) {
    why = e.what();
    return false;
  }
  if (!start()) {
    why = "postgres did not start: " + tail(slurp_file(log_));
    return false;
  }
  return true;
}

bool PostgresServer::start() {
  if (pid_ > 0) return true;
  // fsync off: a test's server need not survive a power cut, and it saves seconds.
  pid_ = spawn({bin_ + "/postgres", "-D", data_, "-k", socket_dir_, "-h", "127.0.0.1", "-p",
                std::to_string(port_), "-F", "-c", "max_connections=200", "-c",
                "shared_buffers=16MB", "-c", "log_min_messages=warning"},
               as_nobody_, log_, true);
  std::string why;
  if (pid_ <= 0 || !wait_ready(why)) {
    if (pid_ > 0) {
      ::kill(pid_, SIGQUIT);
      waitpid(pid_, nullptr, 0);
    }
    pid_ = -1;
    return false;
  }
  return true;
}

bool PostgresServer::wait_ready(std::string& why) const {
  std::string isready = bin_ + "/pg_isready";
  for (int i = 0; i < 300; ++i) {  // 30 s at most
    int st = 0;
    if (waitpid(pid_, &st, WNOHANG) == pid_) {
      why = "postgres exited";
      return false;
    }
    std::string cmd = fmt::format("{} -q -h 127.0.0.1 -p {} -U vramd -d postgres", isready, port_);
    if (std::system(cmd.c_str()) == 0) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  why = "not ready in 30 s";
  return false;
}

bool PostgresServer::stop() {
  if (pid_ <= 0) return true;
  ::kill(pid_, SIGINT);  // fast shutdown: clients are cut off, committed data kept
  int st = 0;
  waitpid(pid_, &st, 0);
  pid_ = -1;
  return true;
}

PostgresServer::~PostgresServer() {
  stop();
  std::error_code ec;
  fs::remove_all(root_, ec);
  fs::remove_all(socket_dir_, ec);
}

std::string PostgresServer::url(const std::string& db) const {
  return fmt::format("postgresql://vramd@127.0.0.1:{}/{}", port_, db);
}

std::string PostgresServer::create_database(const std::string& prefix) {
  std::string name = fmt::format("{}_{}", prefix, ++databases_);
  psql("postgres", fmt::format("CREATE DATABASE {}", name));
  return name;
}

std::string PostgresServer::psql(const std::string& db, const std::string& sql) const {
  std::string file = root_ + "/psql.out";
  // The statement goes in a file, not through the shell: `$$`, quotes and backslashes stay.
  std::string script = root_ + "/psql.sql";
  {
    std::ofstream out(script, std::ios::trunc);
    out << sql << "\n";
  }
  std::string cmd = fmt::format(
      "{}/psql -X -q -A -t -v ON_ERROR_STOP=1 -h 127.0.0.1 -p {} -U vramd -d {} -f {} >{} 2>&1",
      bin_, port_, db, script, file);
  int st = std::system(cmd.c_str());
  std::string out = slurp_file(file);
  if (st != 0) throw std::runtime_error(fmt::format("psql {}: {}", sql, out));
  while (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

}  // namespace vramd::testing
