#include "services/comfyui_history.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string_view>
#include <utility>

namespace vramd {
// Named: the library is built in unity batches of one folder, where parsers.cc has its own
// member() (docs/testing.md).
namespace comfyui_history_internal {
namespace {

using nlohmann::json;

const json* member(const json& j, const char* key) {
  if (!j.is_object()) return nullptr;
  auto it = j.find(key);
  return it == j.end() ? nullptr : &*it;
}

std::string string_member(const json& j, const char* key) {
  const json* v = member(j, key);
  return v && v->is_string() ? v->get<std::string>() : "";
}

// Milliseconds since the epoch, as ComfyUI writes them (int(time.time() * 1000)); nothing for
// what is not a number from 1970 to 9999 (a cast of 1e300 to an integer is undefined behaviour).
std::optional<TimePoint> time_of_ms(const json& j) {
  constexpr std::int64_t kMaxMs = 253402300799999;  // 9999-12-31T23:59:59.999Z
  std::int64_t ms = 0;
  if (j.is_number_unsigned()) {
    auto v = j.get<std::uint64_t>();
    if (v > static_cast<std::uint64_t>(kMaxMs)) return std::nullopt;
    ms = static_cast<std::int64_t>(v);
  } else if (j.is_number_integer()) {
    ms = j.get<std::int64_t>();
  } else if (j.is_number_float()) {
    double v = j.get<double>();
    if (!std::isfinite(v) || v < 0 || v > static_cast<double>(kMaxMs)) return std::nullopt;
    ms = static_cast<std::int64_t>(v);
  } else {
    return std::nullopt;
  }
  if (ms < 0 || ms > kMaxMs) return std::nullopt;
  return TimePoint{std::chrono::milliseconds(ms)};
}

bool all_digits(const std::string& s) {
  return !s.empty() &&
         std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c) != 0; });
}

// Node ids in the order people read them: "2" before "10", numeric ids before others ("12:5",
// a subgraph's), the rest by text.
bool node_id_less(const std::string& a, const std::string& b) {
  bool da = all_digits(a), db = all_digits(b);
  if (da != db) return da;
  if (da) {
    std::string_view va(a), vb(b);
    va.remove_prefix(std::min(va.find_first_not_of('0'), va.size()));
    vb.remove_prefix(std::min(vb.find_first_not_of('0'), vb.size()));
    if (va.size() != vb.size()) return va.size() < vb.size();
    if (va != vb) return va < vb;
  }
  return a < b;
}

std::vector<std::pair<std::string, const json*>> nodes_in_id_order(const json& graph) {
  std::vector<std::pair<std::string, const json*>> nodes;
  for (auto it = graph.begin(); it != graph.end(); ++it) nodes.emplace_back(it.key(), &*it);
  std::sort(nodes.begin(), nodes.end(),
            [](const auto& x, const auto& y) { return node_id_less(x.first, y.first); });
  return nodes;
}

class Fnv1a64 {
 public:
  void add(std::string_view s) {
    for (unsigned char c : s) {
      h_ ^= c;
      h_ *= 1099511628211ULL;
    }
  }
  // A field and its end, so that "ab"+"c" and "a"+"bc" differ.
  void field(std::string_view s) {
    add(s);
    add(std::string_view("\0", 1));
  }
  std::string hex() const {
    char buf[17];
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h_));
    return buf;
  }

 private:
  std::uint64_t h_ = 14695981039346656037ULL;
};

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// The extension of the last path component ("safetensors"), "" when it has none: 1 to 11
// letters or digits after a dot that is not the first character.
std::string extension_of(const std::string& s) {
  size_t slash = s.find_last_of("/\\");
  size_t base = slash == std::string::npos ? 0 : slash + 1;
  size_t dot = s.rfind('.');
  if (dot == std::string::npos || dot <= base || dot + 1 >= s.size() || s.size() - dot - 1 > 11)
    return "";
  for (size_t i = dot + 1; i < s.size(); ++i)
    if (!std::isalnum(static_cast<unsigned char>(s[i]))) return "";
  return lower(std::string_view(s).substr(dot + 1));
}

bool is_media_or_model_file(const std::string& s) {
  static const std::array<std::string_view, 28> kExtensions = {
      "safetensors", "ckpt", "pt",  "pth",  "bin", "gguf", "sft", "onnx", "png", "jpg",
      "jpeg",        "webp", "gif", "bmp",  "tif", "tiff", "mp4", "webm", "mov", "mkv",
      "avi",         "wav",  "mp3", "flac", "ogg", "m4a",  "exr", "svg"};
  std::string ext = extension_of(s);
  return !ext.empty() &&
         std::find(kExtensions.begin(), kExtensions.end(), ext) != kExtensions.end();
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// Whether a string input's value is left out of the fingerprint (the rule in the header).
bool string_dropped(const std::string& name, const std::string& value) {
  static const std::array<std::string_view, 6> kTextInputs = {"text",   "prompt",   "text_g",
                                                              "text_l", "negative", "positive"};
  if (std::find(kTextInputs.begin(), kTextInputs.end(), name) != kTextInputs.end()) return true;
  if (value.size() > 64 || value.find('\n') != std::string::npos) return true;
  if (name == "image" || name == "video" || name == "audio") return true;
  if (is_media_or_model_file(value)) return true;
  if (ends_with(name, "_name") &&
      (!extension_of(value).empty() || value.find_first_of("/\\") != std::string::npos))
    return true;
  return false;
}

// [node_id, slot]: another node's output.
bool is_link(const json& v) {
  return v.is_array() && v.size() == 2 && (v[0].is_string() || v[0].is_number_integer()) &&
         v[1].is_number_integer();
}

std::string dump(const json& v) { return v.dump(-1, ' ', false, json::error_handler_t::replace); }

void hash_input(Fnv1a64& h, const std::string& name, const json& v) {
  h.field("i");
  h.field(name);
  if (name == "seed" || name == "noise_seed") {
    h.field("seed");
  } else if (is_link(v)) {
    h.field("link");
    h.field(v[0].is_string() ? v[0].get<std::string>() : dump(v[0]));
    h.field(dump(v[1]));
  } else if (v.is_string()) {
    const std::string& s = v.get_ref<const std::string&>();
    if (string_dropped(name, s)) {
      h.field("string");
    } else {
      h.field("s");
      h.field(s);
    }
  } else {
    h.field("v");
    h.field(dump(v));  // numbers, booleans, null; lists and objects as they are
  }
}

Result<ComfyPromptRun> run_of(const std::string& id, const json& entry) {
  const json* prompt = member(entry, "prompt");
  if (!prompt || !prompt->is_array() || prompt->size() < 3 || !(*prompt)[2].is_object())
    return make_error("no prompt graph");
  const json* status = member(entry, "status");
  const json* messages = status ? member(*status, "messages") : nullptr;
  if (!messages || !messages->is_array()) return make_error("no status messages");

  ComfyPromptRun run;
  run.prompt_id = id;
  if (prompt->size() > 3) {
    if (const json* t = member((*prompt)[3], "create_time")) run.queued_at = time_of_ms(*t);
  }
  bool cached_seen = false;
  for (const json& m : *messages) {
    if (!m.is_array() || m.size() < 2 || !m[0].is_string() || !m[1].is_object()) continue;
    const std::string& event = m[0].get_ref<const std::string&>();
    const json& data = m[1];
    const json* ts = member(data, "timestamp");
    std::optional<TimePoint> at = ts ? time_of_ms(*ts) : std::nullopt;
    if (event == "execution_start") {
      if (!run.started_at) run.started_at = at;
    } else if (event == "execution_cached") {
      const json* nodes = member(data, "nodes");
      if (!cached_seen && nodes && nodes->is_array())
        run.cached_nodes = static_cast<int>(std::min<size_t>(nodes->size(), 1u << 30));
      cached_seen = true;
    } else if (!run.outcome && event.starts_with("execution_")) {
      run.outcome = prompt_outcome_from(std::string_view(event).substr(10));  // else not an end
      if (run.outcome) run.ended_at = at;
    }
  }
  if (!run.outcome) return make_error("not finished");
  if (!run.ended_at) return make_error("no end timestamp");
  const json& graph = (*prompt)[2];
  run.workflow = comfyui_workflow_fingerprint(graph);
  run.model = comfyui_main_model(graph);
  return run;
}

}  // namespace

Result<std::vector<ComfyPromptRun>> history(const json& j) {
  if (!j.is_object()) return make_error("unexpected answer: history is not an object");
  std::vector<ComfyPromptRun> out;
  for (auto it = j.begin(); it != j.end(); ++it) {
    Result<ComfyPromptRun> run = run_of(it.key(), *it);
    if (run) out.push_back(std::move(*run));
  }
  std::sort(out.begin(), out.end(), [](const ComfyPromptRun& a, const ComfyPromptRun& b) {
    if (a.ended_at != b.ended_at) return a.ended_at < b.ended_at;
    return a.prompt_id < b.prompt_id;
  });
  return out;
}

std::string fingerprint(const json& graph) {
  if (!graph.is_object()) return "";
  Fnv1a64 h;
  for (const auto& [id, node] : nodes_in_id_order(graph)) {
    h.field("n");
    h.field(id);
    h.field(string_member(*node, "class_type"));
    const json* inputs = member(*node, "inputs");
    if (!inputs || !inputs->is_object()) continue;
    for (auto in = inputs->begin(); in != inputs->end(); ++in) hash_input(h, in.key(), *in);
  }
  return h.hex();
}

std::string main_model(const json& graph) {
  if (!graph.is_object()) return "";
  for (const auto& [id, node] : nodes_in_id_order(graph)) {
    const json* inputs = member(*node, "inputs");
    for (const char* key : {"ckpt_name", "unet_name"}) {
      std::string name = inputs ? string_member(*inputs, key) : "";
      if (!name.empty()) return name;
    }
  }
  return "";
}

std::vector<std::string> argv(const json& system_stats) {
  std::vector<std::string> out;
  const json* system = member(system_stats, "system");
  const json* list = system ? member(*system, "argv") : nullptr;
  if (!list || !list->is_array()) return out;
  for (const json& a : *list)
    if (a.is_string()) out.push_back(a.get<std::string>());
  return out;
}

}  // namespace comfyui_history_internal

using nlohmann::json;

Result<std::vector<ComfyPromptRun>> parse_comfyui_history(const json& j) {
  return comfyui_history_internal::history(j);
}

std::string comfyui_workflow_fingerprint(const json& prompt_graph) {
  return comfyui_history_internal::fingerprint(prompt_graph);
}

std::string comfyui_main_model(const json& prompt_graph) {
  return comfyui_history_internal::main_model(prompt_graph);
}

std::string parse_vllm_version(const json& j) {
  return comfyui_history_internal::string_member(j, "version");
}

std::string parse_ollama_version(const json& j) {
  return comfyui_history_internal::string_member(j, "version");
}

std::string parse_llamacpp_build_info(const json& props) {
  return comfyui_history_internal::string_member(props, "build_info");
}

std::vector<std::string> parse_comfyui_argv(const json& system_stats) {
  return comfyui_history_internal::argv(system_stats);
}

}  // namespace vramd
