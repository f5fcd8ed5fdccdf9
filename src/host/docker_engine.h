// What vramd reads from a container engine (the Docker Engine API; Podman's socket speaks the
// same) to supervise containers: a container's state (inspect), its logs (with the 8-byte
// stream headers of a container without a TTY taken off), and the /events stream (die with its
// exit code, oom, start). Parsers of outside bytes: each answers garbage with an error
// (tests/fuzz/docker_fuzz.cc).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"

namespace vramd {

// Where the container engine's API socket may be, in the order looked at: Docker's
// (`/run/docker.sock`, `/var/run/docker.sock`), rootless Podman's
// (`$XDG_RUNTIME_DIR/podman/podman.sock`, when `xdg_runtime_dir` is not empty), rootful
// Podman's (`/run/podman/podman.sock`, which speaks the same API).
std::vector<std::string> engine_socket_candidates(const std::string& xdg_runtime_dir);
// The first of those that is a socket here; none: `/var/run/docker.sock` (so that what fails
// later names the usual place).
std::string find_engine_socket(const std::string& xdg_runtime_dir);

// GET /containers/{id}/json, the parts vramd uses.
struct ContainerInspect {
  std::string id;
  std::string name;  // without the leading "/"
  bool running = false;
  std::optional<int> exit_code;
  bool oom_killed = false;
  std::string restart_policy;  // HostConfig.RestartPolicy.Name ("no" when empty)
  int restart_max = 0;         // HostConfig.RestartPolicy.MaximumRetryCount
  int restart_count = 0;       // RestartCount
  bool tty = false;            // Config.Tty: its logs are raw, not multiplexed
};
Result<ContainerInspect> parse_container_inspect(std::string_view body);

// One object of the /events stream.
struct DockerEvent {
  std::string type;    // "container", "network", ...
  std::string action;  // "start", "die", "oom", "kill", "stop", "restart", "destroy", ...
  std::string id;      // Actor.ID
  std::string name;    // Actor.Attributes.name
  std::optional<int> exit_code;  // die: Actor.Attributes.exitCode
  int64_t time = 0;              // seconds since the epoch
};
Result<DockerEvent> parse_docker_event(std::string_view json_line);

// A chunked transfer-encoding body decoded as it arrives (the /events stream never ends).
class ChunkedDecoder {
 public:
  // Appends the body bytes that `in` completes to `out`. Error: a bad chunk header or CRLF.
  Status feed(std::string_view in, std::string& out);
  bool finished() const { return state_ == State::done; }

 private:
  enum class State { size, data, data_crlf, trailer, done };
  State state_ = State::size;
  std::string line_;
  size_t left_ = 0;
};

// The body of GET /containers/{id}/logs as lines. A container without a TTY multiplexes stdout
// and stderr in frames: [stream 0|1|2, 0, 0, 0, size (4 bytes, big-endian)] then size bytes.
class DockerLogDemux {
 public:
  explicit DockerLogDemux(bool tty) : tty_(tty) {}
  // Appends the complete lines that `in` ends. Error: a frame header that is not one.
  Status feed(std::string_view in, std::vector<std::string>& lines);
  // The last line, if it had no newline. Error: the body ended inside a frame.
  Status finish(std::vector<std::string>& lines);

 private:
  void text(std::string_view bytes, std::vector<std::string>& lines);
  bool tty_;
  std::string header_;   // a frame header read so far
  size_t frame_left_ = 0;
  std::string partial_;  // a line not yet ended
};

// The last `tail` lines of a container's output (stdout and stderr, in order), through the
// engine on `socket_path`. `until`: seconds since the epoch; 0 for now.
Result<std::vector<std::string>> container_log_lines(const std::string& socket_path,
                                                     const std::string& container, size_t tail,
                                                     int64_t until,
                                                     std::chrono::milliseconds timeout);
// "2026-12-01T15:04:05.123456789Z" (what `timestamps=1` puts before each log line) as
// nanoseconds since the epoch. nullopt: not such a timestamp.
std::optional<uint64_t> parse_docker_timestamp(std::string_view text);

// A container's output with the engine's timestamps: the last `tail` lines, or (after_ns > 0)
// every line stamped after after_ns. Each line's stamp is kept, to ask for what follows it.
// Podman 4's Docker-compatible logs stamp whole seconds only (and its `since` is whole
// seconds): a line stamped on a whole second is numbered within it (second + 0, 1, 2 ... ns) so
// that lines of one second are told apart; a `tail` that begins inside a second numbers from
// there, so the first page may repeat lines of that second once.
struct StampedLine {
  uint64_t ns = 0;
  std::string text;
};
Result<std::vector<StampedLine>> container_log_since(const std::string& socket_path,
                                                     const std::string& container, size_t tail,
                                                     uint64_t after_ns,
                                                     std::chrono::milliseconds timeout);

// GET /containers/{container}/json. nullopt: no such container (404).
Result<std::optional<ContainerInspect>> inspect_container(const std::string& socket_path,
                                                          const std::string& container,
                                                          std::chrono::milliseconds timeout);

// The engine's /events stream of container events, read on one thread; close() from another
// makes a blocked next() return.
class DockerEventStream {
 public:
  explicit DockerEventStream(std::string socket_path) : socket_path_(std::move(socket_path)) {}
  ~DockerEventStream();
  DockerEventStream(const DockerEventStream&) = delete;
  DockerEventStream& operator=(const DockerEventStream&) = delete;

  // Connects and reads the response's head. Error: unreachable, or not 200.
  Status open(std::chrono::milliseconds timeout);
  // Blocks until events arrive (returns them), or the stream ends or fails (an error).
  Result<std::vector<DockerEvent>> next();
  // Ends the stream (any thread).
  void close();

 private:
  std::string socket_path_;
  std::atomic<int> fd_{-1};
  std::atomic<bool> closed_{false};
  ChunkedDecoder chunks_;
  bool chunked_ = true;
  std::string pending_;  // body bytes not yet a whole line
};

}  // namespace vramd
