#include "services/parsers.h"

#include <climits>
#include <cmath>
#include <cstdint>

namespace vramd {
namespace {

using nlohmann::json;

// A byte count: a non-negative number (servers write 5137025024 or 5.1e9).
std::optional<Bytes> bytes_of(const json& j) {
  if (j.is_number_unsigned()) return j.get<Bytes>();
  if (j.is_number_integer()) {
    auto v = j.get<std::int64_t>();
    return v >= 0 ? std::optional<Bytes>(static_cast<Bytes>(v)) : std::nullopt;
  }
  if (j.is_number_float()) {
    double v = j.get<double>();
    // Below 2^64: casting 3e73 to an unsigned 64-bit is undefined behaviour (found by fuzzing).
    return v >= 0 && v < 18446744073709551616.0 ? std::optional<Bytes>(static_cast<Bytes>(v))
                                                 : std::nullopt;
  }
  return std::nullopt;
}

// A small integer code (a slot or backend state): an integer that fits in int, else nothing.
// get<int>() on 8e78 or 2^40 is undefined behaviour, and servers' numbers are not ours to trust.
std::optional<int> small_int(const json& j) {
  if (j.is_number_unsigned()) {
    auto v = j.get<std::uint64_t>();
    return v <= static_cast<std::uint64_t>(INT_MAX) ? std::optional<int>(static_cast<int>(v))
                                                     : std::nullopt;
  }
  if (j.is_number_integer()) {
    auto v = j.get<std::int64_t>();
    return v >= INT_MIN && v <= INT_MAX ? std::optional<int>(static_cast<int>(v)) : std::nullopt;
  }
  if (j.is_number_float()) {
    double v = j.get<double>();
    if (std::isfinite(v) && v == std::trunc(v) && v >= INT_MIN && v <= INT_MAX)
      return static_cast<int>(v);
  }
  return std::nullopt;
}

const json* member(const json& j, const char* key) {
  if (!j.is_object()) return nullptr;
  auto it = j.find(key);
  return it == j.end() ? nullptr : &*it;
}

Error shape(const std::string& what) { return make_error("unexpected answer: " + what); }

}  // namespace

Result<ComfyQueue> parse_comfyui_queue(const json& j) {
  const json* running = member(j, "queue_running");
  const json* pending = member(j, "queue_pending");
  if (!running || !pending || !running->is_array() || !pending->is_array()) {
    return shape("no queue_running/queue_pending lists");
  }
  return ComfyQueue{static_cast<int>(running->size()), static_cast<int>(pending->size())};
}

Result<ComfyStats> parse_comfyui_system_stats(const json& j) {
  const json* devices = member(j, "devices");
  const json* system = member(j, "system");
  if (!devices || !devices->is_array() || !system || !system->is_object()) {
    return shape("no system and devices");
  }
  ComfyStats out;
  if (!devices->empty()) {
    if (const json* t = member((*devices)[0], "torch_vram_total"))
      out.torch_vram_total = bytes_of(*t);
  }
  if (const json* r = member(*system, "ram_total")) out.ram_total = bytes_of(*r);
  if (const json* v = member(*system, "comfyui_version"); v && v->is_string()) {
    out.version = v->get<std::string>();
  }
  return out;
}

Result<std::vector<OllamaModel>> parse_ollama_ps(const json& j) {
  const json* models = member(j, "models");
  if (!models || !(models->is_array() || models->is_null())) return shape("no models list");
  std::vector<OllamaModel> out;
  if (models->is_null()) return out;
  for (const json& m : *models) {
    const json* name = member(m, "name");
    if (!name || !name->is_string()) name = member(m, "model");
    if (!name || !name->is_string()) return shape("a model without a name");
    OllamaModel model;
    model.name = name->get<std::string>();
    if (const json* s = member(m, "size")) model.size = bytes_of(*s).value_or(0);
    if (const json* s = member(m, "size_vram")) model.size_vram = bytes_of(*s).value_or(0);
    if (const json* e = member(m, "expires_at"); e && e->is_string()) {
      Result<TimePoint> t = parse_rfc3339(e->get<std::string>());
      if (t) model.expires_at = *t;
    }
    out.push_back(std::move(model));
  }
  return out;
}

std::optional<double> sum_metrics(const PromExposition& e, const std::vector<std::string>& names) {
  std::optional<double> total;
  for (const std::string& n : names) {
    if (std::optional<double> s = e.sum(n)) total = total.value_or(0.0) + *s;
  }
  return total;
}

std::optional<bool> busy_from_metrics(const PromExposition& e,
                                      const std::vector<std::string>& names) {
  std::optional<double> total = sum_metrics(e, names);
  if (!total) return std::nullopt;
  return *total > 0;
}

Result<bool> parse_a1111_progress(const json& j) {
  const json* state = member(j, "state");
  const json* count = state ? member(*state, "job_count") : nullptr;
  if (!count || !count->is_number()) return shape("no state.job_count");
  return count->get<double>() != 0;
}

Result<A1111Memory> parse_a1111_memory(const json& j) {
  const json* cuda = member(j, "cuda");
  const json* ram = member(j, "ram");
  if (!cuda && !ram) return shape("no cuda or ram");
  A1111Memory out;
  if (cuda) {
    const json* reserved = member(*cuda, "reserved");
    if (const json* cur = reserved ? member(*reserved, "current") : nullptr) {
      out.cuda_reserved = bytes_of(*cur);
    }
  }
  if (ram) {
    if (const json* used = member(*ram, "used")) out.ram_used = bytes_of(*used);
  }
  return out;
}

Result<std::optional<std::string>> parse_textgen_model_info(const json& j) {
  const json* name = member(j, "model_name");
  if (!name || !(name->is_string() || name->is_null())) return shape("no model_name");
  if (name->is_null()) return std::optional<std::string>();
  std::string n = name->get<std::string>();
  if (n.empty() || n == "None") return std::optional<std::string>();
  return std::optional<std::string>(n);
}

Result<std::optional<std::string>> parse_tabby_model(const json& j) {
  const json* id = member(j, "id");
  if (!id || !(id->is_string() || id->is_null())) return shape("no id");
  if (id->is_null() || id->get<std::string>().empty()) return std::optional<std::string>();
  return std::optional<std::string>(id->get<std::string>());
}

Result<std::pair<bool, std::string>> parse_tabby_health(const json& j) {
  const json* status = member(j, "status");
  if (!status || !status->is_string()) return shape("no status");
  std::string s = status->get<std::string>();
  std::string issues;
  if (const json* list = member(j, "issues"); list && list->is_array()) {
    for (const json& i : *list) {
      if (!issues.empty()) issues += "; ";
      issues += i.is_string() ? i.get<std::string>() : i.dump();
    }
  }
  return std::make_pair(s == "healthy", issues.empty() ? s : s + ": " + issues);
}

Result<bool> parse_llamacpp_slots(const json& j) {
  if (!j.is_array()) return shape("/slots is not a list");
  for (const json& slot : j) {
    if (const json* p = member(slot, "is_processing"); p && p->is_boolean()) {
      if (p->get<bool>()) return true;
    } else if (const json* st = member(slot, "state"); st && st->is_number()) {
      if (st->get<double>() != 0) return true;  // before llama.cpp PR #10162: 0 idle, 1 processing
    } else {
      return shape("a slot without is_processing");
    }
  }
  return false;
}

Result<std::vector<std::string>> parse_llamacpp_models(const json& j) {
  const json* list = j.is_array() ? &j : member(j, "data");
  if (!list || !list->is_array()) return shape("/models has no data list");
  std::vector<std::string> out;
  for (const json& m : *list) {
    const json* id = member(m, "id");
    if (!id || !id->is_string()) id = member(m, "model");
    if (!id || !id->is_string()) return shape("a model without an id");
    // Router mode says which are loaded; a plain server lists its one model, loaded.
    bool loaded = true;
    if (const json* status = member(m, "status")) {
      const json* value = status->is_object() ? member(*status, "value") : status;
      if (value && value->is_string()) loaded = value->get<std::string>() == "loaded";
    }
    if (loaded) out.push_back(id->get<std::string>());
  }
  return out;
}

std::string llamacpp_error_message(const std::string& body) {
  json j = json::parse(body, nullptr, false);
  const json* e = member(j, "error");
  const json* m = e ? member(*e, "message") : nullptr;
  return m && m->is_string() ? m->get<std::string>() : std::string();
}

Result<std::vector<std::string>> parse_triton_index(const json& j) {
  if (!j.is_array()) return shape("the repository index is not a list");
  std::vector<std::string> out;
  for (const json& m : j) {
    const json* name = member(m, "name");
    if (!name || !name->is_string()) return shape("a model without a name");
    const json* state = member(m, "state");
    if (state && state->is_string() && state->get<std::string>() == "READY") {
      out.push_back(name->get<std::string>());
    }
  }
  return out;
}

Result<LocalAiMonitor> parse_localai_monitor(const json& j) {
  const json* state = member(j, "state");
  std::optional<int> code = state ? small_int(*state) : std::nullopt;
  if (!code) return shape("no integer state");
  LocalAiMonitor out;
  out.state = *code;
  if (const json* mem = member(j, "memory")) {
    if (const json* total = member(*mem, "total")) out.memory_total = bytes_of(*total);
  }
  return out;
}

Result<std::vector<std::string>> parse_speaches_ps(const json& j) {
  const json* models = member(j, "models");
  if (!models || !models->is_array()) return shape("no models list");
  std::vector<std::string> out;
  for (const json& m : *models) {
    if (m.is_string()) {
      out.push_back(m.get<std::string>());
    } else if (const json* id = member(m, "id"); id && id->is_string()) {
      out.push_back(id->get<std::string>());
    } else {
      return shape("a model that is not a name");
    }
  }
  return out;
}

Result<bool> busy_at_pointer(const json& j, const std::string& pointer) {
  json::json_pointer p;
  try {
    p = json::json_pointer(pointer);
  } catch (const json::exception&) {
    return make_error("invalid JSON pointer '" + pointer + "'");
  }
  const json* found = nullptr;
  try {  // contains() itself throws on some array indexes ("/01", a huge one): nlohmann 3.11
    if (j.contains(p)) found = &j.at(p);
  } catch (const json::exception&) {
  }
  if (!found) return make_error("nothing at JSON pointer '" + pointer + "'");
  const json& v = *found;
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_number()) return v.get<double>() > 0;
  if (v.is_null()) return false;
  if (v.is_string()) return !v.get<std::string>().empty();
  return !v.empty();  // array or object
}

}  // namespace vramd
