// The nvidia-smi backend: pure parsers of its CSV output, and NvidiaSmiReader, which runs it.
// Queries (shared/reference/gpu-and-host.md):
//   nvidia-smi --query-gpu=index,uuid,name,memory.total,memory.used,utilization.gpu,
//              temperature.gpu,power.draw --format=csv,noheader,nounits
//   nvidia-smi --query-compute-apps=gpu_uuid,pid,process_name,used_memory
//   --format=csv,noheader,nounits
// Unsupported values print as "[N/A]", "[Not Supported]", ...: they parse as nullopt, never 0.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/model.h"
#include "core/result.h"
#include "core/units.h"
#include "gpu/gpu_reader.h"

namespace vramd {

// One CSV line: fields split on commas outside double quotes ("" inside quotes is a quote);
// spaces around each field trimmed (nvidia-smi writes ", " between fields); a trailing \r dropped.
std::vector<std::string> split_csv_line(std::string_view line);

// A number as nvidia-smi prints it, with an optional unit suffix (" MiB", " W", " %", " MHz"...).
// nullopt for "[N/A]", "N/A", "[Not Supported]", any "[...]", empty, or anything not a number.
std::optional<double> parse_smi_number(std::string_view field);

// What a parser kept, and one warning per line it skipped ("line 3: expected 8 fields, got 5").
struct SmiGpus {
  std::vector<GpuSample> gpus;
  std::vector<std::string> warnings;
};
struct SmiApp {
  std::string gpu_uuid;
  ProcessMemory process;  // used in bytes (MiB from nvidia-smi), nullopt for "[N/A]"
};
struct SmiApps {
  std::vector<SmiApp> apps;
  std::vector<std::string> warnings;
};

// Output of the --query-gpu command above (noheader, nounits; units are tolerated).
SmiGpus parse_smi_query_gpu(std::string_view output);
// Output of the --query-compute-apps command above (noheader, nounits; units are tolerated).
SmiApps parse_smi_compute_apps(std::string_view output);

// CSV with a header line (--format=csv): columns looked up by name, units dropped from the
// names ("memory.used [MiB]" is column "memory.used").
struct SmiTable {
  std::vector<std::string> columns;
  std::map<std::string, std::size_t> column_index;
  std::vector<std::vector<std::string>> rows;  // each has columns.size() fields
  std::vector<std::string> warnings;
  // The field of `row` in column `name`, or nullptr when there is no such column.
  const std::string* get(std::size_t row, const std::string& name) const;
};
// Error when the output is empty (no header at all).
Result<SmiTable> parse_smi_table(std::string_view output);

// The same queries with --format=csv (header, units, any column order, extra columns).
// Needs columns memory.total and memory.used (uuid, index, name and the rest when present).
Result<SmiGpus> parse_smi_query_gpu_headered(std::string_view output);
// Needs column pid; used_memory or used_gpu_memory, gpu_uuid, process_name when present.
Result<SmiApps> parse_smi_compute_apps_headered(std::string_view output);

// Gives each GPU its processes by uuid (a pid listed twice on one GPU counts once, larger known
// value). Apps on a uuid no GPU has go to `warnings`.
void attach_smi_apps(std::vector<GpuSample>& gpus, const std::vector<SmiApp>& apps,
                     std::vector<std::string>& warnings);

// Where nvidia-smi is: $VRAMD_NVIDIA_SMI when set, else the first executable "nvidia-smi" on
// PATH. Error says where it looked.
Result<std::string> find_nvidia_smi();

// ---- MIG, from nvidia-smi's own screens (the CSV queries do not say which instance) ----

// One row of the "MIG devices:" table of plain `nvidia-smi`, and one row of its "Processes:"
// table (GI/CI "N/A" with MIG off).
struct SmiMigDevice {
  unsigned gpu = 0, gi = 0, ci = 0, mig_dev = 0;
  Bytes used = 0, total = 0;  // MiB as printed
};
struct SmiMigProcess {
  unsigned gpu = 0;
  std::optional<unsigned> gi, ci;
  ProcessMemory process;
};
struct SmiMigTable {
  std::vector<SmiMigDevice> devices;
  std::vector<SmiMigProcess> processes;
  std::vector<std::string> warnings;
};
// Plain `nvidia-smi` output: its "MIG devices:" and "Processes:" tables (everything else skipped).
SmiMigTable parse_smi_mig_table(std::string_view output);

// `nvidia-smi -L`: "  MIG 3g.71gb Device  0: (UUID: MIG-...)" under "GPU 0: ...".
struct SmiMigListing {
  unsigned gpu = 0, mig_dev = 0;
  std::string profile, uuid;
};
std::vector<SmiMigListing> parse_smi_list(std::string_view output);

// Turns the GPUs that have MIG devices into MIG parents (mig_enabled, no processes of their own)
// followed by one GpuSample per GPU instance, as the NVML reader does (core/gpu_select.h).
void apply_smi_mig(std::vector<GpuSample>& gpus, const SmiMigTable& table,
                   const std::vector<SmiMigListing>& listing);

class NvidiaSmiReader : public GpuReader {
 public:
  static Result<std::unique_ptr<NvidiaSmiReader>> open();
  explicit NvidiaSmiReader(std::string binary, Duration timeout = std::chrono::seconds(10));

  std::string backend() const override { return "nvidia-smi"; }

  const std::string& binary() const { return binary_; }
  // Lines skipped by the last read().
  const std::vector<std::string>& last_warnings() const { return warnings_; }

 protected:
  // The process list is a run of its own (`--query-compute-apps`), skipped when `lists` says no
  // GPU's is due; with MIG on, always run (the plain table names each process's instance).
  GpuReading read_gpus(ProcessListSchedule* lists) override;

 private:
  static constexpr int kMigRecheckReads = 60;
  std::string binary_;
  Duration timeout_;
  std::vector<std::string> warnings_;
  int mig_check_in_ = 0;                    // reads left before `nvidia-smi -L` runs again
  std::vector<SmiMigListing> mig_listing_;  // its MIG devices, empty when none
};

}  // namespace vramd
