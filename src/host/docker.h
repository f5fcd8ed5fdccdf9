// Container names from the Docker Engine API (Podman's socket speaks the same API): the id in a
// cgroup path becomes "comfyui", with its compose service and project. Blocking, small, and
// cached: it runs off the event loop, in the host scan.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/model.h"
#include "core/result.h"

namespace vramd {

struct ContainerNames {
  std::string id;               // full id, 64 hex
  std::string name;             // first of Names, without the leading "/"
  std::string compose_service;  // label com.docker.compose.service
  std::string compose_project;  // label com.docker.compose.project
};

// The body of GET /containers/json: a JSON array of {Id, Names, Labels, ...}.
// Entries without an Id are skipped; a body that is not a JSON array is an error.
Result<std::vector<ContainerNames>> parse_containers_json(std::string_view body);

// First 12 characters: what `docker ps` shows and what callers show for an unnamed container.
std::string short_container_id(std::string_view id);

struct DockerHttpResponse {
  int status = 0;
  std::string body;       // de-chunked
  bool complete = false;  // false: more bytes are needed (and !at_eof)
};
// Parses an HTTP/1.1 response read so far. Content-Length, chunked transfer-encoding, or (at
// EOF) the rest of the stream. Errors: malformed status line or chunk, or truncated at EOF.
Result<DockerHttpResponse> parse_http_response(std::string_view raw, bool at_eof);

// GET `target` from an HTTP server on a unix socket, within `timeout` in all.
Result<DockerHttpResponse> http_get_unix(const std::string& socket_path, const std::string& target,
                                   std::chrono::milliseconds timeout);
// Any method without a body ("POST /v1.41/containers/NAME/restart").
Result<DockerHttpResponse> http_request_unix(const std::string& socket_path, const std::string& method,
                                             const std::string& target,
                                             std::chrono::milliseconds timeout);

// Not thread-safe: one scanner thread uses it.
class DockerNames {
 public:
  using Clock = std::function<std::chrono::steady_clock::time_point()>;
  struct Options {
    std::string socket_path = "/var/run/docker.sock";
    // The list is fetched again at most this often when every id asked for is known...
    std::chrono::milliseconds refresh_interval = std::chrono::seconds(30);
    // ...and at most this often when an unknown id is asked for, or after a failure.
    std::chrono::milliseconds unknown_retry = std::chrono::seconds(5);
    std::chrono::milliseconds timeout = std::chrono::seconds(2);
    Clock clock;                                   // default: steady_clock::now
    std::function<void(const std::string&)> warn;  // default: spdlog::warn
  };

  DockerNames();
  explicit DockerNames(Options options);

  // Names of the container with this full id (or a unique prefix of 12 or more). nullopt when
  // unknown or the engine is unreachable: the caller shows short_container_id(id).
  std::optional<ContainerNames> lookup(std::string_view id);
  // Fills container_name and compose_* of a container identity when its names are known.
  void fill(CgroupIdentity& cgroup);

  // Unreachable engine: one warning per outage (then quiet until it answers again).
  int warnings() const { return warnings_; }
  int requests() const { return requests_; }
  const std::string& last_error() const { return last_error_; }

 private:
  void refresh(std::chrono::steady_clock::time_point now);
  const ContainerNames* find(std::string_view id) const;

  Options options_;
  std::map<std::string, ContainerNames, std::less<>> by_id_;
  std::optional<std::chrono::steady_clock::time_point> last_attempt_;
  bool fetched_ = false;  // a list was read at least once
  bool failing_ = false;  // warned for the current outage
  int warnings_ = 0;
  int requests_ = 0;
  std::string last_error_;
};

}  // namespace vramd
