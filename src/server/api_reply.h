// The API's JSON answers, shared by its route files (api.cc, api_leases.cc, api_history.cc).
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "server/http_server.h"
#include "server/json_view.h"

namespace vramd::api {

// Every JSON answer: messages may quote what the client sent, so bytes that are not UTF-8 are
// replaced, not thrown on.
inline HttpResponse reply(unsigned status, const nlohmann::json& body) {
  return json_response(status, body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

inline HttpResponse fail(unsigned status, const std::string& code, const std::string& message) {
  return reply(status, error_json(code, message));
}

}  // namespace vramd::api
