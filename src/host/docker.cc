#include "host/docker.h"
#include "core/text.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <iterator>

#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

namespace vramd {
namespace {

constexpr size_t kMaxResponse = size_t{64} * 1024 * 1024;
constexpr char kContainersTarget[] = "/v1.41/containers/json?all=1";



// Decodes a chunked body. nullopt result with no error: more bytes needed.
Result<std::optional<std::string>> dechunk(std::string_view in) {
  std::string out;
  size_t pos = 0;
  while (true) {
    size_t eol = in.find("\r\n", pos);
    if (eol == std::string_view::npos) return std::optional<std::string>{};
    std::string_view size_line = in.substr(pos, eol - pos);
    size_line = trim(size_line.substr(0, size_line.find(';')));
    size_t size = 0;
    auto [ptr, ec] =
        std::from_chars(size_line.data(), size_line.data() + size_line.size(), size, 16);
    if (ec != std::errc() || ptr != size_line.data() + size_line.size()) {
      return make_error("bad chunk size line");
    }
    pos = eol + 2;
    if (size == 0) return std::optional<std::string>(std::move(out));  // trailers ignored
    if (in.size() < pos + size + 2) return std::optional<std::string>{};
    out.append(in.substr(pos, size));
    if (in.substr(pos + size, 2) != "\r\n") return make_error("chunk not followed by CRLF");
    pos += size + 2;
  }
}

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

}  // namespace

std::string short_container_id(std::string_view id) { return std::string(id.substr(0, 12)); }

Result<std::vector<ContainerNames>> parse_containers_json(std::string_view body) {
  nlohmann::json doc = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return make_error("containers/json: not JSON");
  if (!doc.is_array()) return make_error("containers/json: not a JSON array");
  std::vector<ContainerNames> out;
  for (const auto& c : doc) {
    if (!c.is_object()) continue;
    auto id = c.find("Id");
    if (id == c.end() || !id->is_string() || id->get<std::string>().empty()) continue;
    ContainerNames n;
    n.id = id->get<std::string>();
    if (auto names = c.find("Names"); names != c.end() && names->is_array()) {
      for (const auto& name : *names) {
        if (!name.is_string()) continue;
        n.name = name.get<std::string>();
        if (n.name.starts_with('/')) n.name.erase(0, 1);
        break;
      }
    }
    if (auto labels = c.find("Labels"); labels != c.end() && labels->is_object()) {
      auto label = [&](const char* key) {
        auto it = labels->find(key);
        return it != labels->end() && it->is_string() ? it->get<std::string>() : std::string();
      };
      n.compose_service = label("com.docker.compose.service");
      n.compose_project = label("com.docker.compose.project");
    }
    out.push_back(std::move(n));
  }
  return out;
}

Result<DockerHttpResponse> parse_http_response(std::string_view raw, bool at_eof) {
  DockerHttpResponse r;
  size_t head_end = raw.find("\r\n\r\n");
  if (head_end == std::string_view::npos) {
    if (at_eof) return make_error("connection closed before the end of the headers");
    return r;
  }
  std::string_view head = raw.substr(0, head_end);
  std::string_view rest = raw.substr(head_end + 4);
  size_t eol = head.find("\r\n");
  std::string_view status_line = head.substr(0, eol);
  if (!status_line.starts_with("HTTP/1.") || status_line.size() < 12) {
    return make_error("bad status line");
  }
  auto [ptr, ec] = std::from_chars(status_line.data() + 9, status_line.data() + 12, r.status);
  if (ec != std::errc() || ptr != status_line.data() + 12) return make_error("bad status code");

  std::optional<size_t> content_length;
  bool chunked = false;
  size_t pos = eol == std::string_view::npos ? head.size() : eol + 2;
  while (pos < head.size()) {
    size_t e = head.find("\r\n", pos);
    if (e == std::string_view::npos) e = head.size();
    std::string_view line = head.substr(pos, e - pos);
    pos = e + 2;
    size_t colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    std::string name = lower(trim(line.substr(0, colon)));
    std::string_view value = trim(line.substr(colon + 1));
    if (name == "content-length") {
      size_t n = 0;
      auto [p, err] = std::from_chars(value.data(), value.data() + value.size(), n);
      if (err != std::errc() || p != value.data() + value.size()) {
        return make_error("bad Content-Length");
      }
      content_length = n;
    } else if (name == "transfer-encoding") {
      chunked = lower(value).find("chunked") != std::string::npos;
    }
  }

  if (chunked) {
    auto body = dechunk(rest);
    if (!body) return make_error(body.error());
    if (!body->has_value()) {
      if (at_eof) return make_error("connection closed inside a chunked body");
      return r;
    }
    r.body = std::move(**body);
  } else if (content_length) {
    if (rest.size() < *content_length) {
      if (at_eof) return make_error("connection closed before Content-Length bytes");
      return r;
    }
    r.body = std::string(rest.substr(0, *content_length));
  } else if (at_eof || r.status == 204 || r.status == 304) {
    r.body = std::string(rest);
  } else {
    return r;
  }
  r.complete = true;
  return r;
}

Result<DockerHttpResponse> http_request_unix(const std::string& socket_path, const std::string& method, const std::string& target,
                                   std::chrono::milliseconds timeout) {
  using std::chrono::steady_clock;
  const auto deadline = steady_clock::now() + timeout;
  auto remaining_ms = [&] {
    auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - steady_clock::now());
    return static_cast<int>(std::max<long long>(0, left.count()));
  };

  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (socket_path.size() >= sizeof(addr.sun_path)) return make_error("socket path too long");
  std::memcpy(addr.sun_path, socket_path.c_str(), socket_path.size() + 1);

  Fd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (fd.get() < 0) return make_error(std::string("socket: ") + std::strerror(errno));
  timeval tv{};
  tv.tv_sec = timeout.count() / 1000;
  tv.tv_usec = (timeout.count() % 1000) * 1000;
  setsockopt(fd.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  if (connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    return make_error("connect " + socket_path + ": " + std::strerror(errno));
  }

  const std::string request = method + " " + target +
                              " HTTP/1.1\r\nHost: docker\r\nUser-Agent: vramd\r\n"
                              "Accept: application/json\r\nContent-Length: 0\r\n"
                              "Connection: close\r\n\r\n";
  for (size_t sent = 0; sent < request.size();) {
    ssize_t n = send(fd.get(), request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return make_error(std::string("send: ") + std::strerror(errno));
    }
    sent += static_cast<size_t>(n);
  }

  std::string raw;
  char buf[65536];
  while (true) {
    pollfd p{fd.get(), POLLIN, 0};
    int ready = poll(&p, 1, remaining_ms());
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) return make_error(std::string("poll: ") + std::strerror(errno));
    if (ready == 0) return make_error("timed out after " + std::to_string(timeout.count()) + " ms");
    ssize_t n = recv(fd.get(), buf, sizeof(buf), 0);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return make_error(std::string("recv: ") + std::strerror(errno));
    }
    if (n > 0) raw.append(buf, static_cast<size_t>(n));
    if (raw.size() > kMaxResponse) return make_error("response too large");
    auto r = parse_http_response(raw, /*at_eof=*/n == 0);
    if (!r) return r;
    if (r->complete) return r;
  }
}

DockerNames::DockerNames() : DockerNames(Options{}) {}

DockerNames::DockerNames(Options options) : options_(std::move(options)) {
  if (!options_.clock) options_.clock = [] { return std::chrono::steady_clock::now(); };
  if (!options_.warn) options_.warn = [](const std::string& m) { spdlog::warn("{}", m); };
}

const ContainerNames* DockerNames::find(std::string_view id) const {
  if (auto it = by_id_.find(id); it != by_id_.end()) return &it->second;
  if (id.size() < 12) return nullptr;
  auto it = by_id_.lower_bound(id);
  if (it == by_id_.end() || !it->first.starts_with(id)) return nullptr;
  auto next = std::next(it);
  if (next != by_id_.end() && next->first.starts_with(id)) return nullptr;  // ambiguous
  return &it->second;
}

void DockerNames::refresh(std::chrono::steady_clock::time_point now) {
  last_attempt_ = now;
  ++requests_;
  auto response = http_get_unix(options_.socket_path, kContainersTarget, options_.timeout);
  Result<std::vector<ContainerNames>> list = make_error("");
  if (!response) {
    list = make_error(response.error());
  } else if (response->status != 200) {
    list = make_error("HTTP " + std::to_string(response->status));
  } else {
    list = parse_containers_json(response->body);
  }
  if (!list) {
    // Keep the names we had: a stale name beats a bare id while the engine restarts.
    last_error_ = list.error();
    if (!failing_) {
      failing_ = true;
      ++warnings_;
      options_.warn("container names unavailable from " + options_.socket_path + " (" +
                    last_error_ + "); showing short ids");
    }
    return;
  }
  if (failing_) spdlog::info("container names available again from {}", options_.socket_path);
  failing_ = false;
  fetched_ = true;
  last_error_.clear();
  by_id_.clear();
  for (auto& c : *list) {
    std::string key = c.id;
    by_id_.emplace(std::move(key), std::move(c));
  }
}

std::optional<ContainerNames> DockerNames::lookup(std::string_view id) {
  if (id.empty()) return std::nullopt;
  const auto now = options_.clock();
  const auto since =
      last_attempt_ ? now - *last_attempt_ : std::chrono::steady_clock::duration::max();
  const ContainerNames* known = find(id);
  bool stale = !fetched_ ? since >= options_.unknown_retry || !last_attempt_
                         : since >= options_.refresh_interval;
  bool retry_unknown = !known && since >= options_.unknown_retry;
  if (stale || retry_unknown) {
    refresh(now);
    known = find(id);
  }
  if (!known) return std::nullopt;
  return *known;
}

void DockerNames::fill(CgroupIdentity& cgroup) {
  if (cgroup.kind != CgroupIdentity::Kind::container || cgroup.container_id.empty()) return;
  auto names = lookup(cgroup.container_id);
  if (!names) return;
  cgroup.container_name = names->name;
  cgroup.compose_service = names->compose_service;
  cgroup.compose_project = names->compose_project;
}

Result<DockerHttpResponse> http_get_unix(const std::string& socket_path, const std::string& target,
                                         std::chrono::milliseconds timeout) {
  return http_request_unix(socket_path, "GET", target, timeout);
}

}  // namespace vramd
