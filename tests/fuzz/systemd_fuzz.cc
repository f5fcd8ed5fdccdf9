// systemd's tools' output (src/host/systemd.h): `systemctl show` KEY=VALUE text, split in two at
// the first byte's choice and read as two reads of one unit (the unit watch's rule over them,
// src/supervisor/unit_watch.h), and every line as a `journalctl -o json` entry.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "host/systemd.h"
#include "supervisor/unit_watch.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  size_t cut = size ? data[0] % (size + 1) : 0;
  auto a = vramd::parse_systemctl_show(text.substr(0, cut));
  auto b = vramd::parse_systemctl_show(text.substr(cut));
  if (b) {
    std::optional<vramd::UnitShow> before;
    if (a) before = *a;
    for (const auto& e : vramd::UnitWatch::changes("s", before, *b))
      if (e.died && e.running) __builtin_trap();  // a die is never "running"
  }
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    (void)vramd::parse_journal_json_line(text.substr(pos, eol - pos));
    pos = eol + 1;
  }
  return 0;
}
