// The fake's behaviour on the wire: each kind's real server's traits
// (../shared/reference/transport.md), and the flags that change them.
#include <algorithm>
#include <array>
#include <cstdlib>
#include <thread>

#include "fake_server.h"

namespace vramd::fakes {

namespace {

constexpr std::array<const char*, 7> kWireFlags = {
    "--workers",        "--keep-alive",   "--max-requests", "--keep-alive-header",
    "--close-on-error", "--split-writes", "--nodelay"};

Result<bool> wire_on_off(const std::string& flag, const std::string& v) {
  if (v == "on") return true;
  if (v == "off") return false;
  return make_error(flag + ": 'on' or 'off', not '" + v + "'");
}

Result<std::size_t> wire_count(const std::string& flag, const std::string& v) {
  char* end = nullptr;
  long n = std::strtol(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || n < 0 || n > 100000)
    return make_error(flag + ": '" + v + "' is not a number from 0 to 100000");
  return static_cast<std::size_t>(n);
}

}  // namespace

bool is_wire_flag(const std::string& arg) {
  return std::find(kWireFlags.begin(), kWireFlags.end(), arg) != kWireFlags.end();
}

WireOptions default_wire(const std::string& kind) {
  using std::chrono::seconds;
  WireOptions w;
  if (kind == "llamacpp") {
    // llama-server b4747 (cpp-httplib v0.19, before PR #12020): --threads-http -1 is
    // max(n_parallel + 2, hardware_concurrency - 1) workers, n_parallel 1 by default; a 5 s idle
    // timeout and 100 requests per connection, compiled in; the head and the body in two sends,
    // Nagle on; errors keep the connection (the close on >= 400 came with cpp-httplib 0.28).
    unsigned hw = std::max(1u, std::thread::hardware_concurrency());
    w.http.workers = std::max<std::size_t>(1 + 2, hw - 1);
    w.keep_alive = seconds(5);
    w.http.max_requests = 100;
    w.http.keep_alive_header = true;
    w.http.split_writes = true;
  } else if (kind == "vllm" || kind == "sglang" || kind == "tabbyapi" || kind == "textgen" ||
             kind == "speaches" || kind == "a1111" || kind == "forge") {
    // uvicorn: head and body in two transport writes, TCP_NODELAY from asyncio/uvloop; its 5 s
    // keep-alive, 30 s for A1111/Forge's --timeout-keep-alive; no worker limit.
    w.keep_alive = kind == "a1111" || kind == "forge" ? seconds(30) : seconds(5);
    w.http.split_writes = true;
    w.http.nodelay = true;
  } else if (kind == "ollama" || kind == "localai") {
    // Go net/http: TCP_NODELAY, a small answer in one write; Ollama sets no idle timeout,
    // LocalAI 120 s (v4.2.0 on).
    if (kind == "localai") w.keep_alive = seconds(120);
    w.http.nodelay = true;
  } else if (kind == "comfyui") {
    // aiohttp >= 3.12: head and the first body chunk in one send; its 3630 s keep-alive.
    w.keep_alive = seconds(3630);
    w.http.nodelay = true;
  } else {
    // triton, generic_http, process: no reference; the HTTP server's own ways, an hour's idle.
    w.keep_alive = seconds(3600);
  }
  return w;
}

Result<WireOptions> wire_options(const std::string& kind,
                                 const std::vector<std::pair<std::string, std::string>>& flags) {
  WireOptions w = default_wire(kind);
  for (const auto& [flag, v] : flags) {
    if (flag == "--workers" || flag == "--max-requests") {
      auto n = wire_count(flag, v);
      if (!n) return make_error(n.error());
      (flag == "--workers" ? w.http.workers : w.http.max_requests) = *n;
    } else if (flag == "--keep-alive") {
      if (v == "none") {
        w.keep_alive = std::nullopt;
        continue;
      }
      auto d = parse_duration(v);
      if (!d) return make_error(flag + ": " + d.error());
      if (d->count() <= 0) return make_error(flag + ": a duration above 0, or 'none'");
      w.keep_alive = *d;
    } else {
      auto b = wire_on_off(flag, v);
      if (!b) return make_error(b.error());
      if (flag == "--keep-alive-header") w.http.keep_alive_header = *b;
      if (flag == "--close-on-error") w.http.close_on_error = *b;
      if (flag == "--split-writes") w.http.split_writes = *b;
      if (flag == "--nodelay") w.http.nodelay = *b;
    }
  }
  return w;
}

}  // namespace vramd::fakes
