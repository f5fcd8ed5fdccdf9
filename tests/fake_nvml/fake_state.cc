#include "fake_state.h"

#include <sys/stat.h>
#include <time.h>

#include <cstdlib>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>

namespace fake_nvml {

namespace {

// The last parse, kept so that a sample's several NVML calls do not each re-parse an unchanged
// file: a real driver answers from memory, and the benchmarks (bench/serve_cost.sh) measure
// vramd, not this library's JSON parser.
struct Cached {
  std::string path;
  dev_t dev = 0;
  ino_t ino = 0;
  off_t size = -1;
  timespec mtime{};
  timespec read_at{};  // CLOCK_REALTIME when the content was read
  std::shared_ptr<const nlohmann::json> state;
};
std::mutex g_cache_mutex;
Cached g_cache;

long long ns(const timespec& t) { return t.tv_sec * 1'000'000'000LL + t.tv_nsec; }

}  // namespace

std::shared_ptr<const nlohmann::json> load_state() {
  const char* path = std::getenv("FAKE_NVML_STATE");
  if (path == nullptr || *path == '\0') return nullptr;
  struct stat st {};
  if (::stat(path, &st) != 0) return nullptr;
  std::lock_guard lock(g_cache_mutex);
  // Reused only when the file is the same (inode, size, mtime) and was read well after its last
  // change: file times are coarse (a kernel tick), so a rewrite in place within the same tick
  // as the read could keep all three; 100 ms after the change, any rewrite shows a later mtime.
  // (write_fake_gpu_state renames a new file over the old one: a new inode each time.)
  if (g_cache.path == path && g_cache.dev == st.st_dev && g_cache.ino == st.st_ino &&
      g_cache.size == st.st_size && ns(g_cache.mtime) == ns(st.st_mtim) &&
      ns(g_cache.read_at) - ns(st.st_mtim) > 100'000'000LL)
    return g_cache.state;
  timespec now{};
  ::clock_gettime(CLOCK_REALTIME, &now);
  std::ifstream in(path);
  if (!in) return nullptr;
  std::stringstream buffer;
  buffer << in.rdbuf();
  nlohmann::json state = nlohmann::json::parse(buffer.str(), nullptr, /*allow_exceptions=*/false);
  std::shared_ptr<const nlohmann::json> out;
  if (!state.is_discarded() && state.is_object())
    out = std::make_shared<const nlohmann::json>(std::move(state));
  g_cache = Cached{path, st.st_dev, st.st_ino, st.st_size, st.st_mtim, now, out};
  return out;
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
