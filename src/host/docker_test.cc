#include "host/docker.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>
#include "test_paths.h"

namespace vramd {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

constexpr char kComfyId[] = "a41c0d5e27b8f39e6c15d7a0b2e48f913c6d7e2a5b8f04c1d9e3a7b6c2f5d8e1";
constexpr char kOllamaId[] = "b7e2f4a6c8d0e2f4a6b8c0d2e4f6a8b0c2d4e6f8a0b2c4d6e8f0a2b4c6d8e0f2";
constexpr char kUnknownId[] = "ffffeeeeddddccccbbbbaaaa9999888877776666555544443333222211110000";

std::string fixture() {
  std::ifstream in(vramd::test_paths::source_dir() +
                   "/tests/fixtures/docker/containers-json-compose.json");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A Docker Engine on a unix socket in a temp dir, answering GET /v1.41/containers/json with
// `body` and counting the requests it saw.
class FakeEngine {
 public:
  FakeEngine(std::string body, bool chunked, int status = 200)
      : body_(std::move(body)), chunked_(chunked), status_(status) {
    dir_ = fs::temp_directory_path() /
           ("vramd-docker-" + std::to_string(getpid()) + "-" + std::to_string(counter_++));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    path_ = (dir_ / "docker.sock").string();
    fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path_.c_str(), sizeof(addr.sun_path) - 1);
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    EXPECT_EQ(listen(fd_, 8), 0);
    thread_ = std::thread([this] { serve(); });
  }
  ~FakeEngine() {
    stop_ = true;
    thread_.join();
    close(fd_);
    fs::remove_all(dir_);
  }
  const std::string& path() const { return path_; }
  int requests() const { return requests_; }
  std::string last_request_line() {
    std::lock_guard<std::mutex> lock(mu_);
    return last_request_line_;
  }

 private:
  void serve() {
    while (!stop_) {
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, 20) <= 0) continue;
      int c = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) continue;
      std::string req;
      char buf[4096];
      while (req.find("\r\n\r\n") == std::string::npos) {
        ssize_t n = recv(c, buf, sizeof(buf), 0);
        if (n <= 0) break;
        req.append(buf, static_cast<size_t>(n));
      }
      std::string line = req.substr(0, req.find("\r\n"));
      {
        std::lock_guard<std::mutex> lock(mu_);
        last_request_line_ = line;
      }
      ++requests_;
      std::string resp;
      bool host_ok = req.find("\r\nHost: docker\r\n") != std::string::npos;
      if (line != "GET /v1.41/containers/json?all=1 HTTP/1.1" || !host_ok) {
        resp = "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n";
      } else if (status_ != 200) {
        resp = "HTTP/1.1 " + std::to_string(status_) + " Oops\r\nContent-Length: 0\r\n\r\n";
      } else if (chunked_) {
        resp =
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            "Transfer-Encoding: chunked\r\n\r\n";
        // Odd-sized chunks so that chunk edges fall mid-token.
        for (size_t pos = 0; pos < body_.size(); pos += 777) {
          std::string part = body_.substr(pos, 777);
          std::ostringstream size;
          size << std::hex << part.size();
          resp += size.str() + "\r\n" + part + "\r\n";
        }
        resp += "0\r\n\r\n";
      } else {
        resp = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " +
               std::to_string(body_.size()) + "\r\n\r\n" + body_;
      }
      for (size_t sent = 0; sent < resp.size();) {
        ssize_t n = send(c, resp.data() + sent, resp.size() - sent, MSG_NOSIGNAL);
        if (n <= 0) break;
        sent += static_cast<size_t>(n);
      }
      close(c);
    }
  }

  static inline int counter_ = 0;
  std::string body_;
  bool chunked_;
  int status_;
  fs::path dir_;
  std::string path_;
  int fd_ = -1;
  std::atomic<bool> stop_{false};
  std::atomic<int> requests_{0};
  std::mutex mu_;
  std::string last_request_line_;
  std::thread thread_;
};

// A clock the test moves by hand, and a warning sink that records.
struct Harness {
  std::chrono::steady_clock::time_point now{std::chrono::hours(1000)};
  std::vector<std::string> warnings;
  DockerNames::Options options(const std::string& socket) {
    DockerNames::Options o;
    o.socket_path = socket;
    o.refresh_interval = 30s;
    o.unknown_retry = 5s;
    o.clock = [this] { return now; };
    o.warn = [this](const std::string& m) { warnings.push_back(m); };
    return o;
  }
};

TEST(DockerTest, ParsesContainersJsonFixture) {
  auto list = parse_containers_json(fixture());
  ASSERT_TRUE(list) << list.error();
  ASSERT_EQ(list->size(), 3u);  // the entry without an Id is skipped
  EXPECT_EQ((*list)[0].id, kComfyId);
  EXPECT_EQ((*list)[0].name, "genai_comfyui_1");
  EXPECT_EQ((*list)[0].compose_service, "comfyui");
  EXPECT_EQ((*list)[0].compose_project, "genai");
  EXPECT_EQ((*list)[1].name, "ollama");  // the first name, not the link alias
  EXPECT_EQ((*list)[1].compose_service, "");
  EXPECT_EQ((*list)[2].name, "vllm-old");  // Labels: null
}

TEST(DockerTest, ParseRejectsNonArrays) {
  EXPECT_FALSE(parse_containers_json("{\"message\":\"page not found\"}"));
  EXPECT_FALSE(parse_containers_json("not json"));
  EXPECT_FALSE(parse_containers_json(""));
  auto empty = parse_containers_json("[]");
  ASSERT_TRUE(empty);
  EXPECT_TRUE(empty->empty());
}

TEST(DockerTest, ShortId) { EXPECT_EQ(short_container_id(kComfyId), "a41c0d5e27b8"); }

TEST(DockerTest, HttpContentLength) {
  auto r = parse_http_response("HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello", false);
  ASSERT_TRUE(r);
  EXPECT_TRUE(r->complete);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "hello");
  auto partial = parse_http_response("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhel", false);
  ASSERT_TRUE(partial);
  EXPECT_FALSE(partial->complete);
  EXPECT_FALSE(parse_http_response("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhel", true));
}

TEST(DockerTest, HttpChunked) {
  std::string raw =
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4;ext=1\r\nWiki\r\n5\r\npedia\r\n"
      "0\r\n\r\n";
  auto r = parse_http_response(raw, false);
  ASSERT_TRUE(r);
  EXPECT_TRUE(r->complete);
  EXPECT_EQ(r->body, "Wikipedia");
  auto partial = parse_http_response(raw.substr(0, raw.size() - 7), false);
  ASSERT_TRUE(partial);
  EXPECT_FALSE(partial->complete);
  EXPECT_FALSE(parse_http_response(
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nWiki\r\n", false));
}

TEST(DockerTest, HttpBodyUntilEofAndBadStatus) {
  auto r = parse_http_response("HTTP/1.0 200 OK\r\n\r\n[1]", true);
  ASSERT_TRUE(r);
  EXPECT_TRUE(r->complete);
  EXPECT_EQ(r->body, "[1]");
  EXPECT_FALSE(parse_http_response("SSH-2.0-OpenSSH\r\n\r\n", false));
}

TEST(DockerTest, ResolvesNamesFromFakeEngine) {
  FakeEngine engine(fixture(), /*chunked=*/false);
  Harness h;
  DockerNames names(h.options(engine.path()));
  auto comfy = names.lookup(kComfyId);
  ASSERT_TRUE(comfy) << names.last_error();
  EXPECT_EQ(comfy->name, "genai_comfyui_1");
  EXPECT_EQ(comfy->compose_service, "comfyui");
  EXPECT_EQ(engine.last_request_line(), "GET /v1.41/containers/json?all=1 HTTP/1.1");

  CgroupIdentity cg;
  cg.kind = CgroupIdentity::Kind::container;
  cg.container_id = kOllamaId;
  names.fill(cg);
  EXPECT_EQ(cg.container_name, "ollama");
  EXPECT_TRUE(h.warnings.empty());
}

TEST(DockerTest, ResolvesNamesFromChunkedResponse) {
  FakeEngine engine(fixture(), /*chunked=*/true);
  Harness h;
  DockerNames names(h.options(engine.path()));
  auto comfy = names.lookup(kComfyId);
  ASSERT_TRUE(comfy) << names.last_error();
  EXPECT_EQ(comfy->compose_project, "genai");
}

TEST(DockerTest, CachesAndRateLimitsRefreshes) {
  FakeEngine engine(fixture(), /*chunked=*/false);
  Harness h;
  DockerNames names(h.options(engine.path()));
  ASSERT_TRUE(names.lookup(kComfyId));
  ASSERT_TRUE(names.lookup(kOllamaId));
  ASSERT_TRUE(names.lookup(kComfyId));
  EXPECT_EQ(engine.requests(), 1);

  h.now += 1s;
  EXPECT_FALSE(names.lookup(kUnknownId));  // inside unknown_retry of the last fetch: no request
  EXPECT_EQ(engine.requests(), 1);
  h.now += 5s;
  EXPECT_FALSE(names.lookup(kUnknownId));  // an unknown id may refresh now...
  EXPECT_EQ(engine.requests(), 2);
  EXPECT_FALSE(names.lookup(kUnknownId));  // ...but not again at once
  EXPECT_EQ(engine.requests(), 2);

  h.now += 10s;
  ASSERT_TRUE(names.lookup(kComfyId));  // known and fresh enough
  EXPECT_EQ(engine.requests(), 2);
  h.now += 30s;
  ASSERT_TRUE(names.lookup(kComfyId));  // known but older than refresh_interval
  EXPECT_EQ(engine.requests(), 3);
  EXPECT_EQ(names.requests(), 3);
}

TEST(DockerTest, PrefixLookup) {
  FakeEngine engine(fixture(), /*chunked=*/false);
  Harness h;
  DockerNames names(h.options(engine.path()));
  auto n = names.lookup(std::string_view(kComfyId).substr(0, 12));
  ASSERT_TRUE(n);
  EXPECT_EQ(n->name, "genai_comfyui_1");
  EXPECT_FALSE(names.lookup("a41c"));  // too short to be taken as an id
}

TEST(DockerTest, AbsentSocketWarnsOnceAndCallersUseShortId) {
  Harness h;
  std::string missing = (fs::temp_directory_path() / "vramd-no-such-docker.sock").string();
  DockerNames names(h.options(missing));
  for (int i = 0; i < 5; ++i) {
    CgroupIdentity cg;
    cg.kind = CgroupIdentity::Kind::container;
    cg.container_id = kComfyId;
    names.fill(cg);
    EXPECT_EQ(cg.container_name, "");  // the caller falls back to short_container_id
    EXPECT_FALSE(names.lookup(kOllamaId));
    h.now += 3s;
  }
  EXPECT_EQ(h.warnings.size(), 1u);
  EXPECT_EQ(names.warnings(), 1);
  EXPECT_NE(names.last_error().find("connect"), std::string::npos) << names.last_error();
  EXPECT_LE(names.requests(), 3);  // 12 s of asking, one try per 5 s
  EXPECT_GE(names.requests(), 2);
}

TEST(DockerTest, EngineErrorsWarnOncePerOutage) {
  Harness h;
  FakeEngine bad("{\"message\":\"boom\"}", false);  // not a list
  DockerNames broken(h.options(bad.path()));
  EXPECT_FALSE(broken.lookup(kComfyId));
  h.now += 10s;
  EXPECT_FALSE(broken.lookup(kComfyId));
  EXPECT_EQ(h.warnings.size(), 1u);
  EXPECT_EQ(bad.requests(), 2);

  FakeEngine failing("", false, /*status=*/500);
  DockerNames names500(h.options(failing.path()));
  EXPECT_FALSE(names500.lookup(kComfyId));
  EXPECT_EQ(names500.last_error(), "HTTP 500");
  EXPECT_EQ(h.warnings.size(), 2u);

  FakeEngine empty("[]", false);  // an engine with no containers is not an error
  DockerNames names(h.options(empty.path()));
  EXPECT_FALSE(names.lookup(kComfyId));
  EXPECT_EQ(names.warnings(), 0);
}

}  // namespace
}  // namespace vramd
