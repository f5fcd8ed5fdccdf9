#include "proxy/wire.h"

#include <boost/beast/core/string.hpp>
#include <boost/container/small_vector.hpp>
#include <string_view>

namespace vramd {

namespace beast = boost::beast;
namespace http = beast::http;

// Removes the hop-by-hop fields (RFC 9110 7.6.1): Connection, the fields it names, and the
// ones defined as such. Transfer-Encoding goes too: each side frames the body itself.
// One pass over the fields (by their parsed code, no lookups by name), then one that erases.
void strip_hop_by_hop(http::fields& f) {
  boost::container::small_vector<std::string, 4> named;  // copies: Connection goes too
  for (const auto& field : f) {
    if (field.name() != http::field::connection) continue;
    std::string_view v = field.value();
    size_t at = 0;
    while (at < v.size()) {
      size_t comma = v.find(',', at);
      std::string_view part = v.substr(at, comma == std::string_view::npos ? comma : comma - at);
      while (!part.empty() && (part.front() == ' ' || part.front() == '\t')) part.remove_prefix(1);
      while (!part.empty() && (part.back() == ' ' || part.back() == '\t')) part.remove_suffix(1);
      if (!part.empty()) named.emplace_back(part);
      if (comma == std::string_view::npos) break;
      at = comma + 1;
    }
  }
  for (auto it = f.begin(); it != f.end();) {
    bool hop = false;
    switch (it->name()) {
      case http::field::connection:
      case http::field::keep_alive:
      case http::field::proxy_connection:
      case http::field::te:
      case http::field::trailer:
      case http::field::transfer_encoding:
      case http::field::upgrade:
      case http::field::proxy_authorization:
      case http::field::proxy_authenticate:
        hop = true;
        break;
      default:
        for (const auto& n : named) hop = hop || beast::iequals(it->name_string(), n);
    }
    it = hop ? f.erase(it) : std::next(it);
  }
}

// A message's head as beast's serializer writes it (start line, the fields in their order, the
// empty line), into a string the session keeps: no allocation once it has grown, and the head
// goes out in the same write as the body's first bytes.
static void append_version(std::string& out, unsigned v) {
  out += "HTTP/";
  out += static_cast<char>('0' + v / 10);
  out += '.';
  out += static_cast<char>('0' + v % 10);
}
static void append_fields(std::string& out, const http::fields& f) {
  for (const auto& field : f) {
    out.append(field.name_string());
    out += ": ";
    out.append(field.value());
    out += "\r\n";
  }
  out += "\r\n";
}
void request_head(std::string& out, const http::request_header<>& h) {
  out.clear();
  out.append(h.method_string());
  out += ' ';
  out.append(h.target());
  out += ' ';
  append_version(out, h.version());
  out += "\r\n";
  append_fields(out, h);
}
void response_head(std::string& out, const http::response_header<>& h) {
  out.clear();
  append_version(out, h.version());
  unsigned code = h.result_int();
  out += ' ';
  out += static_cast<char>('0' + code / 100 % 10);
  out += static_cast<char>('0' + code / 10 % 10);
  out += static_cast<char>('0' + code % 10);
  out += ' ';
  out.append(h.reason());
  out += "\r\n";
  append_fields(out, h);
}

}  // namespace vramd
