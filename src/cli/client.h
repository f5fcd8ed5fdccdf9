// A blocking HTTP client for the CLI: talks to the daemon over TCP or its unix socket.
#pragma once

#include <string>

#include "core/config.h"
#include "core/result.h"

namespace vramd {

struct DaemonReply {
  unsigned status = 0;
  std::string body;
};

// Where the daemon is: "http://127.0.0.1:7100" or "unix:/var/lib/vramd/vramd.sock".
struct DaemonAddress {
  std::string url;
};

// Errors are transport failures (refused, no such socket, timeout): the daemon is unreachable.
Result<DaemonReply> http_request(const DaemonAddress& addr, const std::string& method,
                               const std::string& target, const std::string& body = "",
                               int timeout_ms = 5000, const std::string& token = "");

// The token the CLI sends: daemon.token, else the content of daemon.token_file when this user may
// read it; "" otherwise (the unix socket, the usual way in for local users, needs none).
std::string client_token(const DaemonConfig& daemon);

}  // namespace vramd
