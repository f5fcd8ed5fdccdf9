// The keys of vramd.toml as the reference (docs/config.md) shows them, read from the parser's own
// rows (core/config.cc): one row per key gives its name, type, default, bounds, the field it sets
// and its line in the reference, so the parser, its "did you mean" and the docs cannot disagree.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace vramd {

struct ConfigKeyDoc {
  std::string table;     // "daemon", "gpu", "host", "services.NAME", "match", "proxy", "crash_rules"
  std::string name;      // "listen"
  std::string type;      // "duration", "size", "`\"auto\"` or size", ...
  std::string fallback;  // the default: "`\"1s\"`", "none", or words
  std::string meaning;   // one line of Markdown
  std::string value;     // the default as TOML, where one says it ("\"1s\"", "5"); else ""
};

// Every key, table by table in the order the reference shows them; the defaults read from
// default-constructed config structs.
std::vector<ConfigKeyDoc> config_key_docs();

// `markdown` (docs/config.md) with every block between "<!-- keys TABLE -->" and "<!-- /keys -->"
// rendered from config_key_docs(): a table of key, type, default and meaning. The rest is kept
// as it is. An unknown TABLE or a block left open is named in the error.
struct RenderedDoc {
  std::string text;
  std::string error;  // empty when every block was rendered
};
RenderedDoc render_config_doc(std::string_view markdown);

}  // namespace vramd
