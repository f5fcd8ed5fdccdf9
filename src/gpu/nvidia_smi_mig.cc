// MIG from nvidia-smi's own screens: the "MIG devices:" and "Processes:" tables of plain
// `nvidia-smi`, and `nvidia-smi -L`, turned into the devices the NVML reader gives.
#include <algorithm>

#include "core/gpu_select.h"
#include "gpu/nvidia_smi.h"

namespace vramd {

namespace {

std::vector<std::string> words(std::string_view s) {
  std::vector<std::string> out;
  std::size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
    std::size_t j = i;
    while (j < s.size() && s[j] != ' ' && s[j] != '\t') ++j;
    if (j > i) out.emplace_back(s.substr(i, j - i));
    i = j;
  }
  return out;
}

std::optional<unsigned> whole(const std::string& s) {
  if (s.empty() || s.size() > 9 || s.find_first_not_of("0123456789") != std::string::npos)
    return std::nullopt;
  return static_cast<unsigned>(std::stoul(s));
}

// "16925MiB" -> bytes.
std::optional<Bytes> mib_field(const std::string& s) {
  if (s.size() < 4 || s.compare(s.size() - 3, 3, "MiB") != 0) return std::nullopt;
  auto n = whole(s.substr(0, s.size() - 3));
  if (!n) return std::nullopt;
  return static_cast<Bytes>(*n) * MiB;
}

// The cells of a table row "| a | b |" (without the outer bars).
std::vector<std::string_view> cells(std::string_view line) {
  std::vector<std::string_view> out;
  if (line.empty() || line.front() != '|') return out;
  std::size_t start = 1;
  for (std::size_t i = 1; i < line.size(); ++i) {
    if (line[i] == '|') {
      out.push_back(line.substr(start, i - start));
      start = i + 1;
    }
  }
  return out;
}

}  // namespace

SmiMigTable parse_smi_mig_table(std::string_view output) {
  SmiMigTable t;
  enum { none, mig, processes } section = none;
  std::size_t line_no = 0;
  while (!output.empty()) {
    std::size_t nl = output.find('\n');
    std::string_view line = output.substr(0, nl);
    output = nl == std::string_view::npos ? std::string_view() : output.substr(nl + 1);
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.find("MIG devices:") != std::string_view::npos) {
      section = mig;
      continue;
    }
    if (line.find("Processes:") != std::string_view::npos) {
      section = processes;
      continue;
    }
    if (line.empty() || line.front() != '|') {
      if (line.empty()) section = none;
      continue;
    }
    auto c = cells(line);
    if (section == mig && c.size() >= 2) {
      auto ids = words(c[0]);
      if (ids.size() != 4) continue;  // headers and the BAR1 line
      auto gpu = whole(ids[0]), gi = whole(ids[1]), ci = whole(ids[2]), dev = whole(ids[3]);
      auto mem = words(c[1]);  // "16925MiB" "/" "71424MiB"
      if (!gpu || !gi || !ci || !dev) continue;
      std::optional<Bytes> used, total;
      if (mem.size() == 3 && mem[1] == "/") used = mib_field(mem[0]), total = mib_field(mem[2]);
      if (!used || !total) {
        t.warnings.push_back("line " + std::to_string(line_no) + ": MIG device without memory");
        continue;
      }
      t.devices.push_back({*gpu, *gi, *ci, *dev, *used, *total});
    } else if (section == processes && c.size() == 1) {
      // GPU GI CI PID Type Name... Memory
      auto w = words(c[0]);
      if (w.size() < 7) continue;
      auto gpu = whole(w[0]);
      auto pid = whole(w[3]);
      if (!gpu || !pid) continue;  // headers, "No running processes found"
      SmiMigProcess p;
      p.gpu = *gpu;
      p.gi = whole(w[1]);
      p.ci = whole(w[2]);
      p.process.pid = static_cast<int>(*pid);
      p.process.used = mib_field(w.back());  // "N/A" under WDDM: unknown
      for (std::size_t i = 5; i + 1 < w.size(); ++i)
        p.process.name += (p.process.name.empty() ? "" : " ") + w[i];
      p.process.gpu_instance_id = p.gi;
      p.process.compute_instance_id = p.ci;
      t.processes.push_back(std::move(p));
    }
  }
  return t;
}

// A pid listed twice counts once, with the larger known value.
void merge_one(std::vector<ProcessMemory>& into, const ProcessMemory& p) {
  auto same = std::find_if(into.begin(), into.end(),
                           [&](const ProcessMemory& q) { return q.pid == p.pid; });
  if (same == into.end()) {
    into.push_back(p);
  } else if (p.used && (!same->used || *p.used > *same->used)) {
    same->used = p.used;
  }
}

std::vector<SmiMigListing> parse_smi_list(std::string_view output) {
  std::vector<SmiMigListing> out;
  std::optional<unsigned> gpu;
  while (!output.empty()) {
    std::size_t nl = output.find('\n');
    std::string_view line = output.substr(0, nl);
    output = nl == std::string_view::npos ? std::string_view() : output.substr(nl + 1);
    auto w = words(line);
    if (w.size() >= 2 && w[0] == "GPU" && !w[1].empty() && w[1].back() == ':') {
      gpu = whole(w[1].substr(0, w[1].size() - 1));
    } else if (gpu && w.size() >= 6 && w[0] == "MIG" && w[2] == "Device") {
      // MIG 3g.71gb Device 0: (UUID: MIG-...)
      std::string dev = w[3];
      if (!dev.empty() && dev.back() == ':') dev.pop_back();
      auto n = whole(dev);
      std::string uuid = w[5];
      if (!uuid.empty() && uuid.back() == ')') uuid.pop_back();
      if (n && uuid.rfind("MIG-", 0) == 0) out.push_back({*gpu, *n, w[1], uuid});
    }
  }
  return out;
}

void apply_smi_mig(std::vector<GpuSample>& gpus, const SmiMigTable& table,
                   const std::vector<SmiMigListing>& listing) {
  std::vector<GpuSample> out;
  for (GpuSample& parent : gpus) {
    if (parent.label.empty()) parent.label = std::to_string(parent.index);
    std::vector<GpuSample> instances;
    for (const SmiMigDevice& d : table.devices) {
      if (d.gpu != parent.index) continue;
      unsigned flat = mig_flat_index(d.gpu, d.gi);
      auto it = std::find_if(instances.begin(), instances.end(),
                             [&](const GpuSample& g) { return g.index == flat; });
      if (it != instances.end()) continue;  // another compute instance of the same GI
      GpuSample g;
      g.index = flat;
      g.label = std::to_string(d.gpu) + "/" + std::to_string(d.gi);
      g.parent = d.gpu;
      g.gpu_instance_id = d.gi;
      g.compute_instance_id = d.ci;
      g.total = d.total;
      g.used = d.used;
      for (const SmiMigListing& l : listing) {
        if (l.gpu == d.gpu && l.mig_dev == d.mig_dev) {
          g.uuid = l.uuid;
          g.mig_profile = l.profile;
        }
      }
      g.name = parent.name + " MIG" + (g.mig_profile.empty() ? "" : " " + g.mig_profile);
      for (const SmiMigProcess& p : table.processes)
        if (p.gpu == d.gpu && p.gi == d.gi) merge_one(g.processes, p.process);
      instances.push_back(std::move(g));
    }
    if (!instances.empty()) {
      parent.mig_enabled = true;
      parent.processes.clear();
      parent.processes_readable = false;
    }
    out.push_back(std::move(parent));
    std::sort(instances.begin(), instances.end(),
              [](const GpuSample& a, const GpuSample& b) { return a.index < b.index; });
    for (auto& g : instances) out.push_back(std::move(g));
  }
  gpus = std::move(out);
}

}  // namespace vramd
