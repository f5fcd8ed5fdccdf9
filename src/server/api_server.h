// The API (server/api.h) and the HTTP server that answers with it: on [daemon] listen (TCP, with
// the token's rules) and on the state directory's socket.
#pragma once

#include <string>

#include <boost/asio/io_context.hpp>

#include "core/config.h"
#include "core/result.h"
#include "server/api.h"
#include "server/http_server.h"

namespace vramd {

class ApiServer {
 public:
  // REQUIRES: `io` and `daemon` outlive it.
  ApiServer(boost::asio::io_context& io, DaemonControl& daemon)
      : api_(daemon),
        http_(io, [this](HttpRequest req, HttpStream& s) { return api_.handle(std::move(req), s); }) {}

  // The token (`token`, or `token_file`'s), then `listen` and `socket_path` (mode 0660).
  Status listen(const DaemonConfig& d, const std::string& socket_path) {
    if (auto s = http_.secure(d.token, d.token_file); !s) return s;
    if (auto s = http_.listen_tcp(d.listen); !s) return s;
    return http_.listen_unix(socket_path);
  }
  int tcp_port() const { return http_.tcp_port(); }
  void close() { http_.close(); }

 private:
  Api api_;
  HttpServer http_;
};

}  // namespace vramd
