// /proc/PID/stat and /proc/PID/status (src/host/proc_table.h). The input's first line is the
// stat line; the rest is the status file, read by the real ProcTable from a fake proc root.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

#include "host/proc_table.h"

namespace {

std::string make_root() {
  char tmpl[] = "/tmp/vramd-fuzz-proc-XXXXXX";
  std::string root = mkdtemp(tmpl);
  std::filesystem::create_directories(root + "/4242");
  std::ofstream(root + "/stat") << "cpu 0 0 0 0\nbtime 1700000000\n";
  return root;
}

void write(const std::string& path, std::string_view content) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(content.data(), static_cast<std::streamsize>(content.size()));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string root = [] {
    std::string r = make_root();
    // The fake tree goes with the fuzzer: at exit, not per input.
    static std::string cleanup = r;
    std::atexit([] { std::filesystem::remove_all(cleanup); });
    return r;
  }();
  std::string_view text(reinterpret_cast<const char*>(data), size);
  size_t nl = text.find('\n');
  std::string_view stat = text.substr(0, nl);
  std::string_view status = nl == std::string_view::npos ? "" : text.substr(nl + 1);
  (void)vramd::parse_stat(text);
  (void)vramd::parse_stat(stat);
  write(root + "/4242/stat", stat);
  write(root + "/4242/status", status);
  write(root + "/meminfo", status);
  vramd::ProcTable table(root);
  (void)table.read(4242);
  (void)table.read_meminfo();
  return 0;
}
