#include "host/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <csignal>

#include <cerrno>
#include <chrono>
#include <cstring>

namespace vramd {

ProcessOutput run_process(const std::vector<std::string>& argv, Duration timeout) {
  ProcessOutput result;
  if (argv.empty()) {
    result.spawn_error = "no command";
    return result;
  }
  int out_pipe[2], err_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0) {
    result.spawn_error = std::string("pipe: ") + std::strerror(errno);
    return result;
  }
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) {
    result.spawn_error = std::string("pipe: ") + std::strerror(errno);
    ::close(out_pipe[0]);
    ::close(out_pipe[1]);
    return result;
  }
  // Everything the child needs is prepared before fork: after it only async-signal-safe calls.
  std::vector<char*> args;
  args.reserve(argv.size() + 1);
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(out_pipe[1], STDOUT_FILENO);
    ::dup2(err_pipe[1], STDERR_FILENO);
    int devnull = ::open("/dev/null", O_RDONLY);
    if (devnull >= 0) ::dup2(devnull, STDIN_FILENO);
    if (::syscall(SYS_close_range, 3u, ~0u, 0u) != 0)  // none of vramd's sockets and files
      for (int fd = 3; fd < 65536; ++fd) ::close(fd);
    ::execvp(args[0], args.data());
    static const char kMsg[] = "exec failed\n";
    ssize_t ignored = ::write(STDERR_FILENO, kMsg, sizeof kMsg - 1);
    (void)ignored;
    ::_exit(127);
  }
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  if (pid < 0) {
    result.spawn_error = std::string("fork: ") + std::strerror(errno);
    ::close(out_pipe[0]);
    ::close(err_pipe[0]);
    return result;
  }
  auto deadline = std::chrono::steady_clock::now() + timeout;
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  int open_fds = 2;
  char buffer[4096];
  while (open_fds > 0) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      result.timed_out = true;
      ::kill(pid, SIGKILL);
      break;
    }
    int n = ::poll(fds, 2, static_cast<int>(left.count()));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      ssize_t got = ::read(fds[i].fd, buffer, sizeof buffer);
      if (got > 0) {
        (i == 0 ? result.out : result.err).append(buffer, static_cast<std::size_t>(got));
      } else if (got == 0 || (errno != EINTR && errno != EAGAIN)) {
        ::close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      }
    }
  }
  for (pollfd& f : fds) {
    if (f.fd >= 0) ::close(f.fd);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  // The child's own word that exec failed (status 127 alone could be the tool's).
  if (!result.timed_out && result.exit_code == 127 && result.err == "exec failed\n")
    result.spawn_error = "cannot run it (not found, or not executable)";
  return result;
}

}  // namespace vramd
