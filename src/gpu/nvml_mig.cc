// NvmlReader's MIG part: one device per GPU instance of a MIG-enabled card.
#include <algorithm>

#include "core/gpu_select.h"
#include "gpu/nvml_detail.h"
#include "gpu/nvml_reader.h"

namespace vramd {

using namespace nvml_detail;

void NvmlReader::read_mig_instances(unsigned parent_index, nvmlDevice_t parent,
                                    GpuSample& parent_sample,
                                    const std::vector<ProcessMemory>* parent_processes,
                                    std::vector<GpuSample>& out, bool& lost) {
  auto add_note = [&](const std::string& text) {
    parent_sample.note += (parent_sample.note.empty() ? "" : "; ") + text;
  };
  if (sym_->max_mig_count == nullptr || sym_->mig_handle == nullptr ||
      sym_->gpu_instance_id == nullptr) {
    return add_note("MIG is on but this NVML cannot list MIG instances");
  }
  unsigned max = 0;
  nvmlReturn_t r = sym_->max_mig_count(parent, &max);
  if (r != NVML_SUCCESS) {
    return add_note("MIG instances: " + error_string(r) + " (NVML nvmlDeviceGetMaxMigDeviceCount)");
  }
  const std::string prefix = std::to_string(parent_index) + "/";
  for (unsigned i = 0; i < max; ++i) {
    nvmlDevice_t mig = nullptr;
    r = sym_->mig_handle(parent, i, &mig);
    if (r == NVML_ERROR_NOT_FOUND) continue;  // no instance in this slot
    if (r != NVML_SUCCESS) {
      add_note("MIG device " + std::to_string(i) + ": " + error_string(r));
      if (is_lost(r)) lost = true;
      continue;
    }
    unsigned gi = 0, ci = 0;
    r = sym_->gpu_instance_id(mig, &gi);
    if (r != NVML_SUCCESS) {
      add_note("MIG device " + std::to_string(i) + ": " + error_string(r) +
               " (NVML nvmlDeviceGetGpuInstanceId)");
      continue;
    }
    bool have_ci =
        sym_->compute_instance_id != nullptr && sym_->compute_instance_id(mig, &ci) == NVML_SUCCESS;
    const unsigned flat = mig_flat_index(parent_index, gi);

    // Compute instances of one GPU instance share its memory: one device per GPU instance.
    auto existing =
        std::find_if(out.begin(), out.end(), [&](const GpuSample& g) { return g.index == flat; });
    GpuSample fresh;
    GpuSample& g = existing != out.end() ? *existing : fresh;
    const bool first = existing == out.end();
    if (first) {
      g.index = flat;
      g.label = prefix + std::to_string(gi);
      g.parent = parent_index;
      g.gpu_instance_id = gi;
      if (have_ci) g.compute_instance_id = ci;
      auto fail = [&](nvmlReturn_t code, const char* what) {
        g.health = is_lost(code) ? GpuHealth::lost : GpuHealth::error;
        if (is_lost(code)) lost = true;
        g.error = "GPU " + g.label + (g.uuid.empty() ? "" : " (" + g.uuid + ")") + ": " +
                  error_string(code) + " (NVML " + what + ")";
      };
      if (sym_->uuid != nullptr) {
        char buf[nvml::kDeviceUuidBufferSize] = {};
        if (sym_->uuid(mig, buf, sizeof buf) == NVML_SUCCESS) g.uuid = c_string(buf, sizeof buf);
      }
      if (sym_->name != nullptr) {
        char buf[nvml::kDeviceNameBufferSize] = {};
        if (sym_->name(mig, buf, sizeof buf) == NVML_SUCCESS) g.name = c_string(buf, sizeof buf);
      }
      g.mig_profile = mig_profile_of(g.name);
      r = read_memory(mig, g);
      if (r != NVML_SUCCESS) fail(r, "nvmlDeviceGetMemoryInfo");
    }
    if (g.health == GpuHealth::ok) {
      std::vector<ProcessMemory> processes;
      bool readable = false;
      const char* failed = "";
      r = read_all_processes(mig, processes, readable, failed);
      if (!readable && parent_processes != nullptr) {
        // The parent's aggregate list says which instance each process is in.
        processes.clear();
        for (const ProcessMemory& p : *parent_processes)
          if (p.gpu_instance_id == gi) processes.push_back(p);
        readable = true;
      }
      if (first) {
        g.processes_readable = readable;
        g.processes = std::move(processes);
      } else {
        g.processes_readable = g.processes_readable || readable;
        merge_processes(g.processes, processes);
      }
    }
    if (first) out.push_back(std::move(fresh));
  }
  std::sort(out.begin(), out.end(),
            [](const GpuSample& a, const GpuSample& b) { return a.index < b.index; });
}

}  // namespace vramd
