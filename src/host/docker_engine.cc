#include "host/docker_engine.h"

#include <poll.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstring>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/text.h"
#include "host/docker.h"

namespace vramd {

std::vector<std::string> engine_socket_candidates(const std::string& xdg_runtime_dir) {
  std::vector<std::string> out = {"/run/docker.sock", "/var/run/docker.sock"};
  if (!xdg_runtime_dir.empty()) out.push_back(xdg_runtime_dir + "/podman/podman.sock");
  out.emplace_back("/run/podman/podman.sock");
  return out;
}

std::string find_engine_socket(const std::string& xdg_runtime_dir) {
  for (const auto& path : engine_socket_candidates(xdg_runtime_dir)) {
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode)) return path;
  }
  return "/var/run/docker.sock";
}

namespace {

using nlohmann::json;

constexpr size_t kMaxLine = 1 << 20;     // an event or chunk-size line longer than this: garbage
constexpr size_t kMaxFrame = 16u << 20;  // one log frame

std::string str(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

std::optional<int> parse_int(std::string_view s) {
  int v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
  return v;
}

// Query-string escape of the few characters a container name or filter uses.
std::string escape(std::string_view s) {
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~')
      out += static_cast<char>(c);
    else
      out += fmt::format("%{:02X}", c);
  }
  return out;
}

}  // namespace

Result<ContainerInspect> parse_container_inspect(std::string_view body) {
  json doc = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) return make_error("container inspect: not a JSON object");
  ContainerInspect c;
  c.id = str(doc, "Id");
  if (c.id.empty()) return make_error("container inspect: no Id");
  c.name = str(doc, "Name");
  if (c.name.starts_with('/')) c.name.erase(0, 1);
  if (auto s = doc.find("State"); s != doc.end() && s->is_object()) {
    if (auto r = s->find("Running"); r != s->end() && r->is_boolean()) c.running = r->get<bool>();
    if (auto e = s->find("ExitCode"); e != s->end() && e->is_number_integer())
      c.exit_code = e->get<int>();
    if (auto o = s->find("OOMKilled"); o != s->end() && o->is_boolean()) c.oom_killed = o->get<bool>();
  }
  if (auto h = doc.find("HostConfig"); h != doc.end() && h->is_object())
    if (auto p = h->find("RestartPolicy"); p != h->end() && p->is_object()) {
      c.restart_policy = str(*p, "Name");
      if (auto m = p->find("MaximumRetryCount"); m != p->end() && m->is_number_integer())
        c.restart_max = m->get<int>();
    }
  if (auto n = doc.find("RestartCount"); n != doc.end() && n->is_number_integer())
    c.restart_count = n->get<int>();
  if (c.restart_policy.empty()) c.restart_policy = "no";
  if (auto cfg = doc.find("Config"); cfg != doc.end() && cfg->is_object())
    if (auto t = cfg->find("Tty"); t != cfg->end() && t->is_boolean()) c.tty = t->get<bool>();
  return c;
}

Result<DockerEvent> parse_docker_event(std::string_view line) {
  json doc = json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) return make_error("event: not a JSON object");
  DockerEvent e;
  e.type = str(doc, "Type");
  e.action = str(doc, "Action");
  if (e.action.empty()) e.action = str(doc, "status");  // before API 1.22
  // "exec_start: sh -c ...", "health_status: healthy": the verb is before the colon.
  if (auto colon = e.action.find(':'); colon != std::string::npos) e.action.resize(colon);
  if (auto a = doc.find("Actor"); a != doc.end() && a->is_object()) {
    e.id = str(*a, "ID");
    if (auto attrs = a->find("Attributes"); attrs != a->end() && attrs->is_object()) {
      e.name = str(*attrs, "name");
      std::string code = str(*attrs, "exitCode");
      if (!code.empty()) e.exit_code = parse_int(code);
    }
  }
  if (e.id.empty()) e.id = str(doc, "id");
  if (auto t = doc.find("time"); t != doc.end() && t->is_number_integer()) e.time = t->get<int64_t>();
  if (e.type.empty() || e.action.empty()) return make_error("event: no Type or Action");
  return e;
}

Status ChunkedDecoder::feed(std::string_view in, std::string& out) {
  size_t i = 0;
  while (i < in.size() && state_ != State::done) {
    switch (state_) {
      case State::size:
      case State::trailer: {
        size_t eol = in.find('\n', i);
        std::string_view part = in.substr(i, eol == std::string_view::npos ? in.size() - i : eol - i);
        if (line_.size() + part.size() > kMaxLine) return make_error("chunk header too long");
        line_.append(part);
        if (eol == std::string_view::npos) return Ok{};
        i = eol + 1;
        if (!line_.empty() && line_.back() == '\r') line_.pop_back();
        if (state_ == State::trailer) {
          if (line_.empty()) state_ = State::done;  // trailers are ignored
          line_.clear();
          break;
        }
        std::string_view size_text = trim(std::string_view(line_).substr(0, line_.find(';')));
        size_t size = 0;
        auto [p, ec] =
            std::from_chars(size_text.data(), size_text.data() + size_text.size(), size, 16);
        if (size_text.empty() || ec != std::errc() || p != size_text.data() + size_text.size())
          return make_error("bad chunk size line");
        line_.clear();
        left_ = size;
        state_ = size == 0 ? State::trailer : State::data;
        break;
      }
      case State::data: {
        size_t n = std::min(left_, in.size() - i);
        out.append(in.substr(i, n));
        i += n;
        left_ -= n;
        if (left_ == 0) state_ = State::data_crlf;
        break;
      }
      case State::data_crlf: {
        line_ += in[i++];
        if (line_ == "\r") break;
        if (line_ != "\r\n" && line_ != "\n") return make_error("chunk not followed by CRLF");
        line_.clear();
        state_ = State::size;
        break;
      }
      case State::done:
        break;
    }
  }
  return Ok{};
}

void DockerLogDemux::text(std::string_view bytes, std::vector<std::string>& lines) {
  size_t start = 0;
  while (true) {
    size_t nl = bytes.find('\n', start);
    if (nl == std::string_view::npos) {
      partial_.append(bytes.substr(start));
      if (partial_.size() > kMaxLine) {  // a line without end: cut it, keep the output coming
        lines.push_back(std::move(partial_));
        partial_.clear();
      }
      return;
    }
    partial_.append(bytes.substr(start, nl - start));
    if (!partial_.empty() && partial_.back() == '\r') partial_.pop_back();
    lines.push_back(std::move(partial_));
    partial_.clear();
    start = nl + 1;
  }
}

Status DockerLogDemux::feed(std::string_view in, std::vector<std::string>& lines) {
  if (tty_) {
    text(in, lines);
    return Ok{};
  }
  size_t i = 0;
  while (i < in.size()) {
    if (frame_left_ > 0) {
      size_t n = std::min(frame_left_, in.size() - i);
      text(in.substr(i, n), lines);
      i += n;
      frame_left_ -= n;
      continue;
    }
    size_t n = std::min<size_t>(8 - header_.size(), in.size() - i);
    header_.append(in.substr(i, n));
    i += n;
    if (header_.size() < 8) break;
    auto b = [&](int k) { return static_cast<unsigned char>(header_[k]); };
    if (b(0) > 2 || b(1) != 0 || b(2) != 0 || b(3) != 0)
      return make_error(fmt::format("bad log frame header (stream byte {})", b(0)));
    size_t size = (size_t{b(4)} << 24) | (size_t{b(5)} << 16) | (size_t{b(6)} << 8) | b(7);
    if (size > kMaxFrame) return make_error("log frame too large");
    header_.clear();
    frame_left_ = size;
  }
  return Ok{};
}

Status DockerLogDemux::finish(std::vector<std::string>& lines) {
  if (!partial_.empty()) {
    lines.push_back(std::move(partial_));
    partial_.clear();
  }
  if (!tty_ && (frame_left_ > 0 || !header_.empty()))
    return make_error("logs ended inside a frame");
  return Ok{};
}

std::optional<uint64_t> parse_docker_timestamp(std::string_view t) {
  // YYYY-MM-DDTHH:MM:SS[.fraction]Z
  if (t.size() < 20 || t[4] != '-' || t[7] != '-' || t[10] != 'T' || t[13] != ':' ||
      t[16] != ':' || t.back() != 'Z')
    return std::nullopt;
  auto num = [&](size_t at, size_t n) -> std::optional<int> { return parse_int(t.substr(at, n)); };
  auto y = num(0, 4), mo = num(5, 2), d = num(8, 2), h = num(11, 2), mi = num(14, 2), s = num(17, 2);
  if (!y || !mo || !d || !h || !mi || !s || *mo < 1 || *mo > 12 || *d < 1 || *d > 31 || *h > 23 ||
      *mi > 59 || *s > 60 || *y < 1970)
    return std::nullopt;
  uint64_t frac = 0;
  std::string_view rest = t.substr(19, t.size() - 20);
  if (!rest.empty()) {
    if (rest[0] != '.' || rest.size() < 2 || rest.size() > 10) return std::nullopt;
    std::string digits(rest.substr(1));
    if (digits.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
    digits.resize(9, '0');
    frac = std::stoull(digits);
  }
  // Days from the civil date (Howard Hinnant's algorithm).
  int yy = *y - (*mo <= 2);
  int era = yy / 400;
  int yoe = yy - era * 400;
  int mp = (*mo + 9) % 12;
  int doy = (153 * mp + 2) / 5 + *d - 1;
  int doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  int64_t days = static_cast<int64_t>(era) * 146097 + doe - 719468;
  int64_t secs = days * 86400 + int64_t{*h} * 3600 + int64_t{*mi} * 60 + *s;
  return static_cast<uint64_t>(secs) * 1'000'000'000ull + frac;
}

namespace {

// GET /containers/ID/logs?stdout=1&stderr=1QUERY, its lines out of the stream headers (none
// when the container has a TTY: its inspect tells).
Result<std::vector<std::string>> fetch_log_lines(const std::string& socket_path,
                                                 const std::string& container,
                                                 const std::string& query,
                                                 std::chrono::milliseconds timeout) {
  auto inspected = inspect_container(socket_path, container, timeout);
  if (!inspected) return make_error(inspected.error());
  if (!*inspected) return make_error("no container " + container);
  auto r = http_request_unix(
      socket_path, "GET",
      fmt::format("/v1.41/containers/{}/logs?stdout=1&stderr=1{}", escape(container), query),
      timeout);
  if (!r) return make_error(r.error());
  if (r->status != 200) return make_error(fmt::format("logs {}: HTTP {}", container, r->status));
  std::vector<std::string> lines;
  DockerLogDemux demux((*inspected)->tty);
  if (auto s = demux.feed(r->body, lines); !s) return make_error(s.error());
  if (auto s = demux.finish(lines); !s) return make_error(s.error());
  return lines;
}

}  // namespace

Result<std::vector<StampedLine>> container_log_since(const std::string& socket_path,
                                                     const std::string& container, size_t tail,
                                                     uint64_t after_ns,
                                                     std::chrono::milliseconds timeout) {
  constexpr uint64_t kSecond = 1'000'000'000ull;
  std::string query = "&timestamps=1";
  if (after_ns > 0) {
    // From the start of its second (`since` includes its moment; Podman reads whole seconds):
    // what is not after after_ns is left out below.
    query += fmt::format("&since={}", after_ns / kSecond);
  } else {
    query += fmt::format("&tail={}", tail);
  }
  auto fetched = fetch_log_lines(socket_path, container, query, timeout);
  if (!fetched) return make_error(fetched.error());
  std::vector<std::string>& lines = *fetched;
  std::vector<StampedLine> out;
  uint64_t second = 0, nth = 0;  // lines so far stamped on the whole second `second`
  for (auto& l : lines) {
    size_t space = l.find(' ');
    auto ns = parse_docker_timestamp(std::string_view(l).substr(0, space));
    if (!ns) {  // a line the engine did not stamp: keep it, stamped as the one before
      out.push_back({out.empty() ? after_ns : out.back().ns, std::move(l)});
      continue;
    }
    uint64_t stamp = *ns;
    if (stamp % kSecond == 0) {  // whole seconds (Podman 4): numbered within the second
      nth = stamp == second ? nth + 1 : 0;
      second = stamp;
      stamp += nth;
    }
    if (after_ns > 0 && stamp <= after_ns) continue;  // read already
    out.push_back({stamp, space == std::string::npos ? std::string() : l.substr(space + 1)});
  }
  return out;
}

Result<std::optional<ContainerInspect>> inspect_container(const std::string& socket_path,
                                                          const std::string& container,
                                                          std::chrono::milliseconds timeout) {
  auto r = http_request_unix(socket_path, "GET",
                             fmt::format("/v1.41/containers/{}/json", escape(container)), timeout);
  if (!r) return make_error(r.error());
  if (r->status == 404) return std::optional<ContainerInspect>{};
  if (r->status != 200) return make_error(fmt::format("inspect {}: HTTP {}", container, r->status));
  auto c = parse_container_inspect(r->body);
  if (!c) return make_error(c.error());
  return std::optional<ContainerInspect>(std::move(*c));
}

Result<std::vector<std::string>> container_log_lines(const std::string& socket_path,
                                                     const std::string& container, size_t tail,
                                                     int64_t until,
                                                     std::chrono::milliseconds timeout) {
  std::string query = fmt::format("&tail={}", tail);
  if (until > 0) query += fmt::format("&until={}", until);
  return fetch_log_lines(socket_path, container, query, timeout);
}

DockerEventStream::~DockerEventStream() {
  int fd = fd_.exchange(-1);
  if (fd >= 0) ::close(fd);
}

void DockerEventStream::close() {
  closed_ = true;
  int fd = fd_.load();
  if (fd >= 0) ::shutdown(fd, SHUT_RDWR);  // wakes a poll() in next(); the owner closes it
}

Status DockerEventStream::open(std::chrono::milliseconds timeout) {
  if (int old = fd_.exchange(-1); old >= 0) ::close(old);
  chunks_ = ChunkedDecoder{};
  pending_.clear();
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (socket_path_.size() >= sizeof(addr.sun_path)) return make_error("socket path too long");
  std::memcpy(addr.sun_path, socket_path_.c_str(), socket_path_.size() + 1);
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return make_error(std::string("socket: ") + std::strerror(errno));
  fd_ = fd;
  if (closed_) return make_error("closed");
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0)
    return make_error("connect " + socket_path_ + ": " + std::strerror(errno));
  const std::string request =
      "GET /v1.41/events?filters=" + escape(R"({"type":["container"]})") +
      " HTTP/1.1\r\nHost: docker\r\nUser-Agent: vramd\r\nAccept: application/json\r\n\r\n";
  if (::send(fd, request.data(), request.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(request.size()))
    return make_error(std::string("send: ") + std::strerror(errno));
  // The head, within `timeout`; what follows it is the first of the body.
  std::string head;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  char buf[4096];
  while (head.find("\r\n\r\n") == std::string::npos) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    pollfd p{fd, POLLIN, 0};
    int ready = ::poll(&p, 1, static_cast<int>(std::max<long long>(0, left.count())));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) return make_error("events: no answer within " + std::to_string(timeout.count()) + " ms");
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return make_error("events: connection closed before the response's head");
    head.append(buf, static_cast<size_t>(n));
    if (head.size() > kMaxLine) return make_error("events: response head too long");
  }
  size_t end = head.find("\r\n\r\n");
  std::string rest = head.substr(end + 4);
  head.resize(end);
  if (!head.starts_with("HTTP/1.") || head.size() < 12) return make_error("events: bad status line");
  auto status = parse_int(std::string_view(head).substr(9, 3));
  if (!status) return make_error("events: bad status line");
  if (*status != 200) return make_error(fmt::format("events: HTTP {}", *status));
  chunked_ = lower(head).find("transfer-encoding: chunked") != std::string::npos;
  if (!rest.empty()) {
    std::string body;
    if (chunked_) {
      if (auto s = chunks_.feed(rest, body); !s) return make_error("events: " + s.error());
    } else {
      body = std::move(rest);
    }
    pending_ += body;
  }
  return Ok{};
}

Result<std::vector<DockerEvent>> DockerEventStream::next() {
  std::vector<DockerEvent> out;
  char buf[16384];
  while (true) {
    // Whole lines first: the events a read completed.
    size_t start = 0;
    for (size_t nl; (nl = pending_.find('\n', start)) != std::string::npos; start = nl + 1) {
      std::string_view line = trim(std::string_view(pending_).substr(start, nl - start));
      if (line.empty()) continue;
      auto e = parse_docker_event(line);
      if (!e) return make_error(e.error());
      out.push_back(std::move(*e));
    }
    pending_.erase(0, start);
    if (pending_.size() > kMaxLine) return make_error("events: a line too long");
    if (!out.empty()) return out;
    if (closed_) return make_error("closed");
    int fd = fd_.load();
    if (fd < 0) return make_error("not open");
    pollfd p{fd, POLLIN, 0};
    int ready = ::poll(&p, 1, -1);
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) return make_error(std::string("poll: ") + std::strerror(errno));
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (closed_) return make_error("closed");
    if (n < 0) return make_error(std::string("recv: ") + std::strerror(errno));
    if (n == 0) return make_error("the engine closed the events stream");
    std::string body;
    if (chunked_) {
      if (auto s = chunks_.feed(std::string_view(buf, static_cast<size_t>(n)), body); !s)
        return make_error("events: " + s.error());
      if (chunks_.finished()) return make_error("the engine ended the events stream");
    } else {
      body.assign(buf, static_cast<size_t>(n));
    }
    pending_ += body;
  }
}

}  // namespace vramd
