// docs/config.md's key tables against the parser's rows: the committed file must be what
// render_config_doc makes of it, so a key added, renamed or given another default without the
// reference changing fails here. `make config-doc` writes the rendered file.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

#include "core/config.h"
#include "core/config_keys.h"
#include "test_paths.h"

namespace vramd {
namespace config_doc_test {

std::string read(const std::string& path) {
  std::ifstream f(path);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

TEST(ConfigDoc, TheReferenceIsRenderedFromTheKeyRows) {
  const std::string path = vramd::test_paths::source_dir() + "/docs/config.md";
  std::string committed = read(path);
  ASSERT_FALSE(committed.empty()) << "cannot read " << path;
  RenderedDoc r = render_config_doc(committed);
  ASSERT_EQ(r.error, "");
  if (const char* w = std::getenv("VRAMD_WRITE_CONFIG_DOC"); w && std::string(w) == "1") {
    std::ofstream(path) << r.text;
    committed = r.text;
  }
  if (r.text == committed) return;
  std::istringstream a(committed), b(r.text);
  std::string la, lb;
  for (int line = 1;; ++line) {
    bool ga = bool(std::getline(a, la)), gb = bool(std::getline(b, lb));
    if (!ga && !gb) break;
    if (la != lb || ga != gb) {
      ADD_FAILURE() << "docs/config.md differs from the key rows (core/config.cc) at line " << line
                    << ":\n  committed: " << la << "\n  rendered:  " << lb
                    << "\nRun `make config-doc` and commit docs/config.md.";
      break;
    }
  }
}

TEST(ConfigDoc, EveryTableIsShownOnceAndEveryKeyHasItsLine) {
  std::string committed = read(vramd::test_paths::source_dir() + "/docs/config.md");
  std::set<std::string> tables;
  for (const ConfigKeyDoc& k : config_key_docs()) {
    tables.insert(k.table);
    EXPECT_FALSE(k.type.empty()) << k.table << "." << k.name << " has no type";
    EXPECT_FALSE(k.meaning.empty()) << k.table << "." << k.name << " has no line in the reference";
    EXPECT_EQ(k.meaning.find('\n'), std::string::npos) << k.table << "." << k.name;
  }
  for (const std::string& t : tables) {
    std::string marker = "<!-- keys " + t + " -->";
    size_t at = committed.find(marker);
    EXPECT_NE(at, std::string::npos) << "docs/config.md shows no table of [" << t << "]";
    if (at != std::string::npos) {
      EXPECT_EQ(committed.find(marker, at + 1), std::string::npos) << marker << " twice";
    }
  }
}

TEST(ConfigDoc, BlocksAreRenderedAndTheRestKept) {
  RenderedDoc r = render_config_doc("# Title\n\ntext\n<!-- keys host -->\nold row\n<!-- /keys -->\nafter\n");
  ASSERT_EQ(r.error, "");
  EXPECT_EQ(r.text.substr(0, 32), "# Title\n\ntext\n<!-- keys host -->");
  EXPECT_NE(r.text.find("| key | type | default | meaning |\n|---|---|---|---|\n| `ram_reserve` |"),
            std::string::npos)
      << r.text;
  EXPECT_EQ(r.text.find("old row"), std::string::npos);
  EXPECT_TRUE(r.text.ends_with("\n<!-- /keys -->\nafter\n")) << r.text;
}

TEST(ConfigDoc, AMarkerForNoTableOrLeftOpenIsAnError) {
  EXPECT_EQ(render_config_doc("<!-- keys servcies -->\n<!-- /keys -->\n").error,
            "\"<!-- keys servcies -->\": no such table of keys");
  EXPECT_EQ(render_config_doc("<!-- keys gpu -->\n| a |\n").error,
            "\"<!-- keys gpu -->\" has no \"<!-- /keys -->\"");
}

// Each default the reference shows as a TOML value is one the parser takes for that key.
TEST(ConfigDoc, EveryDefaultShownIsAValueTheKeyAccepts) {
  int tried = 0;
  for (const ConfigKeyDoc& k : config_key_docs()) {
    if (k.value.empty()) continue;  // none, or said in words
    const std::string& value = k.value;
    std::string text;
    if (k.table == "services.NAME")
      text = "[services.s]\nkind = \"generic_http\"\nurl = \"http://127.0.0.1:9\"\n" +
             std::string(k.name == "unload_method" ? "unload_url = \"/unload\"\n" : "") + k.name + " = " +
             value + "\n";
    else if (k.table == "daemon" || k.table == "gpu" || k.table == "host" || k.table == "proxy")
      text = "[" + k.table + "]\n" + k.name + " = " + value + "\n";
    else
      continue;
    if (k.name == "kind" || k.name == "url") continue;  // set above
    auto c = parse_config(text, "vramd.toml");
    EXPECT_TRUE(c) << k.table << "." << k.name << " = " << value << ": " << c.error();
    ++tried;
  }
  EXPECT_GT(tried, 30);
}

}  // namespace config_doc_test
}  // namespace vramd
