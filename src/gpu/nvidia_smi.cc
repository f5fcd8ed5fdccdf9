#include "gpu/nvidia_smi.h"
#include "core/text.h"
#include "host/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <csignal>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>

namespace vramd {
namespace {

constexpr std::size_t kQueryGpuFields = 8;
constexpr std::size_t kComputeAppsFields = 4;


std::vector<std::string_view> lines_of(std::string_view text) {
  std::vector<std::string_view> lines;
  while (!text.empty()) {
    auto nl = text.find('\n');
    lines.push_back(text.substr(0, nl));
    if (nl == std::string_view::npos) break;
    text.remove_prefix(nl + 1);
  }
  return lines;
}

// Out of range (beyond 2^64 bytes, 2^32, a pid beyond int) is "not a figure", never a cast of a
// double that does not fit (undefined behaviour; found by fuzzing, tests/fuzz/README.md).
std::optional<Bytes> mib_to_bytes(const std::optional<double>& mib) {
  if (!mib || *mib < 0 || !(*mib * static_cast<double>(MiB) < 1.8e19)) return std::nullopt;
  return static_cast<Bytes>(std::llround(*mib * static_cast<double>(MiB)));
}

std::optional<unsigned> to_unsigned(const std::optional<double>& v) {
  if (!v || *v < 0 || !(*v <= 4294967295.0)) return std::nullopt;
  return static_cast<unsigned>(std::llround(*v));
}

std::string quote_line(std::string_view line) {
  constexpr std::size_t kMax = 120;
  std::string s(line.substr(0, kMax));
  if (line.size() > kMax) s += "...";
  return "'" + s + "'";
}

// The named fields of one query-gpu row; nullptr for a column the output lacks.
struct GpuFields {
  const std::string* index = nullptr;
  const std::string* uuid = nullptr;
  const std::string* name = nullptr;
  const std::string* total = nullptr;
  const std::string* used = nullptr;
  const std::string* utilization = nullptr;
  const std::string* temperature = nullptr;
  const std::string* power = nullptr;
};

// Builds a sample; empty `problem` on success, else why the row was skipped.
GpuSample gpu_from_fields(const GpuFields& f, unsigned position, std::string& problem) {
  GpuSample s;
  s.index = position;
  if (f.index != nullptr) {
    std::optional<unsigned> index = to_unsigned(parse_smi_number(*f.index));
    if (!index) {
      problem = "index is not a number";
      return s;
    }
    s.index = *index;
  }
  if (f.uuid != nullptr) s.uuid = *f.uuid;
  if (f.name != nullptr) s.name = *f.name;
  std::optional<Bytes> total = mib_to_bytes(parse_smi_number(*f.total));
  std::optional<Bytes> used = mib_to_bytes(parse_smi_number(*f.used));
  if (total && used) {
    s.total = *total;
    s.used = *used;
  } else {
    s.health = GpuHealth::error;
    s.error = "GPU " + std::to_string(s.index) + ": nvidia-smi reports no memory figures";
  }
  if (f.utilization != nullptr) s.utilization_pct = parse_smi_number(*f.utilization);
  if (f.temperature != nullptr) s.temperature_c = to_unsigned(parse_smi_number(*f.temperature));
  if (f.power != nullptr) s.power_w = parse_smi_number(*f.power);
  return s;
}

// Builds an app; empty `problem` on success.
SmiApp app_from_fields(const std::string* uuid, const std::string& pid, const std::string* name,
                       const std::string* used, std::string& problem) {
  SmiApp app;
  std::optional<double> p = parse_smi_number(pid);
  if (!p || *p <= 0 || *p != std::floor(*p) || *p > 2147483647.0) {
    problem = "pid is not a number";
    return app;
  }
  app.process.pid = static_cast<int>(*p);
  if (uuid != nullptr) app.gpu_uuid = *uuid;
  if (name != nullptr) app.process.name = *name;
  if (used != nullptr) app.process.used = mib_to_bytes(parse_smi_number(*used));
  return app;
}

std::string first_line(std::string_view text) {
  for (std::string_view line : lines_of(text)) {
    line = trim(line);
    if (!line.empty()) return std::string(line);
  }
  return "";
}

}  // namespace

std::vector<std::string> split_csv_line(std::string_view line) {
  std::vector<std::string> fields;
  std::string field;
  bool in_quotes = false;
  bool was_quoted = false;
  auto finish = [&] {
    // Quoted fields keep their inner spaces; the others are trimmed.
    fields.push_back(was_quoted ? field : std::string(trim(field)));
    field.clear();
    was_quoted = false;
  };
  while (!line.empty() && (line.back() == '\r' || line.back() == '\n')) line.remove_suffix(1);
  for (std::size_t i = 0; i < line.size(); ++i) {
    char c = line[i];
    if (in_quotes) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        field += '"';
        ++i;
      } else if (c == '"') {
        in_quotes = false;
      } else {
        field += c;
      }
    } else if (c == '"' && trim(field).empty()) {
      field.clear();
      in_quotes = true;
      was_quoted = true;
    } else if (c == ',') {
      finish();
    } else if (!(was_quoted && (c == ' ' || c == '\t'))) {
      field += c;
    }
  }
  finish();
  return fields;
}

std::optional<double> parse_smi_number(std::string_view field) {
  std::string_view s = trim(field);
  if (s.empty() || s.front() == '[' || s == "N/A") return std::nullopt;
  // Drop a unit suffix: " MiB", " W", " %", " MHz", "%".
  auto unit_start = s.find_last_of("0123456789.");
  if (unit_start == std::string_view::npos) return std::nullopt;
  std::string_view unit = trim(s.substr(unit_start + 1));
  if (!unit.empty() && !std::all_of(unit.begin(), unit.end(), [](char c) {
        return std::isalpha(static_cast<unsigned char>(c)) || c == '%';
      })) {
    return std::nullopt;
  }
  std::string_view number = trim(s.substr(0, unit_start + 1));
  if (!number.empty() && number.front() == '+') number.remove_prefix(1);
  double value = 0;
  auto [end, ec] = std::from_chars(number.data(), number.data() + number.size(), value);
  if (ec != std::errc() || end != number.data() + number.size()) return std::nullopt;
  if (!std::isfinite(value)) return std::nullopt;
  return value;
}

SmiGpus parse_smi_query_gpu(std::string_view output) {
  SmiGpus result;
  unsigned line_no = 0;
  for (std::string_view line : lines_of(output)) {
    ++line_no;
    if (trim(line).empty()) continue;
    std::vector<std::string> f = split_csv_line(line);
    if (f.size() != kQueryGpuFields) {
      result.warnings.push_back("line " + std::to_string(line_no) + ": expected " +
                                std::to_string(kQueryGpuFields) + " fields, got " +
                                std::to_string(f.size()) + ": " + quote_line(line));
      continue;
    }
    GpuFields fields{&f[0], &f[1], &f[2], &f[3], &f[4], &f[5], &f[6], &f[7]};
    std::string problem;
    GpuSample s = gpu_from_fields(fields, static_cast<unsigned>(result.gpus.size()), problem);
    if (!problem.empty()) {
      result.warnings.push_back("line " + std::to_string(line_no) + ": " + problem + ": " +
                                quote_line(line));
      continue;
    }
    result.gpus.push_back(std::move(s));
  }
  return result;
}

SmiApps parse_smi_compute_apps(std::string_view output) {
  SmiApps result;
  unsigned line_no = 0;
  for (std::string_view line : lines_of(output)) {
    ++line_no;
    if (trim(line).empty()) continue;
    std::vector<std::string> f = split_csv_line(line);
    if (f.size() != kComputeAppsFields) {
      result.warnings.push_back("line " + std::to_string(line_no) + ": expected " +
                                std::to_string(kComputeAppsFields) + " fields, got " +
                                std::to_string(f.size()) + ": " + quote_line(line));
      continue;
    }
    std::string problem;
    SmiApp app = app_from_fields(&f[0], f[1], &f[2], &f[3], problem);
    if (!problem.empty()) {
      result.warnings.push_back("line " + std::to_string(line_no) + ": " + problem + ": " +
                                quote_line(line));
      continue;
    }
    result.apps.push_back(std::move(app));
  }
  return result;
}

const std::string* SmiTable::get(std::size_t row, const std::string& name) const {
  auto it = column_index.find(name);
  if (it == column_index.end() || row >= rows.size()) return nullptr;
  return &rows[row][it->second];
}

Result<SmiTable> parse_smi_table(std::string_view output) {
  SmiTable table;
  std::vector<std::string_view> lines = lines_of(output);
  std::size_t first = 0;
  while (first < lines.size() && trim(lines[first]).empty()) ++first;
  if (first == lines.size()) return make_error("nvidia-smi printed nothing (expected a header)");
  for (std::string& column : split_csv_line(lines[first])) {
    // "memory.used [MiB]" → "memory.used"
    if (auto bracket = column.find(" ["); bracket != std::string::npos) column.resize(bracket);
    table.column_index.emplace(column, table.columns.size());
    table.columns.push_back(std::move(column));
  }
  for (std::size_t i = first + 1; i < lines.size(); ++i) {
    if (trim(lines[i]).empty()) continue;
    std::vector<std::string> f = split_csv_line(lines[i]);
    if (f.size() != table.columns.size()) {
      table.warnings.push_back("line " + std::to_string(i + 1) + ": expected " +
                               std::to_string(table.columns.size()) + " fields, got " +
                               std::to_string(f.size()) + ": " + quote_line(lines[i]));
      continue;
    }
    table.rows.push_back(std::move(f));
  }
  return table;
}

Result<SmiGpus> parse_smi_query_gpu_headered(std::string_view output) {
  Result<SmiTable> parsed = parse_smi_table(output);
  if (!parsed.ok()) return make_error(parsed.error());
  const SmiTable& t = *parsed;
  if (!t.column_index.count("memory.total") || !t.column_index.count("memory.used")) {
    return make_error("nvidia-smi output lacks the memory.total and memory.used columns");
  }
  SmiGpus result;
  result.warnings = t.warnings;
  for (std::size_t r = 0; r < t.rows.size(); ++r) {
    GpuFields f;
    f.index = t.get(r, "index");
    f.uuid = t.get(r, "uuid");
    f.name = t.get(r, "name");
    f.total = t.get(r, "memory.total");
    f.used = t.get(r, "memory.used");
    f.utilization = t.get(r, "utilization.gpu");
    f.temperature = t.get(r, "temperature.gpu");
    f.power = t.get(r, "power.draw");
    std::string problem;
    GpuSample s = gpu_from_fields(f, static_cast<unsigned>(result.gpus.size()), problem);
    if (!problem.empty()) {
      result.warnings.push_back("row " + std::to_string(r + 1) + ": " + problem);
      continue;
    }
    result.gpus.push_back(std::move(s));
  }
  return result;
}

Result<SmiApps> parse_smi_compute_apps_headered(std::string_view output) {
  Result<SmiTable> parsed = parse_smi_table(output);
  if (!parsed.ok()) return make_error(parsed.error());
  const SmiTable& t = *parsed;
  if (!t.column_index.count("pid")) return make_error("nvidia-smi output lacks the pid column");
  SmiApps result;
  result.warnings = t.warnings;
  for (std::size_t r = 0; r < t.rows.size(); ++r) {
    const std::string* used = t.get(r, "used_gpu_memory");
    if (used == nullptr) used = t.get(r, "used_memory");
    std::string problem;
    SmiApp app = app_from_fields(t.get(r, "gpu_uuid"), *t.get(r, "pid"), t.get(r, "process_name"),
                                 used, problem);
    if (!problem.empty()) {
      result.warnings.push_back("row " + std::to_string(r + 1) + ": " + problem);
      continue;
    }
    result.apps.push_back(std::move(app));
  }
  return result;
}

void attach_smi_apps(std::vector<GpuSample>& gpus, const std::vector<SmiApp>& apps,
                     std::vector<std::string>& warnings) {
  for (const SmiApp& app : apps) {
    auto gpu = std::find_if(gpus.begin(), gpus.end(),
                            [&](const GpuSample& g) { return g.uuid == app.gpu_uuid; });
    if (gpu == gpus.end()) {
      warnings.push_back("process " + std::to_string(app.process.pid) + " is on " + app.gpu_uuid +
                         ", which no GPU has");
      continue;
    }
    auto same = std::find_if(gpu->processes.begin(), gpu->processes.end(),
                             [&](const ProcessMemory& p) { return p.pid == app.process.pid; });
    if (same == gpu->processes.end()) {
      gpu->processes.push_back(app.process);
    } else if (app.process.used && (!same->used || *app.process.used > *same->used)) {
      same->used = app.process.used;
    }
  }
}

Result<std::string> find_nvidia_smi() {
  const char* env = std::getenv("VRAMD_NVIDIA_SMI");
  if (env != nullptr && *env != '\0') {
    if (::access(env, X_OK) == 0) return std::string(env);
    return make_error(std::string("nvidia-smi not found at $VRAMD_NVIDIA_SMI=") + env);
  }
  const char* path = std::getenv("PATH");
  std::string dirs = path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin";
  std::string_view rest = dirs;
  while (true) {
    auto colon = rest.find(':');
    std::string dir(rest.substr(0, colon));
    if (dir.empty()) dir = ".";
    std::string candidate = dir + "/nvidia-smi";
    struct stat st {};
    if (::stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
        ::access(candidate.c_str(), X_OK) == 0) {
      return candidate;
    }
    if (colon == std::string_view::npos) break;
    rest.remove_prefix(colon + 1);
  }
  return make_error("nvidia-smi not found on PATH (" + dirs + ")");
}

Result<std::unique_ptr<NvidiaSmiReader>> NvidiaSmiReader::open() {
  Result<std::string> binary = find_nvidia_smi();
  if (!binary.ok()) return make_error(binary.error());
  return std::make_unique<NvidiaSmiReader>(*binary);
}

NvidiaSmiReader::NvidiaSmiReader(std::string binary, Duration timeout)
    : binary_(std::move(binary)), timeout_(timeout) {}

GpuReading NvidiaSmiReader::read_gpus(ProcessListSchedule* lists) {
  GpuReading reading;
  reading.backend = "nvidia-smi";
  warnings_.clear();
  auto run = [&](const char* query, std::string& out) -> bool {
    ProcessOutput r = run_process({binary_, query, "--format=csv,noheader,nounits"}, timeout_);
    if (!r.spawn_error.empty()) {
      reading.error = "cannot run " + binary_ + ": " + r.spawn_error;
    } else if (r.timed_out) {
      reading.error =
          binary_ + " did not answer within " + std::to_string(timeout_.count()) + " ms; killed";
    } else if (r.exit_code != 0) {
      std::string why = first_line(r.err);
      if (why.empty()) why = first_line(r.out);  // nvidia-smi prints its failures on stdout
      reading.error = "nvidia-smi failed (exit " + std::to_string(r.exit_code) + ")" +
                      (why.empty() ? "" : ": " + why);
    } else {
      out = std::move(r.out);
      return true;
    }
    return false;
  };
  std::string gpu_out, apps_out;
  if (!run("--query-gpu=index,uuid,name,memory.total,memory.used,utilization.gpu,"
           "temperature.gpu,power.draw",
           gpu_out)) {
    return reading;
  }
  SmiGpus gpus = parse_smi_query_gpu(gpu_out);
  warnings_ = std::move(gpus.warnings);
  reading.gpus = std::move(gpus.gpus);
  auto key = &ProcessListSchedule::key_of;
  bool due = lists == nullptr || !mig_listing_.empty() || mig_check_in_ == 0;
  for (const GpuSample& g : reading.gpus) due = due || lists->due(key(g), g.used);
  if (!due) {
    for (GpuSample& g : reading.gpus) {
      g.processes = lists->last(key(g));
      g.processes_listed = false;
    }
    --mig_check_in_;
    return reading;
  }
  if (!run("--query-compute-apps=gpu_uuid,pid,process_name,used_memory", apps_out)) {
    // The cards were read; only the process list is missing.
    for (GpuSample& g : reading.gpus) {
      g.processes_readable = false;
      if (lists != nullptr) lists->listed(key(g), g.used, false, {});
    }
    warnings_.push_back(reading.error);
    reading.error.clear();
    return reading;
  }
  SmiApps apps = parse_smi_compute_apps(apps_out);
  warnings_.insert(warnings_.end(), apps.warnings.begin(), apps.warnings.end());
  attach_smi_apps(reading.gpus, apps.apps, warnings_);
  if (lists != nullptr)
    for (const GpuSample& g : reading.gpus) lists->listed(key(g), g.used, true, g.processes);

  // MIG: which instances exist (`nvidia-smi -L`, looked at again every kMigRecheckReads reads:
  // MIG mode changes only with a GPU reset); while there are some, their memory and processes
  // come from the plain table, the only output that names the instance of each process.
  auto run_args = [&](std::vector<std::string> argv, std::string& out) {
    ProcessOutput r = run_process(argv, timeout_);
    if (!r.spawn_error.empty() || r.timed_out || r.exit_code != 0) {
      warnings_.push_back(argv.size() > 1 ? "nvidia-smi " + argv[1] + " failed"
                                          : "nvidia-smi (table) failed");
      return false;
    }
    out = std::move(r.out);
    return true;
  };
  if (mig_check_in_ == 0) {
    std::string list_out;
    if (run_args({binary_, "-L"}, list_out)) mig_listing_ = parse_smi_list(list_out);
    mig_check_in_ = kMigRecheckReads;
  } else {
    --mig_check_in_;
  }
  if (!mig_listing_.empty()) {
    std::string table_out;
    if (run_args({binary_}, table_out)) {
      SmiMigTable table = parse_smi_mig_table(table_out);
      warnings_.insert(warnings_.end(), table.warnings.begin(), table.warnings.end());
      apply_smi_mig(reading.gpus, table, mig_listing_);
    }
  }
  return reading;
}

}  // namespace vramd
