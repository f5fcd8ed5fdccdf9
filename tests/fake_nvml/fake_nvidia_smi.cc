// A fake `nvidia-smi` serving $FAKE_NVML_STATE (see fake_state.h). Built as fake-bin/nvidia-smi.
// Supports what vramd asks and what people type:
//   nvidia-smi --query-gpu=FIELDS --format=csv[,noheader][,nounits]
//   nvidia-smi --query-compute-apps=FIELDS --format=csv[,noheader][,nounits]
//   nvidia-smi -L
//   nvidia-smi            (only its "MIG devices:" and "Processes:" tables, in 590's layout)
// A gpu with "mig_devices" (see fake_nvml.cc) lists them under -L and in the tables; its
// processes are its instances', under the parent's uuid in --query-compute-apps as the real
// tool prints them.
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

// The MIG devices of a gpu ("mig_devices" entries that are objects), in slot order.
std::vector<const json*> mig_devices(const json& gpu) {
  std::vector<const json*> out;
  auto it = gpu.find("mig_devices");
  if (it == gpu.end() || !it->is_array()) return out;
  for (const auto& d : *it)
    if (d.is_object()) out.push_back(&d);
  return out;
}

// A gpu's processes: its own, or with MIG on its instances'.
std::vector<fake_nvml::FakeProcess> all_processes(const json& gpu) {
  auto devices = mig_devices(gpu);
  if (devices.empty()) return fake_nvml::processes(gpu, "processes");
  std::vector<fake_nvml::FakeProcess> out;
  for (const json* d : devices)
    for (auto& p : fake_nvml::processes(*d, "processes")) out.push_back(std::move(p));
  return out;
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
    for (const auto& p : all_processes(*gpu)) {
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
    unsigned dev = 0;
    for (const json* d : mig_devices(*gpu)) {
      std::printf("  MIG %-12s Device %2u: (UUID: %s)\n",
                  fake_nvml::get_string(*d, "profile", "1g.10gb").c_str(), dev++,
                  fake_nvml::get_string(*d, "uuid", "MIG-unknown").c_str());
    }
  }
  std::fflush(stdout);
  return 0;
}

// The two tables of plain `nvidia-smi` that tell MIG instances apart.
int table(const json& state) {
  bool any_mig = false;
  for (unsigned g = 0; g < fake_nvml::gpu_count(state); ++g)
    if (const json* gpu = fake_nvml::gpu_at(state, g); gpu && !mig_devices(*gpu).empty())
      any_mig = true;
  if (any_mig) {
    std::printf(
        "| MIG devices:                                                                            "
        "|\n");
    std::printf(
        "|==================+==================================+===========+======================="
        "|\n");
    for (unsigned g = 0; g < fake_nvml::gpu_count(state); ++g) {
      const json* gpu = fake_nvml::gpu_at(state, g);
      if (gpu == nullptr) continue;
      unsigned dev = 0;
      for (const json* d : mig_devices(*gpu)) {
        std::printf(
            "| %2u  %3llu %3llu %3u  | %15lluMiB / %5lluMiB    | 16      0 |  1   0    1    0    1 "
            "|\n",
            g, fake_nvml::get_u64(*d, "gi", 0), fake_nvml::get_u64(*d, "ci", 0), dev++,
            fake_nvml::get_u64(*d, "used", 0) / kMiB, fake_nvml::get_u64(*d, "total", 0) / kMiB);
        std::printf(
            "|                  |               0MiB / 1024MiB     |           |                   "
            "    |\n");
      }
    }
    std::printf("\n");
  }
  std::printf(
      "| Processes:                                                                              "
      "|\n");
  std::printf(
      "|  GPU   GI   CI              PID   Type   Process name                        GPU Memory "
      "|\n");
  std::printf(
      "|=========================================================================================|"
      "\n");
  for (unsigned g = 0; g < fake_nvml::gpu_count(state); ++g) {
    const json* gpu = fake_nvml::gpu_at(state, g);
    if (gpu == nullptr) continue;
    auto row = [&](const std::string& gi, const std::string& ci, const fake_nvml::FakeProcess& p) {
      std::string used = p.used ? std::to_string(*p.used / kMiB) + "MiB" : "N/A";
      std::printf("|  %3u  %4s %4s  %15u      C   %-35s %9s |\n", g, gi.c_str(), ci.c_str(), p.pid,
                  (p.name.empty() ? "python3" : p.name).c_str(), used.c_str());
    };
    if (mig_devices(*gpu).empty()) {
      for (const auto& p : fake_nvml::processes(*gpu, "processes")) row("N/A", "N/A", p);
    } else {
      for (const json* d : mig_devices(*gpu))
        for (const auto& p : fake_nvml::processes(*d, "processes"))
          row(std::to_string(fake_nvml::get_u64(*d, "gi", 0)),
              std::to_string(fake_nvml::get_u64(*d, "ci", 0)), p);
    }
  }
  std::printf(
      "+-----------------------------------------------------------------------------------------+"
      "\n");
  std::fflush(stdout);
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
  std::shared_ptr<const json> state = fake_nvml::load_state();
  if (!state) return fail_no_driver();
  if (list) return list_gpus(*state);
  if ((!query_gpu_fields.empty() || !query_apps_fields.empty()) && !have_format) {
    std::cout << "Missing --format argument\n";
    return 2;
  }
  if (!query_gpu_fields.empty()) return query_gpu(*state, split(query_gpu_fields, ','), format);
  if (!query_apps_fields.empty()) return query_apps(*state, split(query_apps_fields, ','), format);
  return table(*state);
}
