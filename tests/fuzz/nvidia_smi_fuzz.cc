// nvidia-smi CSV (src/gpu/nvidia_smi.h): both query shapes, with and without a header.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "gpu/nvidia_smi.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  (void)vramd::split_csv_line(text);
  (void)vramd::parse_smi_number(text);
  auto gpus = vramd::parse_smi_query_gpu(text);
  auto apps = vramd::parse_smi_compute_apps(text);
  vramd::attach_smi_apps(gpus.gpus, apps.apps, gpus.warnings);
  if (auto t = vramd::parse_smi_table(text)) {
    for (size_t r = 0; r < t->rows.size(); ++r)
      for (const auto& c : t->columns) (void)t->get(r, c);
  }
  auto hg = vramd::parse_smi_query_gpu_headered(text);
  auto ha = vramd::parse_smi_compute_apps_headered(text);
  if (hg && ha) vramd::attach_smi_apps(hg->gpus, ha->apps, hg->warnings);
  return 0;
}
