#include "server/assets.h"

namespace vramd {

// Placeholder until the dashboard lands (web/): no dashboard paths yet.
std::optional<HttpResponse> serve_asset(const HttpRequest&) { return std::nullopt; }

}  // namespace vramd
