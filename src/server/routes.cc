#include "server/routes.h"

namespace vramd {

namespace http = boost::beast::http;

bool method_in(http::verb verb, unsigned methods) {
  switch (verb) {
    case http::verb::get:
    case http::verb::head:
      return (methods & kGet) != 0;
    case http::verb::post:
      return (methods & kPost) != 0;
    case http::verb::delete_:
      return (methods & kDelete) != 0;
    default:
      return false;
  }
}

namespace {
std::string join(unsigned methods, bool with_head) {
  std::string out;
  auto add = [&](const char* m) {
    if (!out.empty()) out += ", ";
    out += m;
  };
  if (methods & kGet) add("GET");
  if ((methods & kGet) && with_head) add("HEAD");
  if (methods & kPost) add("POST");
  if (methods & kDelete) add("DELETE");
  return out;
}
}  // namespace

std::string allow_header(unsigned methods) { return join(methods, true); }
std::string methods_text(unsigned methods) { return join(methods, false); }

bool match_path(std::string_view pattern, std::string_view path, PathParams& out) {
  PathParams got;
  size_t p = 0, s = 0;
  while (p < pattern.size() && s < path.size()) {
    if (pattern[p] == '{') {
      size_t close = pattern.find('}', p);
      size_t end = path.find('/', s);
      if (end == std::string_view::npos) end = path.size();
      if (close == std::string_view::npos || end == s || got.size == got.values.size()) return false;
      got.values[got.size++] = path.substr(s, end - s);
      p = close + 1;
      s = end;
      continue;
    }
    if (pattern[p] != path[s]) return false;
    ++p;
    ++s;
  }
  if (p != pattern.size() || s != path.size()) return false;
  out = got;
  return true;
}

}  // namespace vramd
