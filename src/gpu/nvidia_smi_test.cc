#include "gpu/nvidia_smi.h"

#include "core/gpu_select.h"

#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include "test_paths.h"

namespace vramd {
namespace {

std::string fixture(const std::string& name) {
  std::ifstream in(vramd::test_paths::source_dir() + "/tests/fixtures/nvidia-smi/" + name);
  EXPECT_TRUE(in.good()) << name;
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(SplitCsvLine, TrimsSpacesAfterCommas) {
  EXPECT_EQ(split_csv_line("0, GPU-a, NVIDIA GeForce RTX 3090, 24576"),
            (std::vector<std::string>{"0", "GPU-a", "NVIDIA GeForce RTX 3090", "24576"}));
}

TEST(SplitCsvLine, QuotedFieldsKeepCommasAndQuotes) {
  EXPECT_EQ(split_csv_line(R"(1, "a, b", "say ""hi""", c)"),
            (std::vector<std::string>{"1", "a, b", "say \"hi\"", "c"}));
}

TEST(SplitCsvLine, EmptyFieldsAndCarriageReturn) {
  EXPECT_EQ(split_csv_line("a,,b, \r"), (std::vector<std::string>{"a", "", "b", ""}));
  EXPECT_EQ(split_csv_line(""), (std::vector<std::string>{""}));
}

TEST(ParseSmiNumber, PlainAndWithUnits) {
  EXPECT_EQ(parse_smi_number("16959"), 16959.0);
  EXPECT_EQ(parse_smi_number(" 16959 MiB "), 16959.0);
  EXPECT_EQ(parse_smi_number("295.01 W"), 295.01);
  EXPECT_EQ(parse_smi_number("100.00 %"), 100.0);
  EXPECT_EQ(parse_smi_number("12%"), 12.0);
}

TEST(ParseSmiNumber, NotAvailableIsNulloptNeverZero) {
  EXPECT_EQ(parse_smi_number("[N/A]"), std::nullopt);
  EXPECT_EQ(parse_smi_number("N/A"), std::nullopt);
  EXPECT_EQ(parse_smi_number("[Not Supported]"), std::nullopt);
  EXPECT_EQ(parse_smi_number("[Requested functionality has been deprecated]"), std::nullopt);
  EXPECT_EQ(parse_smi_number("[Unknown Error]"), std::nullopt);
  EXPECT_EQ(parse_smi_number(""), std::nullopt);
  EXPECT_EQ(parse_smi_number("Enabled"), std::nullopt);
  EXPECT_EQ(parse_smi_number("12abc3"), std::nullopt);
  EXPECT_EQ(parse_smi_number("0x83"), std::nullopt);
}

TEST(ParseSmiQueryGpu, TwoGpusWithNotSupportedPower) {
  SmiGpus r = parse_smi_query_gpu(fixture("query-gpu-two-gpus.csv"));
  EXPECT_TRUE(r.warnings.empty());
  ASSERT_EQ(r.gpus.size(), 2u);
  const GpuSample& g0 = r.gpus[0];
  EXPECT_EQ(g0.index, 0u);
  EXPECT_EQ(g0.uuid, "GPU-1b2c3d4e-0000-4000-8000-000000000001");
  EXPECT_EQ(g0.name, "NVIDIA GeForce RTX 3090");
  EXPECT_EQ(g0.total, 24576 * MiB);
  EXPECT_EQ(g0.used, 17408 * MiB);
  EXPECT_EQ(g0.utilization_pct, 37.0);
  EXPECT_EQ(g0.temperature_c, 61u);
  EXPECT_EQ(g0.power_w, 212.40);
  EXPECT_EQ(g0.health, GpuHealth::ok);
  EXPECT_EQ(r.gpus[1].index, 1u);
  EXPECT_EQ(r.gpus[1].name, "NVIDIA RTX A4000");
  EXPECT_EQ(r.gpus[1].power_w, std::nullopt);
}

TEST(ParseSmiQueryGpu, WslNotAvailableFiguresStayUnknown) {
  SmiGpus r = parse_smi_query_gpu(fixture("query-gpu-wsl-na.csv"));
  ASSERT_EQ(r.gpus.size(), 1u);
  EXPECT_EQ(r.gpus[0].total, 16376 * MiB);
  EXPECT_EQ(r.gpus[0].used, 14360 * MiB);
  EXPECT_EQ(r.gpus[0].utilization_pct, std::nullopt);
  EXPECT_EQ(r.gpus[0].temperature_c, std::nullopt);
  EXPECT_EQ(r.gpus[0].power_w, std::nullopt);
}

TEST(ParseSmiQueryGpu, DeprecatedFieldIsUnknown) {
  SmiGpus r = parse_smi_query_gpu(fixture("query-gpu-deprecated.csv"));
  ASSERT_EQ(r.gpus.size(), 1u);
  EXPECT_EQ(r.gpus[0].temperature_c, std::nullopt);
  EXPECT_EQ(r.gpus[0].power_w, 71.05);
}

TEST(ParseSmiQueryGpu, TruncatedLinesAreSkippedAndReported) {
  SmiGpus r = parse_smi_query_gpu(fixture("query-gpu-truncated.csv"));
  ASSERT_EQ(r.gpus.size(), 1u);
  EXPECT_EQ(r.gpus[0].used, 17408 * MiB);
  ASSERT_EQ(r.warnings.size(), 2u);
  EXPECT_NE(r.warnings[0].find("line 2"), std::string::npos) << r.warnings[0];
  EXPECT_NE(r.warnings[0].find("got 3"), std::string::npos) << r.warnings[0];
  EXPECT_NE(r.warnings[1].find("index is not a number"), std::string::npos) << r.warnings[1];
}

TEST(ParseSmiQueryGpu, EmptyOutputHasNoGpusAndNoWarnings) {
  SmiGpus r = parse_smi_query_gpu(fixture("empty.csv"));
  EXPECT_TRUE(r.gpus.empty());
  EXPECT_TRUE(r.warnings.empty());
}

TEST(ParseSmiQueryGpu, MemoryNotAvailableMarksGpuAsError) {
  SmiGpus r = parse_smi_query_gpu("0, GPU-x, Card, [N/A], [N/A], 0, 40, 10\n");
  ASSERT_EQ(r.gpus.size(), 1u);
  EXPECT_EQ(r.gpus[0].health, GpuHealth::error);
  EXPECT_FALSE(r.gpus[0].error.empty());
}

TEST(ParseSmiComputeApps, LinuxProcessesInBytes) {
  SmiApps r = parse_smi_compute_apps(fixture("compute-apps-linux.csv"));
  EXPECT_TRUE(r.warnings.empty());
  ASSERT_EQ(r.apps.size(), 3u);
  EXPECT_EQ(r.apps[0].gpu_uuid, "GPU-1b2c3d4e-0000-4000-8000-000000000001");
  EXPECT_EQ(r.apps[0].process.pid, 4242);
  EXPECT_EQ(r.apps[0].process.name, "/usr/bin/python3");
  EXPECT_EQ(r.apps[0].process.used, 16384 * MiB);
  EXPECT_EQ(r.apps[2].process.name, "/opt/app/run, worker.py");
  EXPECT_EQ(r.apps[2].process.used, 300 * MiB);
}

TEST(ParseSmiComputeApps, WddmNamesWithSpacesAndParenthesesAndNotAvailableMemory) {
  SmiApps r = parse_smi_compute_apps(fixture("compute-apps-wddm-na.csv"));
  EXPECT_TRUE(r.warnings.empty());
  ASSERT_EQ(r.apps.size(), 3u);
  EXPECT_EQ(r.apps[1].process.pid, 18422);
  EXPECT_EQ(r.apps[1].process.name, "C:\\Program Files (x86)\\Steam\\steamwebhelper.exe");
  for (const SmiApp& app : r.apps) EXPECT_EQ(app.process.used, std::nullopt) << app.process.pid;
}

TEST(ParseSmiComputeApps, TruncatedAndBadLinesAreSkippedAndReported) {
  SmiApps r = parse_smi_compute_apps(fixture("compute-apps-truncated.csv"));
  ASSERT_EQ(r.apps.size(), 1u);
  EXPECT_EQ(r.apps[0].process.pid, 4242);
  ASSERT_EQ(r.warnings.size(), 2u);
  EXPECT_NE(r.warnings[1].find("pid is not a number"), std::string::npos) << r.warnings[1];
}

TEST(ParseSmiComputeApps, EmptyOutputIsNoProcesses) {
  SmiApps r = parse_smi_compute_apps(fixture("empty.csv"));
  EXPECT_TRUE(r.apps.empty());
  EXPECT_TRUE(r.warnings.empty());
}

TEST(ParseSmiTable, ColumnsByNameWithoutUnits) {
  Result<SmiTable> t = parse_smi_table(fixture("query-gpu-headered.csv"));
  ASSERT_TRUE(t.ok()) << t.error();
  ASSERT_EQ(t->rows.size(), 2u);
  ASSERT_NE(t->get(0, "memory.used"), nullptr);
  EXPECT_EQ(*t->get(0, "memory.used"), "20480 MiB");
  EXPECT_EQ(t->get(0, "memory.used [MiB]"), nullptr);
  EXPECT_EQ(t->get(0, "no.such.column"), nullptr);
  EXPECT_FALSE(parse_smi_table(fixture("empty.csv")).ok());
}

TEST(ParseSmiQueryGpuHeadered, UnitsAndExtraColumnsInAnyOrder) {
  Result<SmiGpus> r = parse_smi_query_gpu_headered(fixture("query-gpu-headered.csv"));
  ASSERT_TRUE(r.ok()) << r.error();
  ASSERT_EQ(r->gpus.size(), 2u);
  EXPECT_EQ(r->gpus[0].uuid, "GPU-9c8d7e6f-0000-4000-8000-000000000200");
  EXPECT_EQ(r->gpus[0].name, "NVIDIA H200");
  EXPECT_EQ(r->gpus[0].total, 143771 * MiB);
  EXPECT_EQ(r->gpus[0].used, 20480 * MiB);
  EXPECT_EQ(r->gpus[0].utilization_pct, 12.0);
  EXPECT_EQ(r->gpus[0].power_w, 301.75);
  EXPECT_EQ(r->gpus[1].index, 1u);
  EXPECT_EQ(r->gpus[1].utilization_pct, std::nullopt);
  EXPECT_EQ(r->gpus[1].power_w, std::nullopt);
  EXPECT_FALSE(parse_smi_query_gpu_headered("index, name\n0, x\n").ok());
}

TEST(ParseSmiComputeAppsHeadered, SampleShapedOutput) {
  Result<SmiApps> r = parse_smi_compute_apps_headered(fixture("compute-apps-headered.csv"));
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_TRUE(r->warnings.empty());
  ASSERT_EQ(r->apps.size(), 3u);
  EXPECT_EQ(r->apps[0].process.pid, 30111);
  EXPECT_EQ(r->apps[0].process.used, 18432 * MiB);
  EXPECT_EQ(r->apps[1].process.name, "./train (copy)");
  EXPECT_EQ(r->apps[2].gpu_uuid, "GPU-9c8d7e6f-0000-4000-8000-000000000201");
  EXPECT_EQ(r->apps[2].process.used, std::nullopt);
}

TEST(ParseSmiComputeAppsHeadered, HeaderOnlyIsNoProcesses) {
  Result<SmiApps> r = parse_smi_compute_apps_headered(fixture("compute-apps-headered-empty.csv"));
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_TRUE(r->apps.empty());
}

TEST(AttachSmiApps, ByUuidOncePerPidAndUnknownUuidWarns) {
  SmiGpus gpus = parse_smi_query_gpu(fixture("query-gpu-two-gpus.csv"));
  SmiApps apps = parse_smi_compute_apps(fixture("compute-apps-linux.csv"));
  apps.apps.push_back({"GPU-1b2c3d4e-0000-4000-8000-000000000001", {4242, 17000 * MiB, "x"}});
  apps.apps.push_back({"GPU-elsewhere", {1, 1 * MiB, "y"}});
  std::vector<std::string> warnings;
  attach_smi_apps(gpus.gpus, apps.apps, warnings);
  ASSERT_EQ(gpus.gpus[0].processes.size(), 2u);
  EXPECT_EQ(gpus.gpus[0].processes[0].used, 17000 * MiB);
  ASSERT_EQ(gpus.gpus[1].processes.size(), 1u);
  EXPECT_EQ(gpus.gpus[1].processes[0].pid, 6001);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("GPU-elsewhere"), std::string::npos);
}

// Fuzzing found a pid of 1.65e12 cast to int (undefined behaviour; tests/fuzz/corpus/nvidia_smi/
// regression-pid-beyond-int): figures that do not fit their type are refused, not cast.
TEST(NvidiaSmi, FuzzRegressionNumbersBeyondTheirTypeAreRefused) {
  SmiApps apps = parse_smi_compute_apps(
      "GPU-1, 1650000000000, python, 100\n"
      "GPU-1, 42, python, 1e300\n");
  ASSERT_EQ(apps.apps.size(), 1u);
  EXPECT_EQ(apps.apps[0].process.pid, 42);
  EXPECT_EQ(apps.apps[0].process.used, std::nullopt);
  EXPECT_EQ(apps.warnings.size(), 1u);
  SmiGpus gpus = parse_smi_query_gpu(
      "99999999999, GPU-1, RTX, 24576, 100, 0, 40, 100\n"
      "0, GPU-2, RTX, 24576, 100, 0, 1e12, 100\n");
  ASSERT_EQ(gpus.gpus.size(), 1u);
  EXPECT_EQ(gpus.gpus[0].uuid, "GPU-2");
  EXPECT_EQ(gpus.gpus[0].temperature_c, std::nullopt);
  EXPECT_EQ(gpus.warnings.size(), 1u);
}

}  // namespace
}  // namespace vramd

namespace vramd {
namespace {

std::string read_sample(const char* name) {
  // A copy of shared/reference/samples/<name> (see SOURCES.md there).
  std::ifstream in(vramd::test_paths::source_dir() + "/tests/fixtures/nvidia-smi/" + name);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(SmiMig, TheH200TableParsesToTheSamePictureAsNvml) {
  std::string table = read_sample("nvidia-smi-table-h200-mig-590.48.txt");
  ASSERT_FALSE(table.empty()) << "sample missing";
  SmiMigTable t = parse_smi_mig_table(table);
  EXPECT_TRUE(t.warnings.empty());
  ASSERT_EQ(t.devices.size(), 5u);  // MIG devices 0-4; 0 and 1 are both of GI 2
  EXPECT_EQ(t.devices[1].gi, 2u);
  EXPECT_EQ(t.devices[1].ci, 1u);
  EXPECT_EQ(t.devices[1].mig_dev, 1u);
  EXPECT_EQ(t.devices[1].used, 16925 * MiB);
  EXPECT_EQ(t.devices[1].total, 71424 * MiB);
  ASSERT_EQ(t.processes.size(), 3u);
  EXPECT_EQ(t.processes[2].process.pid, 12267);
  EXPECT_EQ(t.processes[2].process.name, "./gpu_burn");
  EXPECT_EQ(t.processes[2].process.used, 13526 * MiB);
  EXPECT_EQ(t.processes[2].gi, 2u);
  EXPECT_EQ(t.processes[2].ci, 1u);

  // `nvidia-smi -L` in the shape the driver prints (constructed for this table's devices).
  std::vector<SmiMigListing> listing = parse_smi_list(
      "GPU 0: NVIDIA H200 (UUID: GPU-00000000-0000-0000-0000-000000000000)\n"
      "  MIG 3g.71gb     Device  0: (UUID: MIG-aaaaaaaa-0000-5000-8000-000000000000)\n"
      "  MIG 3g.71gb     Device  1: (UUID: MIG-aaaaaaaa-0000-5000-8000-000000000001)\n"
      "  MIG 2g.35gb     Device  2: (UUID: MIG-bbbbbbbb-0000-5000-8000-000000000000)\n"
      "  MIG 1g.18gb     Device  3: (UUID: MIG-cccccccc-0000-5000-8000-000000000000)\n"
      "  MIG 1g.18gb     Device  4: (UUID: MIG-dddddddd-0000-5000-8000-000000000000)\n");
  ASSERT_EQ(listing.size(), 5u);
  EXPECT_EQ(listing[2].profile, "2g.35gb");

  std::vector<GpuSample> gpus(1);
  gpus[0].index = 0;
  gpus[0].name = "NVIDIA H200";
  gpus[0].total = 143771 * MiB;
  gpus[0].used = 16959 * MiB;
  gpus[0].processes.push_back({12249, 2194 * MiB, "/root/tools/memhog", {}, {}});
  apply_smi_mig(gpus, t, listing);
  ASSERT_EQ(gpus.size(), 5u);  // the parent, GI 2, 3, 9, 10
  EXPECT_TRUE(gpus[0].mig_enabled);
  EXPECT_TRUE(gpus[0].processes.empty());
  EXPECT_FALSE(admits_leases(gpus[0]));
  const GpuSample& gi2 = gpus[1];
  EXPECT_EQ(gi2.label, "0/2");
  EXPECT_EQ(gi2.index, mig_flat_index(0, 2));
  EXPECT_EQ(gi2.parent, 0u);
  EXPECT_EQ(gi2.uuid, "MIG-aaaaaaaa-0000-5000-8000-000000000000");
  EXPECT_EQ(gi2.mig_profile, "3g.71gb");
  EXPECT_EQ(gi2.total, 71424 * MiB);  // GI 2's two compute instances: its memory once
  EXPECT_EQ(gi2.used, 16925 * MiB);
  ASSERT_EQ(gi2.processes.size(), 3u);
  Bytes sum = 0;
  for (const auto& p : gi2.processes) sum += *p.used;
  EXPECT_EQ(sum, (2194 + 1170 + 13526) * MiB);
  EXPECT_EQ(gpus[2].label, "0/3");
  EXPECT_EQ(gpus[3].label, "0/9");
  EXPECT_EQ(gpus[4].label, "0/10");
  EXPECT_EQ(gpus[4].used, 9 * MiB);
  EXPECT_TRUE(gpus[4].processes.empty());
}

TEST(SmiMig, MigOffTableHasNoDevicesAndProcessesWithoutInstanceIds) {
  SmiMigTable t = parse_smi_mig_table(
      "| Processes:                                                                              "
      "|\n"
      "|  GPU   GI   CI              PID   Type   Process name                        GPU Memory "
      "|\n"
      "|        ID   ID                                                               Usage      "
      "|\n"
      "|=========================================================================================|"
      "\n"
      "|    0   N/A  N/A            4242      C   python3 serve.py                      8000MiB |\n"
      "+-----------------------------------------------------------------------------------------+"
      "\n");
  EXPECT_TRUE(t.devices.empty());
  ASSERT_EQ(t.processes.size(), 1u);
  EXPECT_EQ(t.processes[0].gi, std::nullopt);
  EXPECT_EQ(t.processes[0].process.name, "python3 serve.py");
  std::vector<GpuSample> gpus(1);
  apply_smi_mig(gpus, t, {});
  ASSERT_EQ(gpus.size(), 1u);
  EXPECT_FALSE(gpus[0].mig_enabled);
}

}  // namespace
}  // namespace vramd
