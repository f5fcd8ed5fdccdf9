// A fake `nvidia-smi` serving $FAKE_NVML_STATE (see fake_state.h). Built as fake-bin/nvidia-smi.
// Supports what vramd asks and what people type:
//   nvidia-smi --query-gpu=FIELDS --format=csv[,noheader][,nounits]
//   nvidia-smi --query-compute-apps=FIELDS --format=csv[,noheader][,nounits]
//   nvidia-smi -L
// Null process memory prints "[N/A]"; a missing state file fails like a machine without a driver
// (exit 9). A gpu with "lost": true fails the whole query like the real tool (exit 15).
#include <cstdio>
#include <cstring>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "fake_state.h"

namespace {

using nlohmann::json;

constexpr unsigned long long kMiB = 1024ULL * 1024ULL;

struct Format {
  bool header = true;
  bool units = true;
};

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, sep)) out.push_back(item);
  return out;
}

std::string mib(unsigned long long bytes, const Format& f) {
  return std::to_string(bytes / kMiB) + (f.units ? " MiB" : "");
}

std::string quote_if_needed(const std::string& s) {
  if (s.find_first_of(",\"") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

// Header text of a field when printed with units.
std::string header_of(const std::string& field, const Format& f) {
  std::string name = field == "used_memory" ? "used_gpu_memory" : field;
  if (!f.units) return name;
  if (field.rfind("memory.", 0) == 0 || field == "used_memory" || field == "used_gpu_memory") {
    return name + " [MiB]";
  }
  if (field == "utilization.gpu" || field == "utilization.memory") return name + " [%]";
  if (field == "power.draw") return name + " [W]";
  return name;
}

bool gpu_value(const json& state, unsigned index, const json& gpu, const std::string& field,
               const Format& f, std::string& out) {
  unsigned long long total = fake_nvml::get_u64(gpu, "total", 0);
  unsigned long long used = std::min(fake_nvml::get_u64(gpu, "used", 0), total);
  char buf[64];
  if (field == "index") {
    out = std::to_string(index);
  } else if (field == "uuid" || field == "gpu_uuid") {
    out = fake_nvml::get_string(gpu, "uuid",
                                "GPU-00000000-0000-0000-0000-00000000000" + std::to_string(index));
  } else if (field == "name" || field == "gpu_name") {
    out = quote_if_needed(fake_nvml::get_string(gpu, "name", "NVIDIA Fake GPU"));
  } else if (field == "driver_version") {
    out = fake_nvml::get_string(state, "driver_version", "550.54.14");
  } else if (field == "memory.total") {
    out = mib(total, f);
  } else if (field == "memory.used") {
    out = mib(used, f);
  } else if (field == "memory.free") {
    out = mib(total - used, f);
  } else if (field == "memory.reserved") {
    out = mib(fake_nvml::get_u64(gpu, "reserved", 0), f);
  } else if (field == "utilization.gpu") {
    auto u = fake_nvml::get_number(gpu, "utilization");
    out = u ? std::to_string(static_cast<unsigned>(*u)) + (f.units ? " %" : "") : "[N/A]";
  } else if (field == "temperature.gpu") {
    auto t = fake_nvml::get_number(gpu, "temperature");
    out = t ? std::to_string(static_cast<unsigned>(*t)) : "[N/A]";
  } else if (field == "power.draw") {
    auto p = fake_nvml::get_number(gpu, "power_mw");
    if (p) {
      std::snprintf(buf, sizeof buf, "%.2f%s", *p / 1000.0, f.units ? " W" : "");
      out = buf;
    } else {
      out = "[N/A]";
    }
  } else {
    return false;
  }
  return true;
}

int fail_no_driver() {
  std::cout << "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
               "Make sure that the latest NVIDIA driver is installed and running.\n\n";
  return 9;
}

int fail_lost(unsigned index) {
  std::cerr << "Unable to determine the device handle for GPU" << index << ": GPU is lost. "
            << "Reboot the system to recover this GPU\n";
  return 15;
}

int query_gpu(const json& state, const std::vector<std::string>& fields, const Format& f) {
  if (f.header) {
    for (std::size_t i = 0; i < fields.size(); ++i) {
      std::cout << (i ? ", " : "") << header_of(fields[i], f);
    }
    std::cout << "\n";
  }
  std::ostringstream body;
  for (unsigned g = 0; g < fake_nvml::gpu_count(state); ++g) {
    const json* gpu = fake_nvml::gpu_at(state, g);
    if (gpu == nullptr) continue;
    if (gpu->value("lost", false)) return fail_lost(g);
    for (std::size_t i = 0; i < fields.size(); ++i) {
      std::string value;
      if (!gpu_value(state, g, *gpu, fields[i], f, value)) {
        std::cout << "Field \"" << fields[i] << "\" is not a valid field to query.\n\n";
        return 2;
      }
      body << (i ? ", " : "") << value;
    }
    body << "\n";
  }
  std::cout << body.str();
  return 0;
}

int query_apps(const json& state, const std::vector<std::string>& fields, const Format& f) {
  if (f.header) {
    for (std::size_t i = 0; i < fields.size(); ++i) {
      std::cout << (i ? ", " : "") << header_of(fields[i], f);
    }
    std::cout << "\n";
  }
  std::ostringstream body;
  for (unsigned g = 0; g < fake_nvml::gpu_count(state); ++g) {
    const json* gpu = fake_nvml::gpu_at(state, g);
    if (gpu == nullptr) continue;
    if (gpu->value("lost", false)) return fail_lost(g);
    for (const auto& p : fake_nvml::processes(*gpu, "processes")) {
      for (std::size_t i = 0; i < fields.size(); ++i) {
        const std::string& field = fields[i];
        std::string value;
        if (field == "pid") {
          value = std::to_string(p.pid);
        } else if (field == "process_name" || field == "name") {
          value = quote_if_needed(p.name.empty() ? "python3" : p.name);
        } else if (field == "used_memory" || field == "used_gpu_memory") {
          value = p.used ? mib(*p.used, f) : "[N/A]";
        } else if (!gpu_value(state, g, *gpu, field, f, value)) {
          std::cout << "Field \"" << field << "\" is not a valid field to query.\n\n";
          return 2;
        }
        body << (i ? ", " : "") << value;
      }
      body << "\n";
    }
  }
  std::cout << body.str();
  return 0;
}

int list_gpus(const json& state) {
  for (unsigned g = 0; g < fake_nvml::gpu_count(state); ++g) {
    const json* gpu = fake_nvml::gpu_at(state, g);
    if (gpu == nullptr) continue;
    std::cout << "GPU " << g << ": " << fake_nvml::get_string(*gpu, "name", "NVIDIA Fake GPU")
              << " (UUID: " << fake_nvml::get_string(*gpu, "uuid", "GPU-unknown") << ")\n";
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string query_gpu_fields, query_apps_fields;
  bool list = false;
  bool have_format = false;
  Format format;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.rfind("--query-gpu=", 0) == 0) {
      query_gpu_fields = arg.substr(12);
    } else if (arg.rfind("--query-compute-apps=", 0) == 0) {
      query_apps_fields = arg.substr(21);
    } else if (arg.rfind("--format=", 0) == 0) {
      have_format = true;
      for (const auto& opt : split(arg.substr(9), ',')) {
        if (opt == "noheader")
          format.header = false;
        else if (opt == "nounits")
          format.units = false;
        else if (opt != "csv") {
          std::cout << "Invalid format option: " << opt << "\n";
          return 2;
        }
      }
    } else if (arg == "-L" || arg == "--list-gpus") {
      list = true;
    } else {
      std::cout << "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n";
      return 2;
    }
  }
  std::optional<json> state = fake_nvml::load_state();
  if (!state) return fail_no_driver();
  if (list) return list_gpus(*state);
  if ((!query_gpu_fields.empty() || !query_apps_fields.empty()) && !have_format) {
    std::cout << "Missing --format argument\n";
    return 2;
  }
  if (!query_gpu_fields.empty()) return query_gpu(*state, split(query_gpu_fields, ','), format);
  if (!query_apps_fields.empty()) return query_apps(*state, split(query_apps_fields, ','), format);
  std::cout << "Fake NVIDIA-SMI: only --query-gpu, --query-compute-apps and -L are supported\n";
  return 0;
}
