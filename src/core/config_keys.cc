#include "core/config_keys.h"

#include <fmt/format.h>

#include <set>

namespace vramd {

RenderedDoc render_config_doc(std::string_view md) {
  static constexpr std::string_view kOpen = "<!-- keys ", kClose = "<!-- /keys -->";
  const std::vector<ConfigKeyDoc> keys = config_key_docs();
  std::set<std::string> tables;
  for (const auto& k : keys) tables.insert(k.table);
  RenderedDoc out;
  size_t pos = 0;
  for (;;) {
    size_t open = md.find(kOpen, pos);
    if (open == std::string_view::npos) break;
    size_t open_end = md.find("-->", open);
    size_t line_end = md.find('\n', open);
    if (open_end == std::string_view::npos || line_end == std::string_view::npos ||
        open_end > line_end) {
      out.error = "a \"<!-- keys TABLE -->\" marker is not closed on its line";
      break;
    }
    std::string table(md.substr(open + kOpen.size(), open_end - open - kOpen.size()));
    while (!table.empty() && table.back() == ' ') table.pop_back();
    if (!tables.count(table)) {
      out.error = fmt::format("\"<!-- keys {} -->\": no such table of keys", table);
      break;
    }
    size_t close = md.find(kClose, line_end);
    if (close == std::string_view::npos) {
      out.error = fmt::format("\"<!-- keys {} -->\" has no \"{}\"", table, kClose);
      break;
    }
    out.text += md.substr(pos, line_end + 1 - pos);
    out.text += "| key | type | default | meaning |\n|---|---|---|---|\n";
    for (const auto& k : keys)
      if (k.table == table)
        out.text += fmt::format("| `{}` | {} | {} | {} |\n", k.name, k.type, k.fallback, k.meaning);
    out.text += kClose;
    pos = close + kClose.size();
  }
  out.text += md.substr(pos);
  return out;
}

}  // namespace vramd
