// The API's routes as a table: one row per endpoint (methods, path pattern, the docs' line),
// read by the dispatcher, the 405's Allow header and the test that holds docs/api.md to it.
// Pure, so it is tested apart from the API that uses it.
#pragma once

#include <array>
#include <string>
#include <string_view>

#include <boost/beast/http/verb.hpp>

namespace vramd {

// A set of methods. HEAD is allowed wherever GET is.
enum Methods : unsigned { kGet = 1, kPost = 2, kDelete = 4 };

// Whether `verb` is one of `methods`.
bool method_in(boost::beast::http::verb verb, unsigned methods);
// "GET, HEAD", "POST", "GET, HEAD, DELETE": the Allow header's value.
std::string allow_header(unsigned methods);
// "GET", "GET, POST": as docs/api.md's endpoint table writes them.
std::string methods_text(unsigned methods);

// A path's parameters, in order: "/v1/services/{name}/unload" on "/v1/services/comfyui/unload"
// gives {"comfyui"}. A parameter is one whole, non-empty segment.
struct PathParams {
  std::array<std::string_view, 2> values{};
  size_t size = 0;
};

// Whether `path` matches `pattern` ("/v1/leases/{id}/heartbeat"); fills `out` when it does.
bool match_path(std::string_view pattern, std::string_view path, PathParams& out);

}  // namespace vramd
