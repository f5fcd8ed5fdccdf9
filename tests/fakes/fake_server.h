// A fake GPU model server for tests: answers one server kind's HTTP API (the paths and shapes of
// docs' service-apis reference) and holds "GPU memory" by putting its own pid into the test GPU's
// state file (testgpu/fake_gpu_state.h), so that an unload shows up in the GPU's numbers.
// Single-threaded: everything runs on one io_context, so nothing here needs a lock.
#pragma once

// GCC 12 needs <utility> before Boost's awaitable.hpp.
#include <utility>

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/result.h"
#include "core/units.h"
#include "server/http_server.h"

namespace vramd::fakes {

// How the fake behaves on the wire (fake_wire.cc): by default as its kind's real server does
// (../shared/reference/transport.md); README.md "On the wire" lists the flags.
struct WireOptions {
  HttpWire http;                       // workers, requests per connection, headers, writes, TCP
  std::optional<Duration> keep_alive;  // an idle keep-alive connection closed after; nullopt: never
};

// The command line (README.md lists every flag).
struct Options {
  std::string kind;
  int port = 0;
  std::string host = "127.0.0.1";
  std::string state_path;  // default $FAKE_NVML_STATE
  unsigned gpu = 0;
  Bytes model_bytes = 16 * GiB;
  std::string model;  // default per kind
  bool start_unloaded = false;
  bool na = false;                      // the process's "used" is null (N/A), as under WSL
  std::optional<Bytes> self_report;     // what the server says about its own memory
  Duration unload_delay{0};             // unload → memory leaves the state this much later
  unsigned partial_pct = 100;           // share of the bytes an unload frees
  bool ignore_unload = false;           // answer the unload, free nothing
  bool hang = false;                    // accept connections, never answer
  bool http_500 = false;                // every API path answers 500
  bool garbage = false;                 // every API path answers invalid JSON / metrics
  Duration slow{0};                     // every API answer delayed this much
  bool crash_on_unload = false;         // free the process's memory and _exit(1) on unload
  Duration busy_for{2000};              // a work request keeps it busy this long
  // comfyui: how long an executed prompt takes (prompts run one after another); default busy_for.
  Duration prompt_for{2000};
  std::string version;  // what the server reports; default_version(kind)
  // The command line as given, without argv[0]: ComfyUI's /system_stats argv is "main.py" and
  // these (so a flag such as --disable-async-offload, accepted and ignored, shows there).
  std::vector<std::string> args;
  bool router = false;                  // llamacpp: router mode (/models, /models/unload)
  // llamacpp: llama-server's own --slots and --metrics; off (501 not_supported_error) by default.
  bool slots = false;
  bool metrics = false;
  // An unload leaves at least this much on the GPU: a sleeping vLLM keeps its CUDA context
  // (about 300–400 MB, held until exit). Default 500MiB for vllm, 0 for the other kinds.
  Bytes asleep_keeps = 0;
  // vLLM's level-1 sleep copies the weights to host RAM: this much real anonymous memory is held
  // until the wake. Default 256MiB for vllm, 0 for the other kinds.
  Bytes weights_ram = 0;

  // On the wire (fake_wire.cc): --workers, --keep-alive, --max-requests, --keep-alive-header,
  // --close-on-error, --split-writes, --nodelay; default_wire(kind) unless given.
  WireOptions wire;
};

// Parses argv (without argv[0]). Error text is for people.
Result<Options> parse_options(const std::vector<std::string>& args);
// The model name a kind reports when --model is not given.
std::string default_model(const std::string& kind);
// The version a kind reports when --version is not given: comfyui 0.3.40 (/system_stats), ollama
// 0.6.8 (/api/version), vllm 0.8.5 (/version), llamacpp b5474-e5c834f7 (/props build_info); ""
// for the kinds that report none.
std::string default_version(const std::string& kind);
// Every kind the fake knows ("forge" is a1111's alias).
const std::vector<std::string>& known_kinds();

// The wire traits of a kind's real server (the table in fake_wire.cc).
WireOptions default_wire(const std::string& kind);
// True for the flags wire_options reads.
bool is_wire_flag(const std::string& arg);
// default_wire(kind) with the wire flags given (flag, value), in order. Error text is for people.
Result<WireOptions> wire_options(const std::string& kind,
                                 const std::vector<std::pair<std::string, std::string>>& flags);

// The request split into what handlers need.
struct Call {
  std::string method;
  std::string path;                          // without the query
  std::map<std::string, std::string> query;  // decoded loosely (no %-escapes in our tests)
  std::multimap<std::string, std::string> query_all;  // repeated keys too (?tags=a&tags=b)
  std::string body;
  nlohmann::json json;  // the body parsed; discarded (is_discarded) when not JSON
};
Call make_call(const HttpRequest& req);

// The model the server holds, its memory in the state file, and what tests can ask about it.
class FakeModel {
 public:
  FakeModel(boost::asio::io_context& io, Options options);
  ~FakeModel();
  FakeModel(const FakeModel&) = delete;
  FakeModel& operator=(const FakeModel&) = delete;

  const Options& options() const { return options_; }
  bool loaded() const { return loaded_; }
  // Bytes this process holds in the state file right now.
  Bytes bytes_on_gpu() const { return bytes_on_gpu_; }
  bool busy() const;
  std::chrono::milliseconds busy_left() const;

  // Puts the full model into the state (replacing what is there). Counts a reload unless `initial`.
  // Asleep, it is the wake: the host copy is freed; after level 2 the weights need a reload.
  void load(bool initial = false);
  // The server's unload: from now on its API says unloaded; the memory leaves after
  // --unload-delay (--partial: only part of it; --ignore-unload: none). With --crash-on-unload it
  // frees the process's memory and _exits(1) here. Already unloaded: counted, nothing changes.
  void unload(const std::string& body);
  // vLLM's sleep: an unload that leaves the API serving names, level 1 with the weights in host
  // RAM (--weights-ram). Already asleep: counted as an unload, nothing changes, the level stays.
  void sleep(int level, const std::string& body);
  bool asleep() const { return sleep_level_ != 0; }
  int sleep_level() const { return sleep_level_; }  // 0 awake
  // Woken after a level-2 sleep: the weights are garbage until reload_weights.
  bool needs_reload_weights() const { return needs_reload_weights_; }
  void reload_weights();
  void reset_prefix_cache() { ++reset_prefix_cache_calls_; }
  // A request that does work: loads the model when unloaded, then is busy for --busy-for (or
  // `busy`: ComfyUI's queue of prompts).
  void work();
  void work(std::chrono::milliseconds busy);
  void make_busy(std::chrono::milliseconds d);
  // Busy exactly `d` from now, shorter too (ComfyUI's /interrupt ends the running prompt).
  void set_busy(std::chrono::milliseconds d);
  // Takes the process off the state file (SIGTERM, exit).
  void release();

  // Counters for /fake/state.
  void count_request() { ++requests_; }
  nlohmann::json fake_state_json() const;
  std::uint64_t work_count() const { return work_count_; }

  // The GPU this server runs on, from the state file: name, uuid, total, used (0 when unreadable).
  struct Gpu {
    std::string name = "NVIDIA GeForce RTX 3090";
    std::string uuid = "GPU-00000000-0000-0000-0000-000000000000";
    Bytes total = 24 * GiB;
    Bytes used = 0;
  };
  Gpu gpu() const;
  // What the server reports about its own memory: --self-report, else `fallback`, when loaded.
  Bytes self_report_or(Bytes fallback) const;

 private:
  void put_bytes(Bytes bytes);
  void hold_host_weights(Bytes bytes);
  void drop_host_weights();

  boost::asio::io_context& io_;
  Options options_;
  int pid_;
  bool loaded_ = false;
  Bytes bytes_on_gpu_ = 0;
  std::uint64_t generation_ = 0;  // a pending delayed unload applies only to its generation
  std::chrono::steady_clock::time_point busy_until_{};
  std::uint64_t unload_calls_ = 0;
  std::uint64_t reload_calls_ = 0;
  std::uint64_t requests_ = 0;
  std::uint64_t work_count_ = 0;
  nlohmann::json last_unload_body_;  // null until the first unload
  int sleep_level_ = 0;              // 0 awake, else the level of the sleep it is in
  bool needs_reload_weights_ = false;
  void* host_weights_ = nullptr;  // the level-1 copy of the weights (mmap'd)
  Bytes host_weights_bytes_ = 0;
  std::uint64_t reload_weights_calls_ = 0;
  std::uint64_t reset_prefix_cache_calls_ = 0;
};

// Response helpers, with the content types the real servers use.
HttpResponse text_reply(unsigned status, const std::string& body,
                        const std::string& content_type = "text/plain; charset=utf-8");
HttpResponse json_reply(unsigned status, const nlohmann::json& body);
HttpResponse empty_reply(unsigned status);

// What a work request gets instead of the work (vLLM asleep: 503; woken from level 2 without
// reload_weights: 500), in vLLM's OpenAI error shape; nullopt: do the work.
std::optional<HttpResponse> work_refused(const FakeModel& model);
// The kind's API: every path but /fake/*. Never blocks.
HttpResponse handle_kind(FakeModel& model, const Call& call);
// True for paths whose answers are Prometheus text (for --garbage).
bool is_metrics_path(const std::string& path);

}  // namespace vramd::fakes
