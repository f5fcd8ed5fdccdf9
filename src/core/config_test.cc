#include "core/config.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

namespace vramd {
namespace {

// The error parse_config gives for `text`, or "(ok)".
std::string error_of(std::string_view text) {
  Result<Config> c = parse_config(text, "vramd.toml");
  return c.ok() ? "(ok)" : c.error();
}

// The example from DESIGN.md, verbatim.
constexpr std::string_view kDesignExample = R"toml([daemon]
listen = "127.0.0.1:7100"
state_dir = "/var/lib/vramd"
sample_interval = "1s"

[gpu]
backend = "auto"              # auto | nvml | nvidia-smi
baseline = "auto"             # or a size

[services.comfyui]
kind = "comfyui"
url = "http://127.0.0.1:8188"
match = { cmdline = "main\\.py.*--port 8188" }   # or container = "comfyui", unit = "comfyui.service"
unload_after_idle = "5m"      # optional TTL; without it vramd unloads only on demand
on_ineffective_unload = "restart"
group = "gpu-heavy"           # exclusive group, optional
start = ["python3", "main.py", "--listen", "127.0.0.1", "--port", "8188", "--disable-async-offload"]
cwd = "/opt/ComfyUI"
start_timeout = "10m"
health_failures = 5
)toml";

TEST(Config, DesignExampleParses) {
  Result<Config> c = parse_config(kDesignExample, "vramd.toml");
  ASSERT_TRUE(c.ok()) << c.error();
  EXPECT_EQ(c->path, "vramd.toml");
  EXPECT_EQ(c->daemon.listen, "127.0.0.1:7100");
  EXPECT_EQ(c->daemon.state_dir, "/var/lib/vramd");
  EXPECT_EQ(c->daemon.sample_interval, std::chrono::seconds(1));
  EXPECT_EQ(c->gpu.backend, "auto");
  EXPECT_FALSE(c->gpu.baseline.has_value());
  ASSERT_EQ(c->services.size(), 1u);
  const ServiceConfig& s = c->services[0];
  EXPECT_EQ(s.name, "comfyui");
  EXPECT_EQ(s.kind, "comfyui");
  EXPECT_EQ(s.url, "http://127.0.0.1:8188");
  EXPECT_EQ(s.match.cmdline, "main\\.py.*--port 8188");
  EXPECT_TRUE(s.match.container.empty());
  EXPECT_EQ(s.unload_after_idle, std::chrono::minutes(5));
  EXPECT_EQ(s.on_ineffective_unload, IneffectiveUnload::restart);
  EXPECT_EQ(s.group, "gpu-heavy");
  EXPECT_FALSE(s.pinned);
  EXPECT_EQ(s.start, (std::vector<std::string>{"python3", "main.py", "--listen", "127.0.0.1",
                                               "--port", "8188", "--disable-async-offload"}));
  EXPECT_EQ(s.cwd, "/opt/ComfyUI");
  EXPECT_EQ(s.start_timeout, std::chrono::minutes(10));
  EXPECT_EQ(s.health_failures, 5);
  EXPECT_FALSE(s.vram_estimate.has_value());
  EXPECT_EQ(c->find_service("comfyui"), &c->services[0]);
  EXPECT_EQ(c->find_service("ollama"), nullptr);
}

TEST(Config, EmptyFileGivesDefaults) {
  Result<Config> c = parse_config("", "empty.toml");
  ASSERT_TRUE(c.ok()) << c.error();
  Config defaults;
  EXPECT_EQ(c->path, "empty.toml");
  EXPECT_EQ(c->daemon.listen, defaults.daemon.listen);
  EXPECT_EQ(c->daemon.state_dir, "/var/lib/vramd");
  EXPECT_EQ(c->daemon.sample_interval, std::chrono::seconds(1));
  EXPECT_EQ(c->daemon.docker_socket, "/var/run/docker.sock");
  EXPECT_TRUE(c->daemon.token.empty());
  EXPECT_EQ(c->gpu.backend, "auto");
  EXPECT_FALSE(c->gpu.baseline.has_value());
  EXPECT_EQ(c->gpu.residual_tolerance, 256 * MiB);
  EXPECT_TRUE(c->services.empty());
}

TEST(Config, EveryKeyParses) {
  Result<Config> c = parse_config(R"toml(
[daemon]
listen = "[::1]:7200"
state_dir = "/tmp/vramd"
sample_interval = "250ms"
token_file = "/etc/vramd/token"
docker_socket = "/run/docker.sock"

[gpu]
backend = "nvidia-smi"
baseline = "16GiB"
residual_tolerance = "512MiB"

[services.ollama]
kind = "ollama"
url = "http://localhost:11434/"
match = { container = "ollama" }
pinned = true
env = { OLLAMA_KEEP_ALIVE = "-1", CUDA_VISIBLE_DEVICES = "0" }
vram_estimate = "16GB"

[services.asr]
kind = "process"
match = { unit = "whisper.service" }

[services.a-b_1]
kind = "generic_http"
url = "https://gpu-box.lan/api"
match = { pid_file = "/run/x.pid" }
)toml",
                                  "vramd.toml");
  ASSERT_TRUE(c.ok()) << c.error();
  EXPECT_EQ(c->daemon.listen, "[::1]:7200");
  EXPECT_EQ(c->daemon.sample_interval, std::chrono::milliseconds(250));
  EXPECT_EQ(c->daemon.token_file, "/etc/vramd/token");
  EXPECT_EQ(c->daemon.docker_socket, "/run/docker.sock");
  EXPECT_EQ(c->gpu.backend, "nvidia-smi");
  EXPECT_EQ(c->gpu.baseline, 16 * GiB);
  EXPECT_EQ(c->gpu.residual_tolerance, 512 * MiB);
  // File order, not key order.
  ASSERT_EQ(c->services.size(), 3u);
  EXPECT_EQ(c->services[0].name, "ollama");
  EXPECT_EQ(c->services[1].name, "asr");
  EXPECT_EQ(c->services[2].name, "a-b_1");
  const ServiceConfig& o = c->services[0];
  EXPECT_EQ(o.url, "http://localhost:11434");  // trailing '/' dropped
  EXPECT_EQ(o.match.container, "ollama");
  EXPECT_TRUE(o.pinned);
  EXPECT_EQ(o.env.at("OLLAMA_KEEP_ALIVE"), "-1");
  EXPECT_EQ(o.env.at("CUDA_VISIBLE_DEVICES"), "0");
  EXPECT_EQ(o.vram_estimate, Bytes{16'000'000'000});
  EXPECT_EQ(o.on_ineffective_unload, IneffectiveUnload::report);
  EXPECT_EQ(c->services[1].url, "");
  EXPECT_EQ(c->services[1].match.unit, "whisper.service");
  EXPECT_EQ(c->services[2].match.pid_file, "/run/x.pid");
}

TEST(Config, SizesBinaryAndSi) {
  Result<Config> c = parse_config(
      "[gpu]\nbaseline = \"16GiB\"\n[services.x]\nkind = \"process\"\n"
      "vram_estimate = \"16GB\"\n",
      "vramd.toml");
  ASSERT_TRUE(c.ok()) << c.error();
  EXPECT_EQ(c->gpu.baseline, Bytes{17'179'869'184});
  EXPECT_EQ(c->services[0].vram_estimate, Bytes{16'000'000'000});
}

TEST(Config, SizeWithoutAUnitIsRefusedWithTheHint) {
  EXPECT_EQ(error_of("[gpu]\nreserve = \"12\"\n"),
            "vramd.toml:2:11: gpu.reserve: 12: give a unit, e.g. 12GiB");
  EXPECT_EQ(error_of("[gpu]\nreserve = \"0\"\n"), "(ok)");
}

TEST(Config, SyntaxErrorHasPosition) {
  EXPECT_EQ(error_of("[daemon]\nlisten = \n"),
            "vramd.toml:2:10: Error while parsing key-value pair: expected value, saw '\\n'");
  EXPECT_EQ(error_of("[gpu]\nbackend = \"nvml\"\n[gpu]\n"),
            "vramd.toml:3:1: Error while parsing table header: cannot redefine existing table "
            "'gpu'");
  std::string e = error_of("[daemon]\nlisten = \"127.0.0.1:7100\n");
  EXPECT_EQ(e.rfind("vramd.toml:2:25: ", 0), 0u) << e;
}

TEST(Config, UnknownServiceKeySuggests) {
  // The misspelt key stands in for the required one: no second error saying 'url' is missing.
  EXPECT_EQ(error_of("[services.comfyui]\nkind = \"comfyui\"\nurll = \"http://127.0.0.1:8188\"\n"),
            "vramd.toml:3:1: unknown key 'urll' in [services.comfyui]; did you mean 'url'?");
  EXPECT_EQ(error_of("[services.comfyui]\nknd = \"comfyui\"\nurl = \"http://127.0.0.1:8188\"\n"),
            "vramd.toml:2:1: unknown key 'knd' in [services.comfyui]; did you mean 'kind'?");
}

TEST(Config, UnknownTopLevelTableSuggests) {
  EXPECT_EQ(error_of("[daemon]\n\n[servcies.comfyui]\nkind = \"comfyui\"\n"),
            "vramd.toml:3:2: unknown table [servcies]; did you mean [services]?");
}

TEST(Config, UnknownKeyWithoutSuggestionListsKnownKeys) {
  EXPECT_EQ(error_of("[gpu]\nfoo = 1\n"),
            "vramd.toml:2:1: unknown key 'foo' in [gpu]; known keys: backend, baseline, "
            "residual_tolerance, reserve, process_scan_threshold, process_scan_interval and "
            "cuda_checkpoint");
}

TEST(Config, ProcessScanKeys) {
  auto c = parse_config(
      "[gpu]\nprocess_scan_threshold = \"64MiB\"\nprocess_scan_interval = \"30s\"\n",
      "vramd.toml");
  ASSERT_TRUE(c.ok()) << c.error();
  EXPECT_EQ(c->gpu.process_scan_threshold, 64 * MiB);
  EXPECT_EQ(c->gpu.process_scan_interval, std::chrono::seconds(30));
  auto d = parse_config("", "vramd.toml");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->gpu.process_scan_threshold, 32 * MiB);
  EXPECT_EQ(d->gpu.process_scan_interval, std::chrono::seconds(10));
  EXPECT_EQ(error_of("[gpu]\nprocess_scan_interval = \"10ms\"\n"),
            "vramd.toml:2:25: gpu.process_scan_interval: must be at least 100ms, got \"10ms\"");
  EXPECT_EQ(error_of("[gpu]\nprocess_scan_threshold = 5\n"),
            "vramd.toml:2:26: gpu.process_scan_threshold: expected a size like \"16GiB\" or "
            "\"512MiB\", got 5");
}

TEST(Config, CudaCheckpointKey) {
  auto c = parse_config("[gpu]\ncuda_checkpoint = \"/opt/nvidia/cuda-checkpoint\"\n", "vramd.toml");
  ASSERT_TRUE(c.ok()) << c.error();
  EXPECT_EQ(c->gpu.cuda_checkpoint, "/opt/nvidia/cuda-checkpoint");
  auto d = parse_config("", "vramd.toml");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->gpu.cuda_checkpoint, "cuda-checkpoint");  // looked up in PATH
  EXPECT_EQ(error_of("[gpu]\ncuda_checkpoint = \"\"\n"),
            "vramd.toml:2:19: gpu.cuda_checkpoint: must not be empty");
  EXPECT_EQ(error_of("[gpu]\ncuda_checkpoint = true\n"),
            "vramd.toml:2:19: gpu.cuda_checkpoint: expected a string, got true");
  EXPECT_EQ(error_of("[gpu]\ncuda_checkpiont = \"x\"\n"),
            "vramd.toml:2:1: unknown key 'cuda_checkpiont' in [gpu]; did you mean "
            "'cuda_checkpoint'?");
}

TEST(Config, LeaseKeys) {
  auto c = parse_config(
      "[daemon]\nlease_heartbeat = \"10s\"\n[gpu]\nreserve = \"1GiB\"\n"
      "[services.a]\nkind = \"ollama\"\nurl = \"http://127.0.0.1:11434\"\nmin_idle = \"2m\"\n",
      "vramd.toml");
  ASSERT_TRUE(c.ok()) << c.error();
  EXPECT_EQ(c->daemon.lease_heartbeat, std::chrono::seconds(10));
  EXPECT_EQ(c->gpu.reserve, 1 * GiB);
  EXPECT_EQ(c->services[0].min_idle, std::chrono::minutes(2));
  EXPECT_EQ(error_of("[daemon]\nlease_heartbeat = \"0s\"\n").substr(0, 14), "vramd.toml:2:1");
}

TEST(Config, UnknownDaemonKeySuggests) {
  EXPECT_EQ(error_of("[daemon]\nsample_intervall = \"1s\"\n"),
            "vramd.toml:2:1: unknown key 'sample_intervall' in [daemon]; did you mean "
            "'sample_interval'?");
}

TEST(Config, BackendSuggests) {
  EXPECT_EQ(error_of("[gpu]\nbackend = \"nvidia_smi\"\n"),
            "vramd.toml:2:11: gpu.backend: unknown backend 'nvidia_smi'; did you mean "
            "'nvidia-smi'? (expected auto, nvml or nvidia-smi)");
}

TEST(Config, DurationWrongType) {
  EXPECT_EQ(error_of("[daemon]\nsample_interval = 5\n"),
            "vramd.toml:2:19: daemon.sample_interval: expected a duration like \"1s\" or "
            "\"300ms\", got 5");
}

TEST(Config, DurationBadText) {
  EXPECT_EQ(error_of("[services.x]\nkind = \"process\"\nstart_timeout = \"10 parsecs\"\n"),
            "vramd.toml:3:17: services.x.start_timeout: invalid duration '10 parsecs': expected a "
            "number with a unit, like \"300ms\", \"5m\" or \"1h30m\"");
}

TEST(Config, SampleIntervalTooShort) {
  EXPECT_EQ(error_of("[daemon]\nsample_interval = \"50ms\"\n"),
            "vramd.toml:2:19: daemon.sample_interval: must be at least 100ms, got \"50ms\"");
  EXPECT_EQ(error_of("[daemon]\nsample_interval = \"100ms\"\n"), "(ok)");
}

TEST(Config, SizeBadText) {
  EXPECT_EQ(error_of("[gpu]\nresidual_tolerance = \"lots\"\n"),
            "vramd.toml:2:22: gpu.residual_tolerance: invalid size 'lots': expected a number with "
            "a unit, like \"16GiB\", \"512MiB\" or \"16GB\"");
}

TEST(Config, BaselineWrongType) {
  EXPECT_EQ(error_of("[gpu]\nbaseline = 1024\n"),
            "vramd.toml:2:12: gpu.baseline: expected \"auto\" or a size like \"16GiB\" or "
            "\"512MiB\", got 1024");
}

TEST(Config, KindRequired) {
  EXPECT_EQ(error_of("\n[services.comfyui]\nurl = \"http://127.0.0.1:8188\"\n"),
            "vramd.toml:2:1: [services.comfyui]: missing required key 'kind' (one of comfyui, "
            "ollama, vllm, sglang, a1111, forge, textgen, tabbyapi, llamacpp, triton, localai, "
            "speaches, generic_http or process)");
}

TEST(Config, KindUnknownSuggests) {
  std::string e = error_of("[services.c]\nkind = \"comfy\"\nurl = \"http://127.0.0.1:8188\"\n");
  EXPECT_EQ(e.rfind("vramd.toml:2:8: services.c.kind: unknown kind 'comfy'", 0), 0u) << e;
  e = error_of("[services.c]\nkind = \"comfyiu\"\nurl = \"http://127.0.0.1:8188\"\n");
  EXPECT_EQ(e.rfind("vramd.toml:2:8: services.c.kind: unknown kind 'comfyiu'; did you mean "
                    "'comfyui'?",
                    0),
            0u)
      << e;
}

TEST(Config, UrlRequiredExceptForProcess) {
  EXPECT_EQ(error_of("[services.o]\nkind = \"ollama\"\n"),
            "vramd.toml:1:1: [services.o]: missing required key 'url' (kind \"ollama\" is reached "
            "over HTTP)");
  EXPECT_EQ(error_of("[services.p]\nkind = \"process\"\n"), "(ok)");
}

TEST(Config, UrlValidation) {
  auto with_url = [](std::string url) {
    return error_of("[services.s]\nkind = \"vllm\"\nurl = \"" + url + "\"\n");
  };
  EXPECT_EQ(with_url("127.0.0.1:8000"),
            "vramd.toml:3:7: services.s.url: expected a URL like \"http://127.0.0.1:8188\" (got "
            "\"127.0.0.1:8000\")");
  EXPECT_EQ(with_url("ftp://h:21"),
            "vramd.toml:3:7: services.s.url: scheme must be http or https, not 'ftp' (got "
            "\"ftp://h:21\")");
  EXPECT_EQ(with_url("http://h:99999"),
            "vramd.toml:3:7: services.s.url: '99999' is not a port (1-65535) (got "
            "\"http://h:99999\")");
  EXPECT_EQ(with_url("http://300.1.1.1:80"),
            "vramd.toml:3:7: services.s.url: '300.1.1.1' is not an IPv4 address (got "
            "\"http://300.1.1.1:80\")");
  EXPECT_EQ(with_url("http://[::1]:8000/v1"), "(ok)");
  EXPECT_EQ(with_url("https://gpu.example.com"), "(ok)");
}

TEST(ParseHttpUrl, Parts) {
  Result<HttpUrl> u = parse_http_url("HTTP://[::1]:8000/prefix/");
  ASSERT_TRUE(u.ok()) << u.error();
  EXPECT_EQ(u->scheme, "http");
  EXPECT_EQ(u->host, "::1");
  EXPECT_EQ(u->port, 8000);
  EXPECT_EQ(u->path, "/prefix");
  u = parse_http_url("https://box");
  ASSERT_TRUE(u.ok()) << u.error();
  EXPECT_EQ(u->port, 443);
  EXPECT_EQ(u->path, "");
  EXPECT_FALSE(parse_http_url("http://user:pw@box:80").ok());
  EXPECT_FALSE(parse_http_url("http://box:80/?q=1").ok());
  EXPECT_FALSE(parse_http_url("http://:80").ok());
}

TEST(ParseHostPort, Forms) {
  EXPECT_EQ(parse_host_port("127.0.0.1:7100")->port, 7100);
  EXPECT_EQ(parse_host_port("[::]:7100")->host, "::");
  EXPECT_EQ(parse_host_port("gpu-box.lan:80")->host, "gpu-box.lan");
  EXPECT_FALSE(parse_host_port("127.0.0.1").ok());
  EXPECT_FALSE(parse_host_port("::1:7100").ok());
  EXPECT_FALSE(parse_host_port("[::1:7100").ok());
  EXPECT_FALSE(parse_host_port("bad host:1").ok());
  EXPECT_FALSE(parse_host_port("h:0").ok());
}

TEST(Config, ListenValidation) {
  EXPECT_EQ(error_of("[daemon]\nlisten = \"7100\"\n"),
            "vramd.toml:2:10: daemon.listen: missing port; expected \"host:port\" (got \"7100\")");
  EXPECT_EQ(error_of("[daemon]\nlisten = \"::1:7100\"\n"),
            "vramd.toml:2:10: daemon.listen: IPv6 addresses go in brackets: \"[::1]:7100\" (got "
            "\"::1:7100\")");
}

// Beyond loopback, anyone on the network could drive the daemon: a token is required.
TEST(Config, ListenBeyondLoopbackNeedsToken) {
  EXPECT_EQ(error_of("[daemon]\nlisten = \"0.0.0.0:7100\"\n"),
            "vramd.toml:2:10: daemon.listen: 0.0.0.0:7100 is reachable from other hosts; set "
            "daemon.token or daemon.token_file");
  EXPECT_EQ(error_of("[daemon]\nstate_dir = \"/tmp\"\nlisten = \"[::]:7100\"\n"),
            "vramd.toml:3:10: daemon.listen: [::]:7100 is reachable from other hosts; set "
            "daemon.token or daemon.token_file");
  // A hostname may resolve anywhere, even one that sounds local.
  EXPECT_NE(error_of("[daemon]\nlisten = \"gpu-box:7100\"\n").find("reachable from other hosts"),
            std::string::npos);
  EXPECT_NE(error_of("[daemon]\nlisten = \"192.168.1.5:7100\"\n").find("set daemon.token"),
            std::string::npos);
  EXPECT_EQ(error_of("[daemon]\nlisten = \"0.0.0.0:7100\"\ntoken = \"s3cret\"\n"), "(ok)");
  EXPECT_EQ(error_of("[daemon]\ntoken_file = \"/etc/vramd/token\"\nlisten = \"0.0.0.0:7100\"\n"),
            "(ok)");
}

TEST(Config, ListenOnLoopbackNeedsNoToken) {
  for (const char* listen :
       {"127.0.0.1:7100", "127.8.9.10:7100", "[::1]:7100", "localhost:7100", "LOCALHOST:7100"}) {
    EXPECT_EQ(error_of(std::string("[daemon]\nlisten = \"") + listen + "\"\n"), "(ok)") << listen;
  }
}

TEST(Config, TokenMustBeOneWord) {
  EXPECT_EQ(error_of("[daemon]\ntoken = \"two words\"\n"),
            "vramd.toml:2:9: daemon.token: must be printable ASCII without spaces");
  EXPECT_EQ(error_of("[daemon]\ntoken = \"\"\n"),
            "vramd.toml:2:9: daemon.token: must not be empty");
}

TEST(IsLoopbackHost, Forms) {
  for (const char* h : {"localhost", "Localhost", "localhost.", "127.0.0.1", "127.255.0.3", "::1",
                        "[::1]", "0:0:0:0:0:0:0:1", "::ffff:127.0.0.1"}) {
    EXPECT_TRUE(is_loopback_host(h)) << h;
  }
  for (const char* h :
       {"", "0.0.0.0", "::", "[::]", "128.0.0.1", "10.0.0.1", "gpu-box", "localhost.evil.example",
        "evil.localhost.example", "127.0.0.1.nip.io", "::ffff:10.0.0.1", "[::1", "126.0.0.1"}) {
    EXPECT_FALSE(is_loopback_host(h)) << h;
  }
}

TEST(Config, TokenAndTokenFileExclusive) {
  EXPECT_EQ(error_of("[daemon]\ntoken = \"abc\"\ntoken_file = \"/etc/t\"\n"),
            "vramd.toml:3:14: daemon: set token or token_file, not both");
}

TEST(Config, MatchRegexMustCompile) {
  EXPECT_EQ(
      error_of("[services.c]\nkind = \"comfyui\"\nurl = \"http://127.0.0.1:8188\"\n"
               "match = { cmdline = \"main(\\\\.py\" }\n")
          .rfind("vramd.toml:4:21: services.c.match.cmdline: invalid regular expression: ", 0),
      0u);
}

TEST(Config, MatchExactlyOne) {
  EXPECT_EQ(
      error_of("[services.c]\nkind = \"process\"\nmatch = { cmdline = \"x\", unit = \"u\" }\n"),
      "vramd.toml:3:26: services.c.match: set only one of cmdline, container, "
      "compose_service, unit or pid_file; got both 'cmdline' and 'unit'");
  EXPECT_EQ(error_of("[services.c]\nkind = \"process\"\nmatch = {}\n"),
            "vramd.toml:3:9: services.c.match: set exactly one of cmdline, container, "
            "compose_service, unit or pid_file, or leave match out");
  EXPECT_EQ(error_of("[services.c]\nkind = \"process\"\nmatch = { containr = \"x\" }\n"),
            "vramd.toml:3:11: unknown key 'containr' in services.c.match; did you mean "
            "'container'?");
  EXPECT_EQ(
      error_of("[services.c]\nkind = \"process\"\nmatch = \"x\"\n"),
      "vramd.toml:3:9: services.c.match: expected a table like { cmdline = \"main\\\\.py\" }, "
      "got \"x\"");
}

TEST(Config, OnIneffectiveUnloadChoices) {
  EXPECT_EQ(error_of("[services.c]\nkind = \"process\"\non_ineffective_unload = \"restrat\"\n"),
            "vramd.toml:3:25: services.c.on_ineffective_unload: unknown action 'restrat'; did you "
            "mean 'restart'? (expected restart, stop or report)");
}

TEST(Config, StartEnvAndScalars) {
  EXPECT_EQ(error_of("[services.c]\nkind = \"process\"\nstart = \"python3 main.py\"\n"),
            "vramd.toml:3:9: services.c.start: expected a non-empty array of strings, the program "
            "and its arguments, got \"python3 main.py\"");
  EXPECT_EQ(error_of("[services.c]\nkind = \"process\"\nstart = [\"python3\", 8188]\n"),
            "vramd.toml:3:21: services.c.start[1]: expected a string, got 8188");
  EXPECT_EQ(error_of("[services.c]\nkind = \"process\"\nenv = { A = 1 }\n"),
            "vramd.toml:3:13: services.c.env.A: expected a string, got 1");
  EXPECT_EQ(error_of("[services.c]\nkind = \"process\"\nhealth_failures = 0\n"),
            "vramd.toml:3:19: services.c.health_failures: expected a whole number, at least 1, "
            "got 0");
  EXPECT_EQ(error_of("[services.c]\nkind = \"process\"\npinned = \"yes\"\n"),
            "vramd.toml:3:10: services.c.pinned: expected true or false, got \"yes\"");
  EXPECT_EQ(error_of("[services.c]\nkind = \"process\"\ngroup = 3\n"),
            "vramd.toml:3:9: services.c.group: expected a string, got 3");
}

TEST(Config, ServiceNameCharacters) {
  EXPECT_EQ(error_of("[services.\"my svc\"]\nkind = \"process\"\n"),
            "vramd.toml:1:11: invalid service name 'my svc': use letters, digits, '_' and '-'");
}

TEST(Config, SectionMustBeTable) {
  EXPECT_EQ(error_of("daemon = 5\n"), "vramd.toml:1:10: daemon: expected a table [daemon], got 5");
}

TEST(Config, AllErrorsInFileOrder) {
  EXPECT_EQ(error_of("[gpu]\nbackend = \"cuda\"\n[daemon]\nsample_interval = 1\n"),
            "vramd.toml:2:11: gpu.backend: unknown backend 'cuda' (expected auto, nvml or "
            "nvidia-smi)\n"
            "vramd.toml:4:19: daemon.sample_interval: expected a duration like \"1s\" or "
            "\"300ms\", got 1");
}

TEST(Config, Suggest) {
  std::vector<std::string> keys = {"kind", "url", "match", "cwd", "env"};
  EXPECT_EQ(suggest("urll", keys), "url");
  EXPECT_EQ(suggest("URL", keys), "url");
  EXPECT_EQ(suggest("mtach", keys), "match");
  EXPECT_EQ(suggest("zzz", keys), "");
  EXPECT_EQ(suggest("servcies", {"daemon", "gpu", "services"}), "services");
  EXPECT_EQ(suggest("nvidia_smi", {"auto", "nvml", "nvidia-smi"}), "nvidia-smi");
}



TEST(Config, AdapterKeysParse) {
  Result<Config> c = parse_config(R"toml(
[daemon]
probe_interval = "500ms"
events_retention = 500

[services.llm]
kind = "vllm"
url = "http://127.0.0.1:8000"
api_key_env = "VLLM_KEY"
probe_timeout = "300ms"
connect_timeout = "1s"
unload_timeout = "45s"
unload_backoff = "0s"
sleep_level = 2
models = ["a", "b/c"]

[services.cpp]
kind = "llamacpp"
url = "http://127.0.0.1:8080"
router = true
api_key = "s3cret"

[services.g]
kind = "generic_http"
url = "http://127.0.0.1:9000"
busy_url = "/status"
busy_json_pointer = "/queue/running"
unload_method = "DELETE"
unload_url = "http://127.0.0.1:9001/models/x"
unload_body = "{}"
health_url = "/healthz"
)toml",
                                  "vramd.toml");
  ASSERT_TRUE(c.ok()) << c.error();
  EXPECT_EQ(c->daemon.probe_interval, std::chrono::milliseconds(500));
  EXPECT_EQ(c->daemon.events_retention, 500);
  const ServiceConfig& v = c->services[0];
  EXPECT_EQ(v.api_key_env, "VLLM_KEY");
  EXPECT_EQ(v.probe_timeout, std::chrono::milliseconds(300));
  EXPECT_EQ(v.connect_timeout, std::chrono::seconds(1));
  EXPECT_EQ(v.unload_timeout, std::chrono::seconds(45));
  EXPECT_EQ(v.unload_backoff, std::chrono::seconds(0));
  EXPECT_EQ(v.sleep_level, 2);
  EXPECT_EQ(v.models, (std::vector<std::string>{"a", "b/c"}));
  EXPECT_EQ(c->services[1].router, true);
  EXPECT_EQ(c->services[1].api_key, "s3cret");
  const ServiceConfig& g = c->services[2];
  EXPECT_EQ(g.busy_url, "/status");
  EXPECT_EQ(g.busy_json_pointer, "/queue/running");
  EXPECT_EQ(g.unload_method, "DELETE");
  EXPECT_EQ(g.unload_url, "http://127.0.0.1:9001/models/x");
  EXPECT_EQ(g.unload_body, "{}");
  EXPECT_EQ(g.health_url, "/healthz");
}

TEST(Config, AdapterKeyDefaults) {
  Result<Config> c = parse_config("[services.x]\nkind = \"ollama\"\nurl = \"http://h:1\"\n", "f");
  ASSERT_TRUE(c.ok()) << c.error();
  EXPECT_EQ(c->daemon.probe_interval, std::chrono::seconds(2));
  EXPECT_EQ(c->daemon.events_retention, 10000);
  const ServiceConfig& s = c->services[0];
  EXPECT_EQ(s.probe_timeout, std::chrono::seconds(5));
  EXPECT_EQ(s.connect_timeout, std::chrono::seconds(2));
  EXPECT_FALSE(s.unload_timeout.has_value());
  EXPECT_EQ(s.unload_backoff, std::chrono::minutes(10));
  EXPECT_FALSE(s.sleep_level.has_value());  // the core chooses the depth
  EXPECT_FALSE(s.router.has_value());
  EXPECT_EQ(s.unload_method, "POST");
}

TEST(Config, KindOnlyKeysRejectedElsewhere) {
  EXPECT_EQ(error_of("[services.x]\nkind = \"ollama\"\nurl = \"http://h:1\"\nsleep_level = 2\n"),
            "vramd.toml:4:15: [services.x]: 'sleep_level' applies only to kind \"comfyui\" or "
            "\"vllm\", not \"ollama\"");
  EXPECT_EQ(error_of("[services.x]\nkind = \"vllm\"\nurl = \"http://h:1\"\nsleep_level = 3\n"),
            "vramd.toml:4:15: services.x.sleep_level: expected 1 or 2, got 3");
}

TEST(Config, HostRamReserve) {
  Result<Config> c = parse_config("[host]\nram_reserve = \"8GiB\"\n", "vramd.toml");
  ASSERT_TRUE(c) << c.error();
  EXPECT_EQ(c->host.reserve_of(64 * GiB), 8 * GiB);
  c = parse_config("[host]\nram_reserve = \"25%\"\n", "vramd.toml");
  ASSERT_TRUE(c) << c.error();
  EXPECT_EQ(c->host.reserve_of(64 * GiB), 16 * GiB);
  c = parse_config("", "vramd.toml");
  ASSERT_TRUE(c) << c.error();
  EXPECT_EQ(c->host.reserve_of(100 * GiB), 10 * GiB);  // 10% by default
  EXPECT_EQ(error_of("[host]\nram_reserve = \"95%\"\n"),
            "vramd.toml:2:15: host.ram_reserve: expected a share from 0% to 90%, got \"95%\"");
  EXPECT_EQ(error_of("[host]\nram_reserve = 8\n"),
            "vramd.toml:2:15: host.ram_reserve: expected a size like \"16GiB\" or \"512MiB\" or a "
            "share like \"10%\", got 8");
  EXPECT_EQ(error_of("[host]\nram_reserv = \"1GiB\"\n"),
            "vramd.toml:2:1: unknown key 'ram_reserv' in [host]; did you mean 'ram_reserve'?");
  // comfyui reads sleep_level too (unload_models only, or with free_memory).
  c = parse_config("[services.c]\nkind = \"comfyui\"\nurl = \"http://h:1\"\nsleep_level = 2\n",
                   "vramd.toml");
  ASSERT_TRUE(c) << c.error();
  EXPECT_EQ(c->services[0].sleep_level, 2);
}

TEST(Config, PrewarmPerServiceOrForAll) {
  Result<Config> c = parse_config(
      "[daemon]\nprewarm = true\n[services.a]\nkind = \"vllm\"\nurl = \"http://h:1\"\n"
      "[services.b]\nkind = \"vllm\"\nurl = \"http://h:2\"\nprewarm = false\n",
      "vramd.toml");
  ASSERT_TRUE(c) << c.error();
  EXPECT_TRUE(c->daemon.prewarm);
  EXPECT_FALSE(c->services[0].prewarm.has_value());
  EXPECT_EQ(c->services[1].prewarm, false);
  c = parse_config("", "vramd.toml");
  ASSERT_TRUE(c) << c.error();
  EXPECT_FALSE(c->daemon.prewarm);  // off by default
  EXPECT_EQ(error_of("[services.a]\nkind = \"vllm\"\nurl = \"http://h:1\"\nprewarm = \"yes\"\n"),
            "vramd.toml:4:11: services.a.prewarm: expected true or false, got \"yes\"");
}

TEST(Config, ApiKeyNeverInErrors) {
  std::string e = error_of(
      "[services.x]\nkind = \"ollama\"\nurl = \"http://h:1\"\napi_key = \"hunter2\"\n"
      "api_key_env = \"K\"\n");
  EXPECT_EQ(e, "vramd.toml:5:15: [services.x]: set api_key or api_key_env, not both");
  EXPECT_EQ(e.find("hunter2"), std::string::npos);
}

TEST(Config, GenericHttpKeyDependencies) {
  EXPECT_EQ(error_of("[services.x]\nkind = \"generic_http\"\nurl = \"http://h:1\"\n"
                     "busy_metric = \"q\"\n"),
            "vramd.toml:4:15: [services.x]: 'busy_metric' needs busy_url");
  EXPECT_EQ(error_of("[services.x]\nkind = \"generic_http\"\nurl = \"http://h:1\"\n"
                     "busy_url = \"status\"\nbusy_metric = \"q\"\n"),
            "vramd.toml:4:12: services.x.busy_url: expected an absolute URL or a path starting "
            "with '/' (got \"status\")");
  EXPECT_EQ(error_of("[services.x]\nkind = \"generic_http\"\nurl = \"http://h:1\"\n"
                     "unload_url = \"/u\"\nunload_method = \"GET\"\n"),
            "vramd.toml:5:17: services.x.unload_method: unknown method 'GET' (expected POST, "
            "DELETE or PUT)");
  EXPECT_EQ(error_of("[services.x]\nkind = \"generic_http\"\nurl = \"http://h:1\"\n"
                     "busy_url = \"/s\"\nbusy_json_pointer = \"busy\"\n"),
            "vramd.toml:5:21: services.x.busy_json_pointer: a JSON pointer is empty or starts "
            "with '/' (got \"busy\")");
}

TEST(Config, UnknownAdapterKeySuggests) {
  EXPECT_EQ(
      error_of("[services.x]\nkind = \"ollama\"\nurl = \"http://h:1\"\nprobe_timout = \"1s\"\n"),
      "vramd.toml:4:1: unknown key 'probe_timout' in [services.x]; did you mean "
      "'probe_timeout'?");
}

}  // namespace
}  // namespace vramd

namespace vramd {
namespace {

// Several hosts (issue 17): the store, the host's name, the host timeout.
TEST(Config, TheStoreAndTheHostParseAndBadValuesSayWhere) {
  Result<Config> c = parse_config(
      "[daemon]\nstore = \"postgresql://vramd@db:5432/vramd\"\nhost = \"gpu-1.lab\"\n"
      "host_timeout = \"45s\"\n",
      "vramd.toml");
  ASSERT_TRUE(c.ok()) << c.error();
  EXPECT_EQ(c->daemon.store, "postgresql://vramd@db:5432/vramd");
  EXPECT_EQ(c->daemon.host, "gpu-1.lab");
  EXPECT_EQ(c->daemon.host_timeout, std::chrono::seconds(45));
  Result<Config> d = parse_config("", "vramd.toml");
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(d->daemon.store.empty());  // SQLite in state_dir
  EXPECT_TRUE(d->daemon.host.empty());   // the daemon reads the hostname
  EXPECT_EQ(d->daemon.host_timeout, std::chrono::seconds(30));

  EXPECT_EQ(error_of("[daemon]\nstore = \"mysql://x\"\n"),
            "vramd.toml:2:9: daemon.store: a postgresql:// URL (leave it out for SQLite in "
            "state_dir), got \"mysql://x\"");
  EXPECT_EQ(error_of("[daemon]\nstore = \"postgresql://a/b\"\nstore_url_file = \"/etc/u\"\n"),
            "vramd.toml:3:18: daemon: set store or store_url_file, not both");
  for (const char* reserved : {"any", "all"})
    EXPECT_EQ(error_of(fmt::format("[daemon]\nhost = \"{}\"\n", reserved)),
              fmt::format("vramd.toml:2:8: daemon.host: letters, digits, '-', '_' and '.' (at most "
                          "64, not \"any\" or \"all\"), got \"{}\"",
                          reserved));
  EXPECT_NE(error_of("[daemon]\nhost = \"gpu 1\"\n"), "(ok)");
  EXPECT_NE(error_of("[daemon]\nhost_timeout = \"0s\"\n"), "(ok)");
}

}  // namespace
}  // namespace vramd
