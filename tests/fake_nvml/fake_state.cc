#include "fake_state.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

namespace fake_nvml {

std::optional<nlohmann::json> load_state() {
  const char* path = std::getenv("FAKE_NVML_STATE");
  if (path == nullptr || *path == '\0') return std::nullopt;
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::stringstream buffer;
  buffer << in.rdbuf();
  nlohmann::json state = nlohmann::json::parse(buffer.str(), nullptr, /*allow_exceptions=*/false);
  if (state.is_discarded() || !state.is_object()) return std::nullopt;
  return state;
}

std::size_t gpu_count(const nlohmann::json& state) {
  auto it = state.find("gpus");
  if (it == state.end() || !it->is_array()) return 0;
  return it->size();
}

const nlohmann::json* gpu_at(const nlohmann::json& state, unsigned index) {
  if (index >= gpu_count(state)) return nullptr;
  const nlohmann::json& gpu = state["gpus"][index];
  return gpu.is_object() ? &gpu : nullptr;
}

unsigned long long get_u64(const nlohmann::json& obj, const char* key,
                           unsigned long long fallback) {
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_number()) return fallback;
  if (it->is_number_float()) return static_cast<unsigned long long>(it->get<double>());
  return it->get<unsigned long long>();
}

std::optional<double> get_number(const nlohmann::json& obj, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_number()) return std::nullopt;
  return it->get<double>();
}

std::string get_string(const nlohmann::json& obj, const char* key, const std::string& fallback) {
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_string()) return fallback;
  return it->get<std::string>();
}

std::vector<FakeProcess> processes(const nlohmann::json& gpu, const char* key) {
  std::vector<FakeProcess> out;
  auto it = gpu.find(key);
  if (it == gpu.end() || !it->is_array()) return out;
  for (const auto& p : *it) {
    if (!p.is_object()) continue;
    FakeProcess fp;
    fp.pid = static_cast<unsigned>(get_u64(p, "pid", 0));
    auto used = p.find("used");
    if (used != p.end() && used->is_number()) fp.used = get_u64(p, "used", 0);
    fp.name = get_string(p, "name", "");
    out.push_back(std::move(fp));
  }
  return out;
}

}  // namespace fake_nvml
