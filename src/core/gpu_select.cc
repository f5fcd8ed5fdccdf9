#include "core/gpu_select.h"

#include <charconv>

namespace vramd {

namespace {

// A decimal number with no sign, spaces or leading junk; nullopt otherwise or when > max.
std::optional<unsigned> parse_number(std::string_view s, unsigned max) {
  if (s.empty() || s.size() > 5) return std::nullopt;
  unsigned v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || v > max) return std::nullopt;
  return v;
}

}  // namespace

std::string gpu_label(unsigned index) {
  if (!is_mig_index(index)) return std::to_string(index);
  return std::to_string(index / kMigIndexBase - 1) + "/" + std::to_string(index % kMigIndexBase);
}

std::string gpu_label(const GpuSample& g) { return g.label.empty() ? gpu_label(g.index) : g.label; }

bool attributes_memory(const GpuSample& g) { return !g.mig_enabled; }

bool admits_leases(const GpuSample& g) { return g.health == GpuHealth::ok && !g.mig_enabled; }

std::string cuda_visible_devices(const GpuSample& g) {
  if (g.parent && !g.uuid.empty()) return g.uuid;
  return std::to_string(g.index);
}

Result<std::optional<unsigned>> parse_gpu_selector(std::string_view text) {
  if (text.empty() || text == "any") return std::optional<unsigned>{};
  auto bad = [&] {
    return make_error(
        "gpu: expected a GPU index like 1, a MIG instance like 0/2 (GPU/GI), or "
        "'any'; got '" +
        std::string(text) + "'");
  };
  std::size_t slash = text.find('/');
  if (slash == std::string_view::npos) {
    auto index = parse_number(text, kMaxGpuIndex);
    if (!index) return bad();
    return std::optional<unsigned>(*index);
  }
  auto parent = parse_number(text.substr(0, slash), kMaxGpuIndex - 1);
  auto gi = parse_number(text.substr(slash + 1), 0xFFFFu);
  if (!parent || !gi) return bad();
  return std::optional<unsigned>(mig_flat_index(*parent, *gi));
}

}  // namespace vramd
