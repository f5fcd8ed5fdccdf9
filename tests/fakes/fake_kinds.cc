// Each kind's API: paths and shapes from docs' service-apis reference and real servers' answers.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "fake_server.h"

namespace vramd::fakes {
namespace {

using nlohmann::json;

std::string now_rfc3339() {
  return format_rfc3339(std::chrono::time_point_cast<std::chrono::milliseconds>(
      std::chrono::system_clock::now()));
}

std::int64_t now_unix() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string fake_uuid(std::uint64_t n) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "5f0c6a2e-9b1d-4c3e-8a7f-%012llx",
                static_cast<unsigned long long>(n));
  return buf;
}

bool is_post(const Call& c) { return c.method == "POST"; }
bool is_get(const Call& c) { return c.method == "GET" || c.method == "HEAD"; }

std::string json_string(const Call& c, const char* key) {
  if (!c.json.is_object()) return "";
  auto it = c.json.find(key);
  return it != c.json.end() && it->is_string() ? it->get<std::string>() : "";
}

// FastAPI's 404 (vLLM, SGLang, A1111, text-generation-webui, TabbyAPI, speaches).
HttpResponse fastapi_404() { return json_reply(404, {{"detail", "Not Found"}}); }

HttpResponse prometheus(const std::string& text) {
  return text_reply(200, text, "text/plain; version=0.0.4; charset=utf-8");
}

std::string gauge(const std::string& name, const std::string& help, const std::string& labels,
                  double value, const char* type = "gauge") {
  char num[64];
  std::snprintf(num, sizeof num, "%.1f", value);
  return "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n" + name + "{" +
         labels + "} " + num + "\n";
}

std::string process_metrics() {
  return "# HELP process_open_fds Number of open file descriptors.\n"
         "# TYPE process_open_fds gauge\nprocess_open_fds 42.0\n";
}

// An OpenAI-style completion answer (vLLM, SGLang, llama.cpp, LocalAI, textgen, TabbyAPI).
HttpResponse openai_reply(FakeModel& m, const Call& c) {
  m.work();
  bool chat = c.path.find("chat") != std::string::npos;
  json choice = {{"index", 0}, {"finish_reason", "stop"}, {"logprobs", nullptr}};
  if (chat)
    choice["message"] = {{"role", "assistant"}, {"content", "Hello!"}};
  else
    choice["text"] = "Hello!";
  json usage = {{"prompt_tokens", 5}, {"completion_tokens", 2}, {"total_tokens", 7}};
  return json_reply(200, {{"id", "cmpl-" + std::to_string(m.work_count())},
                          {"object", chat ? "chat.completion" : "text_completion"},
                          {"created", now_unix()},
                          {"model", m.options().model},
                          {"choices", json::array({choice})},
                          {"usage", usage}});
}

bool is_openai_work(const Call& c) {
  return is_post(c) && (c.path == "/v1/completions" || c.path == "/v1/chat/completions");
}

HttpResponse openai_models(FakeModel& m, const std::string& owner, bool listed) {
  json data = json::array();
  if (listed)
    data.push_back(
        {{"id", m.options().model}, {"object", "model"}, {"created", now_unix()}, {"owned_by", owner}});
  return json_reply(200, {{"object", "list"}, {"data", data}});
}

// ComfyUI's prompts, kept in memory as the real one keeps them (gone when it restarts): each
// runs --prompt-seconds after the one before it, on the wall clock its history reports.
struct ComfyPrompt {
  std::uint64_t number = 0;
  std::string id;
  json graph;
  json extra_data;  // the request's extra_data, client_id, create_time (ms)
  json outputs;     // outputs_to_execute: the output nodes' ids
  json cached;      // execution_cached's nodes
  std::int64_t start_ms = 0, end_ms = 0;
  std::string end_event = "execution_success";  // execution_error, execution_interrupted
  std::string failed_node;                      // the node of an error or an interrupt
};

struct ComfyPrompts {
  std::vector<ComfyPrompt> list;  // in the order queued; finished ones are the history
  json last_graph;                // the graph executed before: its unchanged nodes are cached
};

ComfyPrompts& comfy_prompts() {
  static ComfyPrompts p;
  return p;
}

// ComfyUI keeps at most this many prompts in its history (execution.py MAXIMUM_HISTORY_SIZE).
constexpr std::size_t kComfyHistoryMax = 10000;

// A prompt id unique across restarts, as ComfyUI's uuid4 ones are: a daemon that keeps each
// prompt once by its id must not take a restarted fake's first prompt for an old one.
std::string comfy_prompt_id(std::uint64_t n) {
  static const std::uint64_t run = [] {
    auto t = std::chrono::system_clock::now().time_since_epoch().count();
    return static_cast<std::uint64_t>(t) ^ (static_cast<std::uint64_t>(::getpid()) << 40);
  }();
  char buf[64];
  std::snprintf(buf, sizeof buf, "%08llx-%04llx-4%03llx-8a7f-%012llx",
                static_cast<unsigned long long>(run & 0xffffffffULL),
                static_cast<unsigned long long>((run >> 32) & 0xffffULL),
                static_cast<unsigned long long>((run >> 48) & 0xfffULL),
                static_cast<unsigned long long>(n));
  return buf;
}

std::int64_t wall_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

bool is_output_node(const json& node) {
  if (!node.is_object() || !node.contains("class_type") || !node["class_type"].is_string())
    return false;
  const std::string t = node["class_type"];
  return t.find("Save") != std::string::npos || t.find("Preview") != std::string::npos;
}

// The nodes ComfyUI would take from its cache: those the previous prompt ran with the same
// class and inputs, whose linked inputs come from cached nodes too.
json comfy_cached_nodes(const json& graph, const json& last) {
  std::set<std::string> cached;
  if (!graph.is_object() || !last.is_object()) return json::array();
  for (auto it = graph.begin(); it != graph.end(); ++it)
    if (last.contains(it.key()) && last[it.key()] == *it) cached.insert(it.key());
  for (bool changed = true; changed;) {
    changed = false;
    for (auto id = cached.begin(); id != cached.end();) {
      const json& node = graph[*id];
      bool upstream_cached = true;
      if (node.is_object() && node.contains("inputs") && node["inputs"].is_object()) {
        for (const json& v : node["inputs"]) {
          if (v.is_array() && v.size() == 2 && v[0].is_string() &&
              !cached.count(v[0].get<std::string>()))
            upstream_cached = false;
        }
      }
      if (upstream_cached) {
        ++id;
      } else {
        id = cached.erase(id);
        changed = true;
      }
    }
  }
  return json(cached);
}

// POST /prompt: queued behind the others; a node of class FakeError makes it end in
// execution_error.
ComfyPrompt& comfy_queue_prompt(FakeModel& m, const Call& c) {
  ComfyPrompts& p = comfy_prompts();
  std::int64_t now = wall_ms();
  std::int64_t start = now;
  if (!p.list.empty()) start = std::max(start, p.list.back().end_ms);
  ComfyPrompt q;
  q.graph = c.json["prompt"];
  q.start_ms = start;
  q.end_ms = start + m.options().prompt_for.count();
  m.work(std::chrono::milliseconds(q.end_ms - now));
  q.number = m.work_count();
  q.id = comfy_prompt_id(m.work_count());
  q.extra_data = json::object();
  if (c.json.contains("extra_data") && c.json["extra_data"].is_object())
    q.extra_data = c.json["extra_data"];
  if (c.json.contains("client_id")) q.extra_data["client_id"] = c.json["client_id"];
  q.extra_data["create_time"] = now;
  q.outputs = json::array();
  if (q.graph.is_object()) {
    for (auto it = q.graph.begin(); it != q.graph.end(); ++it) {
      if (is_output_node(*it)) q.outputs.push_back(it.key());
      if (it->is_object() && it->value("class_type", json()) == "FakeError") {
        q.end_event = "execution_error";
        q.failed_node = it.key();
      }
    }
  }
  q.cached = comfy_cached_nodes(q.graph, p.last_graph);
  p.last_graph = q.graph;
  p.list.push_back(std::move(q));
  // The history holds the newest kComfyHistoryMax finished prompts.
  if (p.list.size() > kComfyHistoryMax + 100) p.list.erase(p.list.begin(), p.list.begin() + 100);
  return p.list.back();
}

json comfy_queue_item(const ComfyPrompt& q) {
  return json::array({q.number, q.id, q.graph, q.extra_data, q.outputs});
}

std::string comfy_node_type(const ComfyPrompt& q) {
  if (!q.graph.is_object() || !q.graph.contains(q.failed_node)) return "";
  const json& n = q.graph[q.failed_node];
  return n.is_object() && n.contains("class_type") && n["class_type"].is_string()
             ? n["class_type"].get<std::string>()
             : "";
}

// One finished prompt as GET /history shows it (execution.py PromptQueue.task_done).
nlohmann::ordered_json comfy_history_entry(const ComfyPrompt& q) {
  using ojson = nlohmann::ordered_json;
  bool ok = q.end_event == "execution_success";
  ojson messages = ojson::array();
  messages.push_back(
      ojson::array({"execution_start", {{"prompt_id", q.id}, {"timestamp", q.start_ms}}}));
  messages.push_back(ojson::array(
      {"execution_cached", {{"nodes", q.cached}, {"prompt_id", q.id}, {"timestamp", q.start_ms}}}));
  ojson end = {{"prompt_id", q.id}};
  if (!ok) {
    end["node_id"] = q.failed_node;
    end["node_type"] = comfy_node_type(q);
    end["executed"] = json::array();
  }
  if (q.end_event == "execution_error") {
    end["exception_message"] = "the fake's FakeError node failed";
    end["exception_type"] = "RuntimeError";
    end["traceback"] = json::array();
    end["current_inputs"] = json::object();
    end["current_outputs"] = json::object();
  }
  end["timestamp"] = q.end_ms;
  messages.push_back(ojson::array({q.end_event, end}));
  ojson outputs = ojson::object(), meta = ojson::object();
  if (ok) {
    for (const json& id : q.outputs) {
      std::string node = id.get<std::string>();
      char file[64];
      std::snprintf(file, sizeof file, "ComfyUI_%05llu_.png",
                    static_cast<unsigned long long>(q.number));
      outputs[node] = {
          {"images", ojson::array({{{"filename", file}, {"subfolder", ""}, {"type", "output"}}})}};
      meta[node] = {{"node_id", node},
                    {"display_node", node},
                    {"parent_node", nullptr},
                    {"real_node_id", node}};
    }
  }
  return {{"prompt", comfy_queue_item(q)},
          {"outputs", outputs},
          {"status",
           {{"status_str", ok ? "success" : "error"}, {"completed", ok}, {"messages", messages}}},
          {"meta", meta}};
}

// GET /history[?max_items=N] (the newest N, oldest first), GET /history/{prompt_id}.
HttpResponse comfy_history(const Call& c) {
  std::int64_t now = wall_ms();
  std::vector<const ComfyPrompt*> done;
  for (const ComfyPrompt& q : comfy_prompts().list)
    if (q.end_ms <= now) done.push_back(&q);
  if (done.size() > kComfyHistoryMax) done.erase(done.begin(), done.end() - kComfyHistoryMax);
  std::string id = c.path.size() > 9 ? c.path.substr(9) : "";  // after "/history/"
  if (!id.empty()) {
    done.erase(
        std::remove_if(done.begin(), done.end(), [&](const ComfyPrompt* q) { return q->id != id; }),
        done.end());
  } else if (auto it = c.query.find("max_items"); it != c.query.end()) {
    char* end = nullptr;
    long n = std::strtol(it->second.c_str(), &end, 10);
    if (!it->second.empty() && *end == '\0' && n >= 0 && static_cast<std::size_t>(n) < done.size())
      done.erase(done.begin(), done.end() - n);
  }
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  for (const ComfyPrompt* q : done) out[q->id] = comfy_history_entry(*q);
  return json_response(200, out.dump());
}

// POST /interrupt ({"prompt_id": id}: only when that one runs): the running prompt ends now,
// execution_interrupted; the ones behind it move up.
void comfy_interrupt(FakeModel& m, const Call& c) {
  std::int64_t now = wall_ms();
  std::string only = json_string(c, "prompt_id");
  auto& list = comfy_prompts().list;
  auto running = std::find_if(list.begin(), list.end(), [&](const ComfyPrompt& q) {
    return q.start_ms <= now && now < q.end_ms;
  });
  if (running == list.end() || (!only.empty() && running->id != only)) return;
  running->end_ms = now;
  running->end_event = "execution_interrupted";
  if (running->graph.is_object() && !running->graph.empty())
    running->failed_node = running->graph.begin().key();
  std::int64_t t = now;
  for (auto it = running + 1; it != list.end(); ++it) {
    it->start_ms = t;
    it->end_ms = t = t + m.options().prompt_for.count();
  }
  m.set_busy(std::chrono::milliseconds(t - now));
}

// ComfyUI (aiohttp). Every route is also served under /api/.
HttpResponse comfyui(FakeModel& m, Call c) {
  if (c.path.rfind("/api/", 0) == 0) c.path = c.path.substr(4);
  const auto& o = m.options();
  if (is_get(c) && c.path == "/queue") {
    std::int64_t now = wall_ms();
    json running = json::array(), pending = json::array();
    for (const ComfyPrompt& q : comfy_prompts().list) {
      if (q.start_ms <= now && now < q.end_ms) running.push_back(comfy_queue_item(q));
      if (q.start_ms > now) pending.push_back(comfy_queue_item(q));
    }
    // Busy without a prompt (/fake/busy): a prompt of its own.
    if (running.empty() && pending.empty() && m.busy())
      running.push_back(json::array({m.work_count(), fake_uuid(m.work_count()),
                                     {{"3", {{"class_type", "KSampler"}}}},
                                     {{"client_id", "vramd-test"}}, json::array({"9"})}));
    return json_reply(200, {{"queue_running", running}, {"queue_pending", pending}});
  }
  if (is_get(c) && c.path == "/prompt") {
    std::int64_t now = wall_ms();
    std::size_t left = 0;
    for (const ComfyPrompt& q : comfy_prompts().list) left += q.end_ms > now ? 1 : 0;
    if (left == 0 && m.busy()) left = 1;
    return json_reply(200, {{"exec_info", {{"queue_remaining", left}}}});
  }
  if (is_post(c) && c.path == "/prompt") {
    if (!c.json.is_object() || !c.json.contains("prompt"))
      return json_reply(400, {{"error",
                               {{"type", "no_prompt"},
                                {"message", "No prompt provided"},
                                {"details", "No prompt provided"},
                                {"extra_info", json::object()}}},
                              {"node_errors", json::object()}});
    const ComfyPrompt& q = comfy_queue_prompt(m, c);
    return json_reply(200,
                      {{"prompt_id", q.id}, {"number", q.number}, {"node_errors", json::object()}});
  }
  if (is_get(c) && (c.path == "/history" || c.path.rfind("/history/", 0) == 0))
    return comfy_history(c);
  if (is_post(c) && c.path == "/history") {
    // {"clear": true} empties it; {"delete": [ids]} drops those. Queued prompts stay.
    std::int64_t now = wall_ms();
    auto& list = comfy_prompts().list;
    bool clear = c.json.is_object() && c.json.value("clear", false) == true;
    std::set<std::string> drop;
    if (c.json.is_object() && c.json.contains("delete") && c.json["delete"].is_array())
      for (const json& id : c.json["delete"])
        if (id.is_string()) drop.insert(id.get<std::string>());
    list.erase(std::remove_if(list.begin(), list.end(),
                              [&](const ComfyPrompt& q) {
                                return q.end_ms <= now && (clear || drop.count(q.id));
                              }),
               list.end());
    return empty_reply(200);
  }
  if (is_post(c) && c.path == "/free") {
    // Both flags default to false; the answer is an empty 200 either way.
    if (c.json.is_object() && c.json.value("unload_models", false)) m.unload(c.body);
    return empty_reply(200);
  }
  if (is_post(c) && c.path == "/interrupt") {
    comfy_interrupt(m, c);
    return empty_reply(200);
  }
  if (is_get(c) && c.path == "/system_stats") {
    auto g = m.gpu();
    // cudaMallocAsync: torch's own counter stays near 0.1 GB however much the models hold.
    Bytes torch_total = m.self_report_or(100 * MiB);
    json device = {{"name", "cuda:" + std::to_string(o.gpu) + " " + g.name + " : cudaMallocAsync"},
                   {"type", "cuda"},
                   {"index", o.gpu},
                   {"vram_total", g.total},
                   {"vram_free", g.total > g.used ? g.total - g.used : 0},
                   {"torch_vram_total", torch_total},
                   {"torch_vram_free", torch_total / 4}};
    json argv = json::array({"main.py"});
    for (const std::string& a : o.args) argv.push_back(a);
    return json_reply(200,
                      {{"system",
                        {{"os", "linux"},
                         {"ram_total", 67271630848ULL},
                         {"ram_free", 51539607552ULL},
                         {"comfyui_version", o.version},
                         {"python_version", "3.12.3 (main, Apr 10 2025, 12:00:00) [GCC 13.2.0]"},
                         {"pytorch_version", "2.7.0+cu128"},
                         {"embedded_python", false},
                         {"argv", argv}}},
                       {"devices", json::array({device})}});
  }
  return text_reply(404, "404: Not Found");
}

// Ollama (gin). Unload is /api/generate or /api/chat with keep_alive 0 and no prompt/messages.
HttpResponse ollama(FakeModel& m, const Call& c) {
  const auto& o = m.options();
  if (is_get(c) && c.path == "/") return text_reply(200, "Ollama is running");
  if (is_get(c) && c.path == "/api/version") return json_reply(200, {{"version", o.version}});
  json details = {{"parent_model", ""},
                  {"format", "gguf"},
                  {"family", "llama"},
                  {"families", json::array({"llama"})},
                  {"parameter_size", "3.2B"},
                  {"quantization_level", "Q4_K_M"}};
  const std::string digest = "a80c4f17acd55265feec403c7aef86be0c25983ab279d83f3bcd3abbcb5b8b72";
  if (is_get(c) && c.path == "/api/ps") {
    json models = json::array();
    if (m.loaded()) {
      auto expires = std::chrono::time_point_cast<std::chrono::milliseconds>(
          std::chrono::system_clock::now() + std::chrono::minutes(5));
      models.push_back({{"name", o.model},
                        {"model", o.model},
                        {"size", o.model_bytes},
                        {"digest", digest},
                        {"details", details},
                        {"expires_at", format_rfc3339(expires)},
                        {"size_vram", m.self_report_or(o.model_bytes)},
                        {"context_length", 4096}});
    }
    return json_reply(200, {{"models", models}});
  }
  if (is_get(c) && c.path == "/api/tags") {
    return json_reply(200, {{"models", json::array({{{"name", o.model},
                                                     {"model", o.model},
                                                     {"modified_at", now_rfc3339()},
                                                     {"size", o.model_bytes},
                                                     {"digest", digest},
                                                     {"details", details}}})}});
  }
  bool chat = c.path == "/api/chat";
  if (is_post(c) && (chat || c.path == "/api/generate")) {
    if (!c.json.is_object()) return json_reply(400, {{"error", "invalid request body"}});
    std::string name = json_string(c, "model");
    if (name.empty()) return json_reply(400, {{"error", "model is required"}});
    if (name != o.model && name + ":latest" != o.model)
      return json_reply(404, {{"error", "model '" + name + "' not found"}});
    bool has_work = chat ? (c.json.contains("messages") && c.json["messages"].is_array() &&
                            !c.json["messages"].empty())
                         : !json_string(c, "prompt").empty();
    auto ka = c.json.find("keep_alive");
    bool keep_alive_zero = ka != c.json.end() &&
                           ((ka->is_number() && ka->get<double>() == 0) ||
                            (ka->is_string() && (*ka == "0" || *ka == "0s" || *ka == "0m")));
    json reply = {{"model", name}, {"created_at", now_rfc3339()}};
    if (chat) reply["message"] = {{"role", "assistant"}, {"content", ""}};
    else reply["response"] = "";
    reply["done"] = true;
    if (!has_work && keep_alive_zero) {
      m.unload(c.body);
      reply["done_reason"] = "unload";
      return json_reply(200, reply);
    }
    if (!has_work) {
      if (!m.loaded()) m.load();
      reply["done_reason"] = "load";
      return json_reply(200, reply);
    }
    m.work();
    if (chat) reply["message"]["content"] = "Hello!";
    else reply["response"] = "Hello!";
    reply["done_reason"] = "stop";
    reply["total_duration"] = 123456789;
    reply["eval_count"] = 2;
    reply["eval_duration"] = 40000000;  // 2 tokens in 40 ms: 50 tokens/s
    if (keep_alive_zero) m.unload("");  // answers, then unloads, as ollama does
    return json_reply(200, reply);
  }
  // Ollama's OpenAI-compatible endpoints (openai.go): the model must exist, then the OpenAI shape.
  if (is_openai_work(c)) {
    std::string name = json_string(c, "model");
    if (name != o.model && name + ":latest" != o.model)
      return json_reply(404, {{"error", {{"message", "model \"" + name + "\" not found, try pulling it first"},
                                         {"type", "api_error"}, {"param", nullptr}, {"code", nullptr}}}});
    if (!m.loaded()) m.load();
    return openai_reply(m, c);
  }
  return text_reply(404, "404 page not found");
}

// vLLM's ErrorResponse (OpenAI's shape).
json vllm_error(int code, const std::string& message, const std::string& type) {
  return {{"error", {{"message", message}, {"type", type}, {"param", nullptr}, {"code", code}}}};
}

// vLLM: sleep mode (needs --enable-sleep-mode and VLLM_SERVER_DEV_MODE=1 on the real one).
HttpResponse vllm(FakeModel& m, const Call& c) {
  const auto& o = m.options();
  if (is_get(c) && c.path == "/metrics") {
    std::string labels = "engine=\"0\",model_name=\"" + o.model + "\"";
    return prometheus(
        process_metrics() +
        gauge("vllm:num_requests_running", "Number of requests in model execution batches.",
              labels, m.busy() ? 1 : 0) +
        gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", labels,
              0) +
        gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", labels,
              m.busy() ? 0.1 : 0) +
        gauge("vllm:request_success_total", "Count of successfully processed requests.",
              labels + ",finished_reason=\"stop\"", static_cast<double>(m.work_count()),
              "counter"));
  }
  if (is_get(c) && c.path == "/health") return empty_reply(200);
  if (is_get(c) && c.path == "/version") return json_reply(200, {{"version", o.version}});
  if (is_post(c) && c.path == "/sleep") {
    // ?level= (default 1); a JSON body's "level" when the query has none.
    std::string level = "1";
    auto it = c.query.find("level");
    if (it != c.query.end()) {
      level = it->second;
    } else if (c.json.is_object() && c.json.contains("level")) {
      const json& l = c.json["level"];
      level = l.is_string() ? l.get<std::string>() : l.dump();
    }
    if (level != "1" && level != "2") return json_reply(400, {{"detail", "level must be 1 or 2"}});
    m.sleep(std::stoi(level), c.body.empty() ? json{{"level", std::stoi(level)}}.dump() : c.body);
    return empty_reply(200);
  }
  if (is_post(c) && c.path == "/wake_up") {
    // ?tags=weights&tags=kv_cache, none: everything. The KV cache holds no bytes of its own here,
    // so tags=weights is the whole wake and tags=kv_cache alone changes nothing.
    auto [first, last] = c.query_all.equal_range("tags");
    bool weights = first == last;
    for (auto t = first; t != last; ++t) weights |= t->second == "weights";
    if (weights && !m.loaded()) m.load();
    return empty_reply(200);
  }
  if (is_post(c) && c.path == "/collective_rpc") {
    if (!c.json.is_object()) return json_reply(400, {{"detail", "JSON decode error"}});
    if (!c.json.contains("method"))
      return json_reply(400, {{"detail", "Missing 'method' in request body"}});
    if (json_string(c, "method") != "reload_weights")
      return json_reply(500, vllm_error(500, "the fake runs no worker method but reload_weights",
                                        "InternalServerError"));
    // The weights' memory is unmapped while they sleep: loading into it fails.
    if (!m.loaded())
      return json_reply(500, vllm_error(500, "reload_weights while the weights sleep: "
                                             "POST /wake_up?tags=weights first",
                                        "InternalServerError"));
    m.reload_weights();
    return json_reply(200, {{"results", json::array({nullptr})}});
  }
  if (is_post(c) && c.path == "/reset_prefix_cache") {
    m.reset_prefix_cache();
    return empty_reply(200);
  }
  if (is_get(c) && c.path == "/is_sleeping") return json_reply(200, {{"is_sleeping", !m.loaded()}});
  // Its API server lists the served names without the engine: asleep too.
  if (is_get(c) && c.path == "/v1/models")
    return openai_models(m, "vllm", m.loaded() || m.asleep());
  if (is_openai_work(c)) {
    if (auto refused = work_refused(m)) return std::move(*refused);
    return openai_reply(m, c);
  }
  return fastapi_404();
}

// SGLang: memory saver (needs --enable-memory-saver on the real one).
HttpResponse sglang(FakeModel& m, const Call& c) {
  const auto& o = m.options();
  if (is_get(c) && c.path == "/metrics") {
    std::string labels = "model_name=\"" + o.model + "\"";
    return prometheus(
        process_metrics() +
        gauge("sglang:num_running_reqs", "The number of running requests.", labels,
              m.busy() ? 1 : 0) +
        gauge("sglang:num_queue_reqs", "The number of requests in the waiting queue.", labels, 0) +
        gauge("sglang:token_usage", "The token usage.", labels, m.busy() ? 0.05 : 0));
  }
  if (is_get(c) && (c.path == "/health" || c.path == "/health_generate")) return empty_reply(200);
  if (is_post(c) && c.path == "/release_memory_occupation") {
    m.unload(c.body);
    return empty_reply(200);
  }
  if (is_post(c) && c.path == "/resume_memory_occupation") {
    if (!m.loaded()) m.load();
    return empty_reply(200);
  }
  if (is_get(c) && c.path == "/get_model_info")
    return json_reply(200, {{"model_path", o.model},
                            {"tokenizer_path", o.model},
                            {"is_generation", true}});
  // Its served name, its memory released or not (as the real one).
  if (is_get(c) && c.path == "/v1/models") return openai_models(m, "sglang", true);
  if (is_openai_work(c) || (is_post(c) && c.path == "/generate")) return openai_reply(m, c);
  return fastapi_404();
}

// AUTOMATIC1111 stable-diffusion-webui and Forge (--api).
HttpResponse a1111(FakeModel& m, const Call& c) {
  const auto& o = m.options();
  if (is_get(c) && c.path == "/sdapi/v1/progress") {
    bool busy = m.busy();
    json state = {{"skipped", false},
                  {"interrupted", false},
                  {"job", busy ? "scripts_txt2img" : ""},
                  {"job_count", busy ? 1 : 0},
                  {"job_timestamp", busy ? "20261129120000" : "0"},
                  {"job_no", 0},
                  {"sampling_step", busy ? 10 : 0},
                  {"sampling_steps", busy ? 20 : 0}};
    if (o.kind == "forge") state["stopping_generation"] = false;
    double eta = busy ? static_cast<double>(m.busy_left().count()) / 1000.0 : 0.0;
    return json_reply(200, {{"progress", busy ? 0.5 : 0.0},
                            {"eta_relative", eta},
                            {"state", state},
                            {"current_image", nullptr},
                            {"textinfo", nullptr}});
  }
  if (is_post(c) && c.path == "/sdapi/v1/unload-checkpoint") {
    m.unload(c.body);
    return json_reply(200, json::object());
  }
  if (is_post(c) && c.path == "/sdapi/v1/reload-checkpoint") {
    if (!m.loaded()) m.load();
    return json_reply(200, json::object());
  }
  if (is_get(c) && c.path == "/sdapi/v1/memory") {
    auto g = m.gpu();
    Bytes mine = m.self_report_or(o.model_bytes);
    json pair = {{"current", mine}, {"peak", mine + 512 * MiB}};
    return json_reply(
        200, {{"ram", {{"free", 51539607552.0}, {"used", 15732023296.0}, {"total", 67271630848.0}}},
              {"cuda",
               {{"system",
                 {{"free", g.total > g.used ? g.total - g.used : 0},
                  {"used", g.used},
                  {"total", g.total}}},
                {"active", pair},
                {"allocated", pair},
                {"reserved", {{"current", mine + 256 * MiB}, {"peak", mine + 768 * MiB}}},
                {"inactive", {{"current", 4 * MiB}, {"peak", 64 * MiB}}},
                {"events", {{"retries", 0}, {"oom", 0}}}}}});
  }
  if (is_get(c) && c.path == "/sdapi/v1/options")
    return json_reply(200, {{"sd_model_checkpoint", m.loaded() ? json(o.model) : json(nullptr)}});
  if (is_post(c) && (c.path == "/sdapi/v1/txt2img" || c.path == "/sdapi/v1/img2img")) {
    m.work();
    return json_reply(200, {{"images", json::array({"iVBORw0KGgo="})},
                            {"parameters", c.json.is_object() ? c.json : json::object()},
                            {"info", "{\"seed\": 1}"}});
  }
  return fastapi_404();
}

// text-generation-webui's OpenAI-compatible API extension.
HttpResponse textgen(FakeModel& m, const Call& c) {
  const auto& o = m.options();
  if (is_post(c) && c.path == "/v1/internal/model/unload") {
    m.unload(c.body);
    return json_reply(200, "OK");
  }
  if (is_post(c) && c.path == "/v1/internal/model/load") {
    if (!c.json.is_object() || !c.json.contains("model_name"))
      return json_reply(422, {{"detail", json::array({{{"type", "missing"},
                                                       {"loc", json::array({"body", "model_name"})},
                                                       {"msg", "Field required"}}})}});
    if (!m.loaded()) m.load();
    return json_reply(200, "OK");
  }
  if (is_get(c) && c.path == "/v1/internal/model/info")
    return json_reply(200, {{"model_name", m.loaded() ? o.model : "None"},
                            {"lora_names", json::array()}});
  if (is_get(c) && c.path == "/v1/internal/health") return json_reply(200, {{"status", "ok"}});
  if (is_get(c) && c.path == "/v1/models") return openai_models(m, "user", m.loaded());
  if (is_openai_work(c)) return openai_reply(m, c);
  return fastapi_404();
}

// TabbyAPI (ExLlama). Unload and load need the admin key on the real one; the fake takes any.
HttpResponse tabbyapi(FakeModel& m, const Call& c) {
  const auto& o = m.options();
  if (is_post(c) && c.path == "/v1/model/unload") {
    m.unload(c.body);
    return empty_reply(200);
  }
  if (is_post(c) && c.path == "/v1/model/load") {
    if (!m.loaded()) m.load();
    // The real one streams load progress as server-sent events.
    return text_reply(200,
                      "data: {\"model_type\": \"model\", \"module\": 1, \"modules\": 2, "
                      "\"status\": \"processing\"}\n\n"
                      "data: {\"model_type\": \"model\", \"module\": 2, \"modules\": 2, "
                      "\"status\": \"finished\"}\n\n",
                      "text/event-stream; charset=utf-8");
  }
  if (is_get(c) && c.path == "/health") return json_reply(200, {{"status", "healthy"}, {"issues", json::array()}});
  if (is_get(c) && c.path == "/v1/model") {
    if (!m.loaded()) return json_reply(400, {{"detail", "No models are currently loaded."}});
    return json_reply(200, {{"id", o.model},
                            {"object", "model"},
                            {"created", now_unix()},
                            {"owned_by", "tabbyAPI"},
                            {"parameters", {{"max_seq_len", 32768}, {"cache_mode", "Q4"}}}});
  }
  if (is_get(c) && c.path == "/v1/models") return openai_models(m, "tabbyAPI", m.loaded());
  if (is_openai_work(c)) return openai_reply(m, c);
  return fastapi_404();
}

json llamacpp_error(int code, const std::string& message, const std::string& type) {
  return {{"error", {{"code", code}, {"message", message}, {"type", type}}}};
}

// llama.cpp's llama-server (b4747's answers): /slots and /metrics only with --slots / --metrics,
// else 501 as the real one started with its defaults; --router: router mode (/models,
// /models/load, /models/unload).
HttpResponse llamacpp(FakeModel& m, const Call& c) {
  const auto& o = m.options();
  // A plain server's model: the file it loaded (its id too, as without --alias), or a name given
  // as --model, then served as if by `--alias NAME` from /models/NAME.gguf.
  const bool is_path = o.model.size() > 5 && o.model.substr(o.model.size() - 5) == ".gguf";
  const std::string model_path = is_path ? o.model : "/models/" + o.model + ".gguf";
  if (is_get(c) && c.path == "/health") {
    if (!o.router && !m.loaded())
      return json_reply(503, llamacpp_error(503, "Loading model", "unavailable_error"));
    return json_reply(200, {{"status", "ok"}});
  }
  auto slot = [&](int id) {
    bool processing = id == 0 && m.busy();
    return json{{"id", id},
                {"id_task", processing ? static_cast<std::int64_t>(m.work_count()) : -1},
                {"n_ctx", 4096},
                {"speculative", false},
                {"is_processing", processing},
                {"non_causal", false},
                {"params", {{"n_predict", -1}, {"temperature", 0.8}, {"stream", false}}},
                {"prompt", ""},
                {"next_token",
                 {{"has_next_token", processing},
                  {"has_new_line", false},
                  {"n_remain", -1},
                  {"n_decoded", processing ? 7 : 0},
                  {"stopping_word", ""}}}};
  };
  if (is_get(c) && c.path == "/slots") {
    if (!o.slots)
      return json_reply(501, llamacpp_error(501,
                                            "This server does not support slots endpoint. Start "
                                            "it with `--slots`",
                                            "not_supported_error"));
    return json_reply(200, json::array({slot(0), slot(1)}));
  }
  if (is_get(c) && c.path == "/props") {
    // llama-server's GET /props; build_info is "b<build number>-<commit>".
    return json_reply(200, {{"default_generation_settings", slot(0)},
                            {"total_slots", 2},
                            {"model_path", model_path},
                            {"chat_template", ""},
                            {"bos_token", "<|endoftext|>"},
                            {"eos_token", "<|im_end|>"},
                            {"build_info", o.version}});
  }
  if (is_get(c) && c.path == "/metrics") {
    if (!o.metrics)
      return json_reply(501, llamacpp_error(501,
                                            "This server does not support metrics endpoint. "
                                            "Start it with `--metrics`",
                                            "not_supported_error"));
    return prometheus(gauge("llamacpp:requests_processing", "Number of requests processing.", "",
                            m.busy() ? 1 : 0) +
                      gauge("llamacpp:requests_deferred", "Number of requests deferred.", "", 0));
  }
  if (is_get(c) && (c.path == "/models" || c.path == "/v1/models")) {
    json entry = {
        {"id", o.model}, {"object", "model"}, {"created", now_unix()}, {"owned_by", "llamacpp"}};
    if (o.router) {
      entry["in_cache"] = true;
      entry["path"] = model_path;
      entry["status"] = {{"value", m.loaded() ? "loaded" : "unloaded"}};
    } else {
      entry["meta"] = {{"vocab_type", 2}, {"n_vocab", 151936},        {"n_ctx_train", 32768},
                       {"n_embd", 3584},  {"n_params", 7615616512LL}, {"size", o.model_bytes}};
    }
    return json_reply(200, {{"object", "list"}, {"data", json::array({entry})}});
  }
  if (o.router && is_post(c) && (c.path == "/models/unload" || c.path == "/models/load")) {
    std::string id = json_string(c, "model");
    if (id != o.model)
      return json_reply(400, llamacpp_error(400, "model not found: " + id, "invalid_request_error"));
    if (c.path == "/models/unload") {
      if (!m.loaded())
        return json_reply(400, llamacpp_error(400, "model is not loaded", "invalid_request_error"));
      m.unload(c.body);
    } else if (!m.loaded()) {
      m.load();
    }
    return json_reply(200, {{"success", true}});
  }
  if (is_post(c) && (c.path == "/completion" || c.path == "/completions")) {
    m.work();
    return json_reply(200, {{"content", "Hello!"},
                            {"id_slot", 0},
                            {"stop", true},
                            {"model", o.model},
                            {"tokens_predicted", 2},
                            {"tokens_evaluated", 5}});
  }
  if (is_openai_work(c)) return openai_reply(m, c);
  return json_reply(404, llamacpp_error(404, "File Not Found", "not_found_error"));
}

// Triton Inference Server (HTTP/REST, KServe v2); --model-control-mode=explicit for load/unload.
HttpResponse triton(FakeModel& m, const Call& c) {
  const auto& o = m.options();
  if (is_get(c) && (c.path == "/v2/health/ready" || c.path == "/v2/health/live"))
    return empty_reply(200);
  if (is_get(c) && c.path == "/metrics") {
    auto g = m.gpu();
    std::string model = "model=\"" + o.model + "\",version=\"1\"";
    std::string gpu = "gpu_uuid=\"" + g.uuid + "\"";
    return prometheus(
        gauge("nv_inference_pending_request_count",
              "Instantaneous number of pending requests awaiting execution per-model.", model,
              m.busy() ? 1 : 0) +
        gauge("nv_inference_request_success",
              "Number of successful inference requests, all batch sizes", model,
              static_cast<double>(m.work_count()), "counter") +
        gauge("nv_gpu_memory_total_bytes", "GPU total memory, in bytes", gpu,
              static_cast<double>(g.total)) +
        gauge("nv_gpu_memory_used_bytes", "GPU used memory, in bytes", gpu,
              static_cast<double>(g.used)));
  }
  const std::string repo = "/v2/repository/models/";
  if (is_post(c) && c.path.rfind(repo, 0) == 0) {
    std::string rest = c.path.substr(repo.size());
    auto slash = rest.rfind('/');
    std::string name = slash == std::string::npos ? "" : rest.substr(0, slash);
    std::string action = slash == std::string::npos ? rest : rest.substr(slash + 1);
    if (action == "unload" || action == "load") {
      if (name != o.model)
        return json_reply(400, {{"error", "failed to " + action + " '" + name +
                                              "', failed to poll from model repository"}});
      if (action == "unload")
        m.unload(c.body);
      else if (!m.loaded())
        m.load();
      return empty_reply(200);
    }
  }
  if (is_post(c) && c.path == "/v2/repository/index") {
    json entry = {{"name", o.model}, {"version", "1"}, {"state", m.loaded() ? "READY" : "UNAVAILABLE"}};
    if (!m.loaded()) entry["reason"] = "unloaded";
    return json_reply(200, json::array({entry}));
  }
  if (is_get(c) && c.path == "/v2/models/" + o.model + "/ready")
    return m.loaded() ? empty_reply(200) : empty_reply(400);
  if (is_post(c) && c.path == "/v2/models/" + o.model + "/infer") {
    m.work();
    return json_reply(200, {{"model_name", o.model},
                            {"model_version", "1"},
                            {"outputs", json::array({{{"name", "OUTPUT0"},
                                                      {"datatype", "FP32"},
                                                      {"shape", json::array({1})},
                                                      {"data", json::array({0.5})}}})}});
  }
  return json_reply(404, {{"error", "Not Found"}});
}

// LocalAI (fiber). /backend/monitor takes the model as ?model= or in a JSON body.
HttpResponse localai(FakeModel& m, const Call& c) {
  const auto& o = m.options();
  if (is_get(c) && (c.path == "/readyz" || c.path == "/healthz")) return text_reply(200, "OK");
  if (c.path == "/backend/monitor" && (is_get(c) || is_post(c))) {
    auto it = c.query.find("model");
    std::string name = it != c.query.end() ? it->second : json_string(c, "model");
    if (name.empty()) return json_reply(400, {{"error", {{"code", 400}, {"message", "model is required"}}}});
    bool mine = name == o.model && m.loaded();
    int state = !mine ? 0 : m.busy() ? 1 : 2;
    json breakdown = json::object();
    Bytes total = 0;
    if (mine) {
      total = m.self_report_or(o.model_bytes);
      breakdown["gpu"] = total;
    }
    return json_reply(200, {{"state", state}, {"memory", {{"total", total}, {"breakdown", breakdown}}}});
  }
  if (is_post(c) && c.path == "/backend/shutdown") {
    std::string name = json_string(c, "model");
    if (name == o.model) m.unload(c.body);
    return empty_reply(200);
  }
  if (is_get(c) && c.path == "/v1/models") return openai_models(m, "localai", m.loaded());
  if (is_openai_work(c)) return openai_reply(m, c);
  return text_reply(404, "Cannot " + c.method + " " + c.path);
}

// speaches (faster-whisper server). Model ids contain '/': /api/ps/Systran/faster-whisper-small.
HttpResponse speaches(FakeModel& m, const Call& c) {
  const auto& o = m.options();
  if (is_get(c) && c.path == "/health") return text_reply(200, "OK");
  if (is_get(c) && c.path == "/api/ps") {
    json models = json::array();
    if (m.loaded()) models.push_back(o.model);
    return json_reply(200, {{"models", models}});
  }
  const std::string ps = "/api/ps/";
  if (c.path.rfind(ps, 0) == 0 && (c.method == "DELETE" || is_post(c))) {
    std::string id = c.path.substr(ps.size());
    if (c.method == "DELETE") {
      if (id != o.model || !m.loaded())
        return json_reply(404, {{"detail", "Model '" + id + "' is not loaded."}});
      m.unload(c.body);
      return empty_reply(204);
    }
    if (id != o.model) return json_reply(404, {{"detail", "Model '" + id + "' not found"}});
    if (m.loaded()) return json_reply(409, {{"detail", "Model '" + id + "' is already loaded."}});
    m.load();
    return empty_reply(201);
  }
  if (is_post(c) && (c.path == "/v1/audio/transcriptions" || c.path == "/v1/audio/translations")) {
    m.work();
    return json_reply(200, {{"text", "Hello."}});
  }
  if (is_openai_work(c)) return openai_reply(m, c);
  return fastapi_404();
}

// A minimal server for the generic_http adapter.
HttpResponse generic_http(FakeModel& m, const Call& c) {
  if (is_get(c) && c.path == "/busy")
    return json_reply(200, {{"busy", m.busy()}, {"queue", m.busy() ? 1 : 0}});
  if (is_get(c) && c.path == "/health") return json_reply(200, {{"status", "ok"}});
  if (is_post(c) && c.path == "/unload") {
    m.unload(c.body);
    return json_reply(200, {{"unloaded", true}});
  }
  if (is_post(c) && c.path == "/load") {
    if (!m.loaded()) m.load();
    return json_reply(200, {{"loaded", true}});
  }
  if (is_post(c) && c.path == "/work") {
    m.work();
    return json_reply(200, {{"ok", true}});
  }
  if (is_get(c) && c.path == "/metrics")
    return prometheus("# HELP generic_busy 1 while busy.\n# TYPE generic_busy gauge\ngeneric_busy " +
                      std::string(m.busy() ? "1" : "0") + "\n");
  return text_reply(404, "not found");
}

}  // namespace

bool is_metrics_path(const std::string& path) { return path == "/metrics"; }

std::optional<HttpResponse> work_refused(const FakeModel& m) {
  if (m.asleep()) {
    std::string level = std::to_string(m.sleep_level());
    return json_reply(503, vllm_error(503, "The engine is sleeping (level " + level +
                                               "): POST /wake_up first",
                                      "ServiceUnavailableError"));
  }
  if (m.needs_reload_weights())
    return json_reply(500, vllm_error(500, "The weights were not reloaded after a level-2 sleep: "
                                           "POST /collective_rpc {\"method\":\"reload_weights\"}",
                                      "InternalServerError"));
  return std::nullopt;
}

HttpResponse handle_kind(FakeModel& m, const Call& c) {
  const std::string& k = m.options().kind;
  if (k == "comfyui") return comfyui(m, c);
  if (k == "ollama") return ollama(m, c);
  if (k == "vllm") return vllm(m, c);
  if (k == "sglang") return sglang(m, c);
  if (k == "a1111" || k == "forge") return a1111(m, c);
  if (k == "textgen") return textgen(m, c);
  if (k == "tabbyapi") return tabbyapi(m, c);
  if (k == "llamacpp") return llamacpp(m, c);
  if (k == "triton") return triton(m, c);
  if (k == "localai") return localai(m, c);
  if (k == "speaches") return speaches(m, c);
  if (k == "generic_http") return generic_http(m, c);
  return text_reply(404, "404 page not found");  // process: no API
}

}  // namespace vramd::fakes
