// The proxy's rewriting of a head (src/proxy/wire.h): a head that Beast's parser took, its
// hop-by-hop fields stripped and written back as bytes, parses again to the same message with
// no hop-by-hop field left. The first byte picks a request or a response.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include <boost/asio/buffer.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http.hpp>

#include "proxy/wire.h"

namespace {

namespace beast = boost::beast;
namespace http = beast::http;

void check(bool ok) {
  if (!ok) std::abort();
}

// A hop-by-hop field, or one a Connection field named, left after strip_hop_by_hop.
bool hop_left(const http::fields& f) {
  for (const auto& field : f) {
    switch (field.name()) {
      case http::field::connection:
      case http::field::keep_alive:
      case http::field::proxy_connection:
      case http::field::te:
      case http::field::trailer:
      case http::field::transfer_encoding:
      case http::field::upgrade:
      case http::field::proxy_authorization:
      case http::field::proxy_authenticate:
        return true;
      default:
        break;
    }
  }
  return false;
}

bool same_fields(const http::fields& a, const http::fields& b) {
  auto i = a.begin(), j = b.begin();
  for (; i != a.end() && j != b.end(); ++i, ++j)
    if (i->name_string() != j->name_string() || i->value() != j->value()) return false;
  return i == a.end() && j == b.end();
}

template <bool isRequest>
void one(std::string_view text) {
  http::parser<isRequest, http::empty_body> p;
  p.eager(false);
  p.header_limit(64 * 1024);
  beast::error_code ec;
  p.put(boost::asio::buffer(text.data(), text.size()), ec);
  if (ec || !p.is_header_done()) return;
  auto& m = p.get();
  std::string named(m[http::field::connection]);
  vramd::strip_hop_by_hop(m);
  check(!hop_left(m));
  std::string head;
  if constexpr (isRequest)
    vramd::request_head(head, m);
  else
    vramd::response_head(head, m);
  http::parser<isRequest, http::empty_body> again;
  again.eager(false);
  again.header_limit(128 * 1024);
  again.put(boost::asio::buffer(head), ec);
  check(!ec && again.is_header_done());
  const auto& n = again.get();
  check(same_fields(m, n));
  check(n.version() == m.version());
  if constexpr (isRequest) {
    check(n.method_string() == m.method_string());
    check(n.target() == m.target());
  } else {
    check(n.result_int() == m.result_int());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] & 1)
    one<true>(text);
  else
    one<false>(text);
  return 0;
}
