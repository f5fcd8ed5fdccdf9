#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/steady_timer.hpp>
#include <cstdio>
#include <cstdlib>
#include <memory>

#include "fake_server.h"
#include "testgpu/fake_gpu_state.h"

namespace vramd::fakes {

const std::vector<std::string>& known_kinds() {
  static const std::vector<std::string> kinds = {
      "comfyui", "ollama",  "vllm",    "sglang",   "a1111",        "forge",  "textgen",
      "tabbyapi", "llamacpp", "triton", "localai", "speaches", "generic_http", "process"};
  return kinds;
}

std::string default_model(const std::string& kind) {
  if (kind == "comfyui") return "sd_xl_base_1.0.safetensors";
  if (kind == "ollama") return "llama3.2:latest";
  if (kind == "vllm" || kind == "sglang") return "Qwen/Qwen2.5-7B-Instruct";
  if (kind == "a1111" || kind == "forge") return "sd_xl_base_1.0.safetensors [31e35c80fc]";
  if (kind == "textgen" || kind == "tabbyapi") return "Qwen2.5-7B-Instruct-exl2";
  if (kind == "llamacpp") return "qwen2.5-7b-instruct-q4_k_m";
  if (kind == "triton") return "densenet_onnx";
  if (kind == "localai") return "gpt-4";
  if (kind == "speaches") return "Systran/faster-whisper-small";
  return "model";
}

std::string default_version(const std::string& kind) {
  if (kind == "comfyui") return "0.3.40";
  if (kind == "ollama") return "0.6.8";
  if (kind == "vllm") return "0.8.5";
  if (kind == "llamacpp") return "b5474-e5c834f7";
  return "";
}

Result<Options> parse_options(const std::vector<std::string>& args) {
  Options o;
  o.args = args;
  std::optional<Duration> prompt_for;  // default --busy-for
  if (const char* s = std::getenv("FAKE_NVML_STATE")) o.state_path = s;
  std::optional<int> port;
  std::optional<Bytes> asleep_keeps, weights_ram;  // defaults depend on --kind
  std::vector<std::pair<std::string, std::string>> wire_flags;  // applied once --kind is known
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&]() -> Result<std::string> {
      if (i + 1 >= args.size()) return make_error(a + " needs a value");
      return args[++i];
    };
    auto size = [&](Bytes& out) -> Status {
      auto v = value();
      if (!v) return make_error(v.error());
      auto s = parse_size(*v);
      if (!s) return make_error(a + ": " + s.error());
      out = *s;
      return Ok{};
    };
    auto duration = [&](Duration& out) -> Status {
      auto v = value();
      if (!v) return make_error(v.error());
      auto d = parse_duration(*v);
      if (!d) return make_error(a + ": " + d.error());
      out = *d;
      return Ok{};
    };
    Status st = Ok{};
    if (a == "--kind" || a == "--host" || a == "--state" || a == "--model" || a == "--port" ||
        a == "--gpu" || a == "--partial" || a == "--version") {
      auto v = value();
      if (!v) return make_error(v.error());
      if (a == "--kind") o.kind = *v;
      if (a == "--version") o.version = *v;
      if (a == "--host") o.host = *v;
      if (a == "--state") o.state_path = *v;
      if (a == "--model") o.model = *v;
      if (a == "--port" || a == "--gpu" || a == "--partial") {
        char* end = nullptr;
        long n = std::strtol(v->c_str(), &end, 10);
        if (v->empty() || *end != '\0' || n < 0 || n > 65535)
          return make_error(a + ": '" + *v + "' is not a number");
        if (a == "--port") port = static_cast<int>(n);
        if (a == "--gpu") o.gpu = static_cast<unsigned>(n);
        if (a == "--partial") {
          if (n > 100) return make_error("--partial: a percentage from 0 to 100");
          o.partial_pct = static_cast<unsigned>(n);
        }
      }
    } else if (a == "--model-bytes") {
      st = size(o.model_bytes);
    } else if (a == "--self-report") {
      Bytes b = 0;
      st = size(b);
      o.self_report = b;
    } else if (a == "--asleep-keeps" || a == "--weights-ram") {
      Bytes b = 0;
      st = size(b);
      (a == "--asleep-keeps" ? asleep_keeps : weights_ram) = b;
    } else if (a == "--unload-delay") {
      st = duration(o.unload_delay);
    } else if (a == "--slow") {
      st = duration(o.slow);
    } else if (a == "--busy-for") {
      st = duration(o.busy_for);
    } else if (a == "--prompt-seconds") {
      Duration d{0};
      st = duration(d);
      prompt_for = d;
    } else if (a == "--disable-async-offload") {
      // One of ComfyUI's own flags: no effect here, but it shows in /system_stats argv.
    } else if (a == "--unloaded") {
      o.start_unloaded = true;
    } else if (a == "--na") {
      o.na = true;
    } else if (a == "--ignore-unload") {
      o.ignore_unload = true;
    } else if (a == "--hang") {
      o.hang = true;
    } else if (a == "--http-500") {
      o.http_500 = true;
    } else if (a == "--garbage") {
      o.garbage = true;
    } else if (a == "--crash-on-unload") {
      o.crash_on_unload = true;
    } else if (a == "--router") {
      o.router = true;
    } else if (is_wire_flag(a)) {  // on the wire: fake_wire.cc
      auto v = value();
      if (!v) return make_error(v.error());
      wire_flags.emplace_back(a, *v);
    } else if (a == "--slots" || a == "--metrics") {
      (a == "--slots" ? o.slots : o.metrics) = true;
    } else {
      return make_error("unknown argument '" + a + "'");
    }
    if (!st) return st.error().empty() ? make_error(a) : make_error(st.error());
  }
  if (o.kind.empty()) return make_error("--kind is required");
  const auto& kinds = known_kinds();
  if (std::find(kinds.begin(), kinds.end(), o.kind) == kinds.end())
    return make_error("unknown --kind '" + o.kind + "'");
  if (!port) return make_error("--port is required (0 picks a free one)");
  o.port = *port;
  if (o.state_path.empty()) return make_error("--state (or FAKE_NVML_STATE) is required");
  if (o.model.empty()) o.model = default_model(o.kind);
  if (o.version.empty()) o.version = default_version(o.kind);
  o.prompt_for = prompt_for.value_or(o.busy_for);
  // A sleeping vLLM keeps its CUDA context, and level 1 keeps the weights in host RAM.
  bool vllm = o.kind == "vllm";
  o.asleep_keeps = asleep_keeps.value_or(vllm ? 500 * MiB : 0);
  o.weights_ram = weights_ram.value_or(vllm ? 256 * MiB : 0);
  auto wire = wire_options(o.kind, wire_flags);
  if (!wire) return make_error(wire.error());
  o.wire = *wire;
  return o;
}

FakeModel::FakeModel(boost::asio::io_context& io, Options options)
    : io_(io), options_(std::move(options)), pid_(static_cast<int>(::getpid())) {}

FakeModel::~FakeModel() { drop_host_weights(); }

bool FakeModel::busy() const { return std::chrono::steady_clock::now() < busy_until_; }

std::chrono::milliseconds FakeModel::busy_left() const {
  auto left = busy_until_ - std::chrono::steady_clock::now();
  if (left.count() <= 0) return std::chrono::milliseconds(0);
  return std::chrono::duration_cast<std::chrono::milliseconds>(left);
}

void FakeModel::put_bytes(Bytes bytes) {
  Status st = Ok{};
  if (bytes == 0) {
    st = remove_fake_process(options_.state_path, pid_);
  } else {
    std::optional<Bytes> used;
    if (!options_.na) used = bytes;
    st = add_fake_process(options_.state_path, options_.gpu, pid_, used, bytes);
  }
  if (!st) std::fprintf(stderr, "fake-gpu-server: state file: %s\n", st.error().c_str());
  bytes_on_gpu_ = bytes;
}

void FakeModel::hold_host_weights(Bytes bytes) {
  if (bytes == 0 || host_weights_ != nullptr) return;
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    std::perror("fake-gpu-server: mmap of the host copy of the weights");
    return;
  }
  // Untouched anonymous pages cost nothing: write every one, so RSS and MemAvailable move as
  // they do when vLLM copies its weights out.
  const auto page = static_cast<Bytes>(::sysconf(_SC_PAGESIZE));
  auto* bytes_p = static_cast<unsigned char*>(p);
  for (Bytes off = 0; off < bytes; off += page) bytes_p[off] = 1;
  host_weights_ = p;
  host_weights_bytes_ = bytes;
}

void FakeModel::drop_host_weights() {
  if (host_weights_ != nullptr) ::munmap(host_weights_, host_weights_bytes_);
  host_weights_ = nullptr;
  host_weights_bytes_ = 0;
}

void FakeModel::load(bool initial) {
  if (!initial) ++reload_calls_;
  ++generation_;  // a delayed unload still pending must not free the reloaded model
  loaded_ = true;
  if (asleep()) {
    // Level 1's weights come back from host RAM; level 2's memory comes back holding garbage.
    if (sleep_level_ == 2) needs_reload_weights_ = true;
    drop_host_weights();
    sleep_level_ = 0;
  }
  if (bytes_on_gpu_ != options_.model_bytes) put_bytes(options_.model_bytes);
}

void FakeModel::unload(const std::string& body) {
  ++unload_calls_;
  last_unload_body_ = nlohmann::json::parse(body, nullptr, false);
  if (last_unload_body_.is_discarded()) last_unload_body_ = body;
  if (options_.crash_on_unload) {
    // A dying process's memory is freed by the driver.
    (void)remove_fake_process(options_.state_path, pid_);
    std::fflush(stdout);
    ::_exit(1);
  }
  if (!loaded_) return;
  loaded_ = false;
  if (options_.ignore_unload) return;
  // --asleep-keeps is the floor: what the process holds whatever the model frees.
  Bytes keep = std::min(options_.model_bytes,
                        std::max(options_.model_bytes * (100 - options_.partial_pct) / 100,
                                 options_.asleep_keeps));
  if (options_.unload_delay.count() == 0) {
    put_bytes(keep);
    return;
  }
  auto timer = std::make_shared<boost::asio::steady_timer>(io_, options_.unload_delay);
  std::uint64_t gen = ++generation_;
  timer->async_wait([this, timer, gen, keep](const boost::system::error_code& ec) {
    if (!ec && gen == generation_ && !loaded_) put_bytes(keep);
  });
}

void FakeModel::sleep(int level, const std::string& body) {
  // vLLM's executor only logs "Executor is already sleeping." and returns.
  if (asleep()) {
    unload(body);  // counted; unloaded already, so nothing changes
    return;
  }
  bool weights_on_gpu = loaded_ && !options_.ignore_unload;
  unload(body);
  sleep_level_ = level;
  if (level == 1 && weights_on_gpu) hold_host_weights(options_.weights_ram);
}

void FakeModel::reload_weights() {
  ++reload_weights_calls_;
  needs_reload_weights_ = false;
}

void FakeModel::work() { work(options_.busy_for); }

void FakeModel::work(std::chrono::milliseconds busy) {
  ++work_count_;
  if (!loaded_) load();
  make_busy(busy);
}

void FakeModel::make_busy(std::chrono::milliseconds d) {
  auto until = std::chrono::steady_clock::now() + d;
  if (until > busy_until_) busy_until_ = until;
}

void FakeModel::set_busy(std::chrono::milliseconds d) {
  busy_until_ = std::chrono::steady_clock::now() + d;
}

void FakeModel::release() {
  if (bytes_on_gpu_ > 0 || loaded_) (void)remove_fake_process(options_.state_path, pid_);
  bytes_on_gpu_ = 0;
}

nlohmann::json FakeModel::fake_state_json() const {
  return {{"kind", options_.kind},
          {"model", options_.model},
          {"pid", pid_},
          {"loaded", loaded_},
          {"busy", busy()},
          {"bytes_on_gpu", bytes_on_gpu_},
          {"unload_calls", unload_calls_},
          {"reload_calls", reload_calls_},
          {"requests", requests_},
          {"last_unload_body", last_unload_body_},
          {"asleep", asleep()},
          {"sleep_level", sleep_level_},
          {"host_weights_bytes", host_weights_bytes_},
          {"reload_weights_calls", reload_weights_calls_},
          {"reset_prefix_cache_calls", reset_prefix_cache_calls_},
          {"needs_reload_weights", needs_reload_weights_}};
}

FakeModel::Gpu FakeModel::gpu() const {
  Gpu g;
  auto state = read_fake_gpu_state(options_.state_path);
  if (!state || !state->contains("gpus") || !(*state)["gpus"].is_array()) return g;
  const auto& gpus = (*state)["gpus"];
  if (options_.gpu >= gpus.size()) return g;
  const auto& j = gpus[options_.gpu];
  if (j.contains("name") && j["name"].is_string()) g.name = j["name"];
  if (j.contains("uuid") && j["uuid"].is_string()) g.uuid = j["uuid"];
  if (j.contains("total") && j["total"].is_number()) g.total = j["total"];
  if (j.contains("used") && j["used"].is_number()) g.used = j["used"];
  return g;
}

Bytes FakeModel::self_report_or(Bytes fallback) const {
  if (!loaded_) return 0;
  return options_.self_report.value_or(fallback);
}

}  // namespace vramd::fakes
