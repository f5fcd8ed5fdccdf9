// docs/api.md's endpoint list against the API's route table: each (method, path) in one is in
// the other. A route added without its line in the docs, or a line left after its route went,
// fails here.
#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "server/api.h"
#include "test_paths.h"

namespace vramd {
namespace api_routes_test {

using Pairs = std::set<std::pair<std::string, std::string>>;

// "/v1/services/NAME/unload" → "/v1/services/{name}/unload"; "/v1/free?idle=true" → "/v1/free".
std::string as_pattern(std::string path) {
  path = path.substr(0, path.find('?'));
  path = std::regex_replace(path, std::regex("/NAME(/|$)"), "/{name}$1");
  path = std::regex_replace(path, std::regex("/ID(/|$)"), "/{id}$1");
  return path;
}

// The table under "## Endpoints", before its first "###": "| GET, POST | [`/v1/leases`](#leases) | … |". A backticked
// name without a slash is a sibling of the path before it: "`/v1/services/NAME/start`, `stop`".
Pairs documented(const std::string& markdown) {
  Pairs out;
  std::istringstream in(markdown);
  std::string line;
  bool in_list = false;
  while (std::getline(in, line)) {
    if (line.starts_with("## ")) in_list = line == "## Endpoints";
    if (line.starts_with("### ")) in_list = false;  // the endpoints' own sections and tables
    if (!in_list || !line.starts_with("| ") || line.starts_with("| method") || line.starts_with("|---"))
      continue;
    size_t bar = line.find(" | ", 2);
    std::string methods = line.substr(2, bar - 2);
    size_t end = line.find(" | ", bar + 3);
    std::string paths = line.substr(bar + 3, end - bar - 3);
    std::vector<std::string> found;
    std::regex code("`([^`]+)`");
    for (auto it = std::sregex_iterator(paths.begin(), paths.end(), code); it != std::sregex_iterator(); ++it) {
      std::string p = (*it)[1];
      if (!p.starts_with("/")) {
        EXPECT_FALSE(found.empty()) << line;
        if (found.empty()) continue;
        p = found.back().substr(0, found.back().rfind('/') + 1) + p;
      }
      found.push_back(p);
    }
    EXPECT_FALSE(found.empty()) << "a row of the endpoint list names no path: " << line;
    std::istringstream ms(methods);
    std::string m;
    while (std::getline(ms, m, ',')) {
      m.erase(0, m.find_first_not_of(' '));
      for (const auto& p : found) out.insert({m, as_pattern(p)});
    }
  }
  return out;
}

Pairs routed() {
  Pairs out;
  for (const auto& r : Api::routes())
    for (auto [bit, name] : {std::pair{kGet, "GET"}, {kPost, "POST"}, {kDelete, "DELETE"}}) {
      if (r.methods & bit) out.insert({name, std::string(r.pattern)});
    }
  return out;
}

TEST(ApiRoutes, TheDocsListEveryRouteAndNoOther) {
  std::ifstream f(vramd::test_paths::source_dir() + "/docs/api.md");
  ASSERT_TRUE(f) << "cannot read docs/api.md";
  std::stringstream text;
  text << f.rdbuf();
  Pairs docs = documented(text.str());
  Pairs table = routed();
  ASSERT_GT(table.size(), 20u);
  for (const auto& [m, p] : table) EXPECT_TRUE(docs.count({m, p})) << m << " " << p << " is routed but not in docs/api.md's endpoint list";
  for (const auto& [m, p] : docs) EXPECT_TRUE(table.count({m, p})) << m << " " << p << " is in docs/api.md's endpoint list but not routed";
}

TEST(ApiRoutes, TheDocsParserReadsSiblingsQueriesAndParameters) {
  Pairs got = documented(
      "## Endpoints\n\n| method | path | |\n|---|---|---|\n"
      "| POST | [`/v1/services/NAME/start`, `stop`](#x) | lifecycle |\n"
      "| GET, DELETE | [`/v1/leases/ID`](#y) | one |\n"
      "| POST | [`/v1/free?idle=true`](#z) | free |\n\n## Next\n| GET | `/not/listed` | |\n");
  Pairs want = {{"POST", "/v1/services/{name}/start"}, {"POST", "/v1/services/{name}/stop"},
                {"GET", "/v1/leases/{id}"},            {"DELETE", "/v1/leases/{id}"},
                {"POST", "/v1/free"}};
  EXPECT_EQ(got, want);
}

TEST(ApiRoutes, NoTwoRowsShareAMethodAndAPath) {
  std::set<std::pair<unsigned, std::string_view>> seen;
  for (const auto& r : Api::routes())
    for (unsigned bit : {kGet, kPost, kDelete}) {
      if (r.methods & bit) {
        EXPECT_TRUE(seen.insert({bit, r.pattern}).second) << r.pattern;
      }
    }
}

}  // namespace api_routes_test
}  // namespace vramd
