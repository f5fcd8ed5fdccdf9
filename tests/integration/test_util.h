// Helpers for integration tests: temporary directories, child processes, free ports, polling.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "test_paths.h"

namespace vramd::testing {

inline std::string build_dir() { return test_paths::build_dir(); }
inline std::string source_dir() { return test_paths::source_dir(); }

// Debian's libfaketime (to LD_PRELOAD into a daemon under test), or "" when not installed.
inline std::string libfaketime_path() {
  for (const char* p : {"/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
                        "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
                        "/usr/lib/faketime/libfaketime.so.1"})
    if (std::filesystem::exists(p)) return p;
  return "";
}

// What to LD_PRELOAD for libfaketime with the monotonic clock faked: the clockwait fix first
// (tests/fakes/faketime_fix), then libfaketime. "" when libfaketime is not installed.
inline std::string faketime_preload() {
  std::string lib = libfaketime_path();
  return lib.empty() ? "" : build_dir() + "/libfaketime-clockwait-fix.so:" + lib;
}

class TempDir {
 public:
  TempDir() {
    char t[] = "/tmp/vramd-test-XXXXXX";
    path_ = mkdtemp(t);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// A child process, killed (SIGKILL) and reaped when it goes out of scope.
class Child {
 public:
  // env entries "K=V" are added to the current environment.
  Child(const std::vector<std::string>& argv, const std::vector<std::string>& env = {},
        const std::string& output_file = "") {
    // Returns once the child runs `argv` (or failed to): its pid names that program, not a copy
    // of this test between fork and exec. The pipe closes on exec.
    int ready[2];
    if (pipe2(ready, O_CLOEXEC) != 0) ready[0] = ready[1] = -1;
    pid_ = fork();
    if (pid_ == 0) {
      if (ready[0] >= 0) close(ready[0]);
      for (const auto& e : env) putenv(const_cast<char*>(strdup(e.c_str())));
      if (!output_file.empty()) {
        FILE* f = fopen(output_file.c_str(), "w");
        if (f) {
          dup2(fileno(f), 1);
          dup2(fileno(f), 2);
        }
      }
      std::vector<char*> args;
      for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      execvp(args[0], args.data());
      _exit(127);
    }
    if (ready[1] >= 0) {
      close(ready[1]);
      char c;
      while (read(ready[0], &c, 1) < 0 && errno == EINTR) {
      }
      close(ready[0]);
    }
  }
  ~Child() { kill(SIGKILL); }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  pid_t pid() const { return pid_; }
  // Sends `sig` and reaps the child; returns its wait status (or -1 when already reaped).
  int kill(int sig = SIGTERM) {
    if (pid_ <= 0) return -1;
    ::kill(pid_, sig);
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    return status;
  }
  // Waits up to `timeout` for the child to exit by itself; its wait status, or -1 on timeout.
  int wait_exit(std::chrono::milliseconds timeout) {
    auto end = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < end) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return status;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return -1;
  }

 private:
  pid_t pid_ = -1;
};

// Polls `pred` every 20 ms until true or `timeout`. Returns its last value.
inline bool eventually(const std::function<bool()>& pred,
                       std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  auto end = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return pred();
}

int free_port();

}  // namespace vramd::testing
