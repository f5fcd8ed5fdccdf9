// Who may talk to the daemon over TCP: the bearer token, and the browser rules (Origin, Host)
// that keep a web page from driving a daemon on loopback. Pure functions of the request.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "core/config.h"  // is_loopback_host: the config checks listen addresses with it too
#include "core/result.h"
#include "server/http_server.h"

namespace vramd {

// A Host header ("localhost:7100", "127.0.0.1", "[::1]:7100") naming this machine's loopback.
bool is_loopback_host_header(std::string_view host_header);

// Two secrets equal, in time that depends only on the length of `expected` (no exit at the
// first differing byte, nor at a length difference).
bool tokens_equal(std::string_view given, std::string_view expected);

// An Authorization header "Bearer TOKEN" (the scheme in any case, RFC 7235) carrying `token`.
bool bearer_ok(std::string_view authorization, std::string_view token);

// Dashboard files ("/", "/assets/..."): no data, so no token. Everything else is protected.
bool is_public_path(std::string_view decoded_path);

// The answer that refuses `req`, or nullopt when it may go on to the handler. `over_tcp` is false
// on the unix socket, whose file permissions are its access control.
std::optional<HttpResponse> check_request(const HttpRequest& req, const HttpSecurity& security,
                                          bool over_tcp);

// Reads a token file: its content without the trailing newline. Error when it cannot be read or
// is empty. `warning` is set when others than the owner and group may read it.
Result<std::string> read_token_file(const std::string& path, std::string* warning = nullptr);

}  // namespace vramd
