// The Engine API parsers: a container's inspect, /events lines, the chunked events stream fed
// byte by byte, and logs with and without the 8-byte stream headers.
#include "host/docker_engine.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdio>

#include <gtest/gtest.h>

namespace vramd {
namespace {

std::string frame(char stream, std::string_view payload) {
  std::string out = {stream, 0, 0, 0};
  uint32_t n = static_cast<uint32_t>(payload.size());
  for (int shift : {24, 16, 8, 0}) out += static_cast<char>((n >> shift) & 0xff);
  return out + std::string(payload);
}

TEST(DockerEngine, ParsesInspect) {
  auto c = parse_container_inspect(R"({"Id":"abc123","Name":"/comfy",
      "State":{"Running":false,"ExitCode":137,"OOMKilled":true},
      "HostConfig":{"RestartPolicy":{"Name":"unless-stopped","MaximumRetryCount":0}},
      "Config":{"Tty":true}})");
  ASSERT_TRUE(c.ok()) << c.error();
  EXPECT_EQ(c->id, "abc123");
  EXPECT_EQ(c->name, "comfy");
  EXPECT_FALSE(c->running);
  EXPECT_EQ(c->exit_code, 137);
  EXPECT_TRUE(c->oom_killed);
  EXPECT_EQ(c->restart_policy, "unless-stopped");
  EXPECT_TRUE(c->tty);
  auto bare = parse_container_inspect(R"({"Id":"x","HostConfig":{"RestartPolicy":{"Name":""}}})");
  ASSERT_TRUE(bare.ok());
  EXPECT_EQ(bare->restart_policy, "no");
  EXPECT_FALSE(parse_container_inspect("[]").ok());
  EXPECT_FALSE(parse_container_inspect(R"({"Name":"/x"})").ok());
  EXPECT_FALSE(parse_container_inspect("{").ok());
}

TEST(DockerEngine, ParsesEvents) {
  auto e = parse_docker_event(R"({"status":"die","id":"abc","Type":"container","Action":"die",
      "Actor":{"ID":"abc","Attributes":{"exitCode":"1","image":"x","name":"comfy"}},
      "scope":"local","time":1764600000,"timeNano":1764600000000000000})");
  ASSERT_TRUE(e.ok()) << e.error();
  EXPECT_EQ(e->type, "container");
  EXPECT_EQ(e->action, "die");
  EXPECT_EQ(e->id, "abc");
  EXPECT_EQ(e->name, "comfy");
  EXPECT_EQ(e->exit_code, 1);
  EXPECT_EQ(e->time, 1764600000);
  auto h = parse_docker_event(
      R"({"Type":"container","Action":"health_status: healthy","Actor":{"ID":"a"}})");
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->action, "health_status");
  EXPECT_FALSE(h->exit_code);
  EXPECT_FALSE(parse_docker_event(R"({"Actor":{}})").ok());
  EXPECT_FALSE(parse_docker_event("not json").ok());
  // A bad exit code is no exit code, not a crash of the parser.
  auto bad = parse_docker_event(
      R"({"Type":"container","Action":"die","Actor":{"ID":"a","Attributes":{"exitCode":"x"}}})");
  ASSERT_TRUE(bad.ok());
  EXPECT_FALSE(bad->exit_code);
}

TEST(DockerEngine, DecodesChunksFedByteByByte) {
  std::string body = "16\r\n{\"Type\":\"container\"}\r\n\r\n5;ext=1\r\nhello\r\n0\r\n\r\n";
  ChunkedDecoder d;
  std::string out;
  for (char c : body) ASSERT_TRUE(d.feed(std::string_view(&c, 1), out).ok());
  EXPECT_EQ(out, "{\"Type\":\"container\"}\r\nhello");
  EXPECT_TRUE(d.finished());
  ChunkedDecoder bad;
  EXPECT_FALSE(bad.feed("zz\r\n", out).ok());
  ChunkedDecoder no_crlf;
  EXPECT_FALSE(no_crlf.feed("2\r\nabXY", out).ok());
}

TEST(DockerEngine, DemultiplexesLogsWithoutATty) {
  std::string body = frame(1, "Traceback (most recent call last):\n  File \"x.py\"") +
                     frame(1, ", line 1\n") + frame(2, "RuntimeError: CUDA error: out of memory\n") +
                     frame(1, "no newline at the end");
  DockerLogDemux demux(false);
  std::vector<std::string> lines;
  // In pieces that cut frame headers in two.
  for (size_t i = 0; i < body.size(); i += 5)
    ASSERT_TRUE(demux.feed(std::string_view(body).substr(i, 5), lines).ok());
  ASSERT_TRUE(demux.finish(lines).ok());
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[0], "Traceback (most recent call last):");
  EXPECT_EQ(lines[1], "  File \"x.py\", line 1");
  EXPECT_EQ(lines[2], "RuntimeError: CUDA error: out of memory");
  EXPECT_EQ(lines[3], "no newline at the end");

  DockerLogDemux garbage(false);
  EXPECT_FALSE(garbage.feed("hello world\n", lines).ok());  // raw text is not a frame
  DockerLogDemux cut(false);
  ASSERT_TRUE(cut.feed(frame(1, "abcdef").substr(0, 10), lines).ok());
  EXPECT_FALSE(cut.finish(lines).ok());
}

TEST(DockerEngine, ParsesTheEnginesTimestamps) {
  EXPECT_EQ(parse_docker_timestamp("1970-01-01T00:00:01.000000002Z"), 1'000'000'002u);
  EXPECT_EQ(parse_docker_timestamp("2026-12-01T15:04:05.5Z"), 1796137445'500'000'000u);
  EXPECT_EQ(parse_docker_timestamp("2026-12-01T15:04:05Z"), 1796137445'000'000'000u);
  EXPECT_FALSE(parse_docker_timestamp("2026-12-01 15:04:05Z"));
  EXPECT_FALSE(parse_docker_timestamp("2026-13-01T15:04:05Z"));
  EXPECT_FALSE(parse_docker_timestamp("2026-12-01T15:04:05.Z"));
  EXPECT_FALSE(parse_docker_timestamp("2026-12-01T15:04:05.12x4Z"));
  EXPECT_FALSE(parse_docker_timestamp("hello"));
}

TEST(DockerEngine, LogsWithATtyAreRawLines) {
  DockerLogDemux demux(true);
  std::vector<std::string> lines;
  ASSERT_TRUE(demux.feed("one\r\ntwo\nthr", lines).ok());
  ASSERT_TRUE(demux.feed("ee", lines).ok());
  ASSERT_TRUE(demux.finish(lines).ok());
  EXPECT_EQ(lines, (std::vector<std::string>{"one", "two", "three"}));
}

}  // namespace
}  // namespace vramd

namespace vramd {
namespace {

TEST(EngineSocket, DockerFirstThenRootlessThenRootfulPodman) {
  EXPECT_EQ(engine_socket_candidates("/run/user/1000"),
            (std::vector<std::string>{"/run/docker.sock", "/var/run/docker.sock",
                                      "/run/user/1000/podman/podman.sock",
                                      "/run/podman/podman.sock"}));
  EXPECT_EQ(engine_socket_candidates("").size(), 3u);  // no XDG_RUNTIME_DIR: no rootless one
}

TEST(EngineSocket, FindsARootlessPodmanSocket) {
  char tmpl[] = "/tmp/vramd-xdg-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  std::string xdg = tmpl;
  ASSERT_EQ(::mkdir((xdg + "/podman").c_str(), 0700), 0);
  std::string path = xdg + "/podman/podman.sock";
  // What Docker's places hold on this machine decides what comes first.
  auto is_socket = [](const std::string& p) {
    struct stat st {};
    return ::stat(p.c_str(), &st) == 0 && S_ISSOCK(st.st_mode);
  };
  std::string docker = is_socket("/run/docker.sock")       ? "/run/docker.sock"
                       : is_socket("/var/run/docker.sock") ? "/var/run/docker.sock"
                                                           : "";
  std::string none = is_socket("/run/podman/podman.sock") ? "/run/podman/podman.sock"
                                                          : "/var/run/docker.sock";
  EXPECT_EQ(find_engine_socket(xdg), docker.empty() ? none : docker);  // no socket there yet
  int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path.c_str());
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  EXPECT_EQ(find_engine_socket(xdg), docker.empty() ? path : docker);
  ::close(fd);
  ::unlink(path.c_str());
  ::rmdir((xdg + "/podman").c_str());
  ::rmdir(xdg.c_str());
}

}  // namespace
}  // namespace vramd
