// The front door's routing: which service answers a request's `model`, and the model list of
// GET /v1/models. Pure functions of the models snapshot and the aliases.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "proxy/hooks.h"

namespace vramd {

struct Route {
  std::string service;
  std::string model;  // the name the service knows (an alias resolved)
  bool ollama_api = false;  // the service serves Ollama's API (ModelEntry::ollama_api)
};

class ModelTable {
 public:
  // `entries` in order of preference: a model two services serve goes to the first.
  ModelTable(std::vector<ModelEntry> entries, std::map<std::string, std::string> aliases);

  // Exact name, then an alias, then Ollama's implicit ":latest" either way.
  std::optional<Route> find(std::string_view model) const;
  // find() for a request to `path`: Ollama's own paths (/api/...) reach only services that serve
  // Ollama's API (ModelEntry::ollama_api); the OpenAI ones reach every service.
  std::optional<Route> find_for(std::string_view path, std::string_view model) const;
  // Every model name and alias, sorted, for error messages.
  std::vector<std::string> known() const;
  // The OpenAI list: {"object":"list","data":[{"id","object":"model","created":0,"owned_by"}]}.
  std::string openai_list() const;
  // Ollama's GET /api/tags shape: {"models":[{"name","model"}]}, of the models whose service
  // serves Ollama's API only (the others would answer /api/chat with 404).
  std::string ollama_tags() const;

 private:
  std::vector<ModelEntry> entries_;  // deduplicated by model
  std::map<std::string, std::string> aliases_;
  const ModelEntry* exact(std::string_view model) const;
};

// The request's `model`: a JSON body's "model" string, or the "model" field of a
// multipart/form-data body. nullopt when there is none.
std::optional<std::string> request_model(std::string_view content_type, std::string_view body);

// True for the front door's routed paths (/v1/chat/completions, ..., /api/chat).
bool is_routed_path(std::string_view path);
// True for Ollama's own API paths (/api/chat, /api/generate, /api/embed, /api/tags).
bool is_ollama_path(std::string_view path);

// Whether a request body asks for a stream ("stream": true in JSON).
bool body_wants_stream(std::string_view content_type, std::string_view body);

}  // namespace vramd
