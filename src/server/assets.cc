#include "server/assets.h"
#include "core/text.h"

#include <fmt/format.h>
#include <algorithm>
#include <cctype>
#include <string_view>

#include "server/json_view.h"
#include "web_assets.h"  // generated from web/ by cmake/embed_assets.cmake

namespace vramd {

namespace http = boost::beast::http;

namespace {

// Scripts, styles and data come only from vramd itself: no inline script, no CDN, no framing.
constexpr const char* kContentSecurityPolicy =
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; "
    "form-action 'self'; frame-ancestors 'none'";

const EmbeddedAsset* find_asset(std::string_view name) {
  for (size_t i = 0; i < kWebAssetCount; ++i)
    if (kWebAssets[i].name == name) return &kWebAssets[i];
  return nullptr;
}


// A path that tries to leave the asset folder, plainly or percent-encoded ("%2e%2e", "%2f").
bool looks_like_traversal(std::string_view path) {
  std::string p = lower(path);
  return p.find("..") != std::string::npos || p.find("%2e") != std::string::npos ||
         p.find("%2f") != std::string::npos || p.find("%5c") != std::string::npos ||
         p.find('\\') != std::string::npos;
}

// If-None-Match: "*", or a list of (possibly weak) tags, one of which is ours.
bool etag_matches(std::string_view header, std::string_view etag) {
  while (!header.empty()) {
    size_t comma = header.find(',');
    std::string_view tag = header.substr(0, comma);
    while (!tag.empty() && tag.front() == ' ') tag.remove_prefix(1);
    while (!tag.empty() && tag.back() == ' ') tag.remove_suffix(1);
    if (tag.starts_with("W/")) tag.remove_prefix(2);
    if (tag == "*" || tag == etag) return true;
    if (comma == std::string_view::npos) break;
    header.remove_prefix(comma + 1);
  }
  return false;
}

HttpResponse error_response(const HttpRequest& req, unsigned status, const std::string& code,
                            const std::string& message) {
  HttpResponse res = json_response(status, error_json(code, message).dump(), req.version());
  res.set("X-Content-Type-Options", "nosniff");
  return res;
}

}  // namespace

std::optional<HttpResponse> serve_asset(const HttpRequest& req) {
  std::string_view target = req.target();
  std::string_view path = target.substr(0, target.find_first_of("?#"));

  std::string_view name;
  if (path == "/" || path == "/index.html") {
    name = "index.html";
  } else if (path.starts_with("/assets/")) {
    name = path.substr(8);
  } else if (looks_like_traversal(path)) {
    return error_response(req, 404, "not_found", "no such file");
  } else {
    return std::nullopt;  // not the dashboard's: the API answers it
  }
  if (looks_like_traversal(path) || name.find('/') != std::string_view::npos)
    return error_response(req, 404, "not_found", "no such file");

  const EmbeddedAsset* asset = find_asset(name);
  if (!asset)
    return error_response(req, 404, "not_found",
                          fmt::format("no dashboard file named '{}'", std::string(name)));

  bool head = req.method() == http::verb::head;
  if (req.method() != http::verb::get && !head) {
    HttpResponse res =
        error_response(req, 405, "method_not_allowed",
                       fmt::format("{} only accepts GET and HEAD", std::string(path)));
    res.set(http::field::allow, "GET, HEAD");
    return res;
  }

  bool not_modified = etag_matches(req[http::field::if_none_match], asset->etag);
  HttpResponse res{not_modified ? http::status::not_modified : http::status::ok, req.version()};
  res.set(http::field::etag, asset->etag);
  // The names carry no hash, so browsers revalidate every file (a cheap 304 thanks to the ETag)
  // and a new vramd never runs with an old app.js.
  res.set(http::field::cache_control, "no-cache");
  res.set("X-Content-Type-Options", "nosniff");
  res.set("Content-Security-Policy", kContentSecurityPolicy);
  res.set("Referrer-Policy", "no-referrer");
  if (!not_modified) {
    res.set(http::field::content_type, asset->content_type);
    // HEAD: headers only. (The server sets Content-Length from the body, so HEAD reports 0.)
    if (!head) res.body().assign(asset->body.data(), asset->body.size());
  }
  return res;
}

}  // namespace vramd
