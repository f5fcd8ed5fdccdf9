#include "proxy/router.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>

namespace vramd {

namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() &&
         (s.front() == ' ' || s.front() == '\t' || s.front() == '\r' || s.front() == '\n'))
    s.remove_prefix(1);
  while (!s.empty() &&
         (s.back() == ' ' || s.back() == '\t' || s.back() == '\r' || s.back() == '\n'))
    s.remove_suffix(1);
  return s;
}

// A parameter of a header value: boundary=... in `multipart/form-data; boundary="x"`.
std::string header_param(std::string_view value, std::string_view name) {
  std::string lv = lower(value);
  std::string key = lower(name) + "=";
  size_t at = 0;
  while ((at = lv.find(key, at)) != std::string::npos) {
    if (at == 0 || lv[at - 1] == ';' || lv[at - 1] == ' ') break;
    at += key.size();
  }
  if (at == std::string::npos) return {};
  std::string_view v = value.substr(at + key.size());
  if (!v.empty() && v.front() == '"') {
    v.remove_prefix(1);
    return std::string(v.substr(0, v.find('"')));
  }
  return std::string(trim(v.substr(0, v.find(';'))));
}

std::optional<std::string> multipart_field(std::string_view body, const std::string& boundary,
                                           std::string_view field) {
  const std::string delim = "--" + boundary;
  size_t pos = body.find(delim);
  while (pos != std::string_view::npos) {
    size_t head_start = pos + delim.size();
    if (body.substr(head_start, 2) == "--") break;  // the closing delimiter
    size_t head_end = body.find("\r\n\r\n", head_start);
    if (head_end == std::string_view::npos) break;
    std::string_view head = body.substr(head_start, head_end - head_start);
    size_t next = body.find("\r\n" + delim, head_end + 4);
    if (next == std::string_view::npos) break;
    for (size_t line = 0; line < head.size();) {
      size_t eol = head.find("\r\n", line);
      std::string_view h = head.substr(line, eol == std::string_view::npos ? eol : eol - line);
      if (lower(h).rfind("content-disposition:", 0) == 0 && header_param(h, "name") == field) {
        return std::string(trim(body.substr(head_end + 4, next - head_end - 4)));
      }
      if (eol == std::string_view::npos) break;
      line = eol + 2;
    }
    pos = next + 2;
  }
  return std::nullopt;
}

}  // namespace

ModelTable::ModelTable(std::vector<ModelEntry> entries, std::map<std::string, std::string> aliases)
    : aliases_(std::move(aliases)) {
  std::set<std::string> seen;
  for (auto& e : entries) {
    if (e.model.empty() || !seen.insert(e.model).second) continue;
    entries_.push_back(std::move(e));
  }
}

const ModelEntry* ModelTable::exact(std::string_view model) const {
  for (const auto& e : entries_)
    if (e.model == model) return &e;
  return nullptr;
}

std::optional<Route> ModelTable::find(std::string_view model) const {
  auto lookup = [&](std::string_view m) -> const ModelEntry* {
    if (const ModelEntry* e = exact(m)) return e;
    // Ollama names a model without a tag "NAME:latest".
    if (m.find(':') == std::string_view::npos) return exact(std::string(m) + ":latest");
    if (m.size() > 7 && m.substr(m.size() - 7) == ":latest")
      return exact(m.substr(0, m.size() - 7));
    return nullptr;
  };
  if (const ModelEntry* e = lookup(model)) return Route{e->service, e->model, e->ollama_api};
  if (auto a = aliases_.find(std::string(model)); a != aliases_.end()) {
    if (const ModelEntry* e = lookup(a->second)) return Route{e->service, e->model, e->ollama_api};
  }
  return std::nullopt;
}

std::optional<Route> ModelTable::find_for(std::string_view path, std::string_view model) const {
  std::optional<Route> r = find(model);
  if (r && is_ollama_path(path) && !r->ollama_api) return std::nullopt;
  return r;
}

std::vector<std::string> ModelTable::known() const {
  std::set<std::string> names;
  for (const auto& e : entries_) names.insert(e.model);
  for (const auto& [alias, target] : aliases_)
    if (find(target)) names.insert(alias);
  return {names.begin(), names.end()};
}

std::string ModelTable::openai_list() const {
  nlohmann::json data = nlohmann::json::array();
  for (const auto& e : entries_) {
    data.push_back({{"id", e.model}, {"object", "model"}, {"created", 0}, {"owned_by", e.service}});
  }
  for (const auto& [alias, target] : aliases_) {
    if (auto r = find(target); r && !exact(alias)) {
      data.push_back(
          {{"id", alias}, {"object", "model"}, {"created", 0}, {"owned_by", r->service}});
    }
  }
  return nlohmann::json{{"object", "list"}, {"data", data}}.dump();
}

std::string ModelTable::ollama_tags() const {
  nlohmann::json models = nlohmann::json::array();
  for (const auto& e : entries_)
    if (e.ollama_api) models.push_back({{"name", e.model}, {"model", e.model}});
  return nlohmann::json{{"models", models}}.dump();
}

std::optional<std::string> request_model(std::string_view content_type, std::string_view body) {
  std::string ct = lower(content_type);
  if (ct.rfind("multipart/form-data", 0) == 0) {
    std::string boundary = header_param(content_type, "boundary");
    if (boundary.empty()) return std::nullopt;
    return multipart_field(body, boundary, "model");
  }
  nlohmann::json j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return std::nullopt;
  auto m = j.find("model");
  if (m == j.end() || !m->is_string()) return std::nullopt;
  return m->get<std::string>();
}

bool body_wants_stream(std::string_view content_type, std::string_view body) {
  if (lower(content_type).rfind("multipart/", 0) == 0) return false;
  nlohmann::json j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return false;
  auto s = j.find("stream");
  return s != j.end() && s->is_boolean() && s->get<bool>();
}

bool is_routed_path(std::string_view path) {
  static const std::vector<std::string_view> kPaths = {"/v1/chat/completions",
                                                       "/v1/completions",
                                                       "/v1/embeddings",
                                                       "/v1/audio/transcriptions",
                                                       "/v1/audio/speech",
                                                       "/v1/images/generations",
                                                       "/api/chat",
                                                       "/api/generate",
                                                       "/api/embed"};
  return std::find(kPaths.begin(), kPaths.end(), path) != kPaths.end();
}

bool is_ollama_path(std::string_view path) { return path.rfind("/api/", 0) == 0; }

}  // namespace vramd
