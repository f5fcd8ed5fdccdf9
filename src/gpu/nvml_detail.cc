#include "gpu/nvml_detail.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

namespace vramd::nvml_detail {

bool is_absent(nvmlReturn_t r) {
  return r == NVML_ERROR_FUNCTION_NOT_FOUND || r == NVML_ERROR_NOT_SUPPORTED ||
         r == NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
}

bool is_lost(nvmlReturn_t r) {
  return r == NVML_ERROR_GPU_IS_LOST || r == NVML_ERROR_RESET_REQUIRED;
}

std::string c_string(const char* buffer, std::size_t size) {
  return std::string(buffer, strnlen(buffer, size));
}

bool is_early_r535(const std::string& driver_version) {
  unsigned major = 0, minor = 0;
  if (std::sscanf(driver_version.c_str(), "%u.%u", &major, &minor) != 2) return false;
  return major == 535 && minor >= 43 && minor <= 86;
}

std::string mig_profile_of(const std::string& name) {
  std::size_t at = name.rfind("MIG ");
  if (at == std::string::npos) return "";
  std::string rest = name.substr(at + 4);
  rest = rest.substr(0, rest.find(' '));
  std::size_t g = rest.find("g.");
  if (g == 0 || g == std::string::npos || rest.size() < 4) return "";
  return rest;
}

void merge_processes(std::vector<ProcessMemory>& into, const std::vector<ProcessMemory>& more) {
  for (const ProcessMemory& p : more) {
    auto it = std::find_if(into.begin(), into.end(),
                           [&](const ProcessMemory& q) { return q.pid == p.pid; });
    if (it == into.end()) {
      into.push_back(p);
    } else if (p.used && (!it->used || *p.used > *it->used)) {
      it->used = p.used;
    }
  }
}

}  // namespace vramd::nvml_detail
