// The proxy's rewriting of HTTP heads (docs/proxy.md): the hop-by-hop fields removed, and a head
// written back as bytes, as Beast's serializer writes it. Fuzzed (tests/fuzz/proxy_wire_fuzz.cc).
#pragma once

#include <boost/beast/http/fields.hpp>
#include <boost/beast/http/message.hpp>
#include <string>

namespace vramd {

// Removes the hop-by-hop fields (RFC 9110 7.6.1): Connection, the fields it names, and the
// ones defined as such. Transfer-Encoding goes too: each side frames the body itself.
void strip_hop_by_hop(boost::beast::http::fields& f);

// The head (start line, the fields in their order, the empty line) into `out`, replacing what it
// held: a string the session keeps, so no allocation once it has grown.
void request_head(std::string& out, const boost::beast::http::request_header<>& h);
void response_head(std::string& out, const boost::beast::http::response_header<>& h);

}  // namespace vramd
