// The dashboard's files (web/), built into the binary so it works offline and from any
// directory. Served at "/" and under "/assets/".
#pragma once

#include <optional>

#include "server/http_server.h"

namespace vramd {

// The response for a GET or HEAD of a dashboard path: "/" (index.html) or "/assets/NAME";
// 404 JSON for an unknown asset or a path with "..". nullopt when the path is not a dashboard
// path at all (the API answers it).
std::optional<HttpResponse> serve_asset(const HttpRequest& req);

}  // namespace vramd
