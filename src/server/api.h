// The /v1 API routes over the daemon's state. Runs on the event loop, like the Arbiter.
#pragma once

#include <deque>
#include <functional>

#include "core/arbiter.h"
#include "server/http_server.h"

namespace vramd {

class Api {
 public:
  using Clock = std::function<TimePoint()>;
  Api(const Arbiter& arbiter, const std::deque<EventRecord>& events, Clock clock)
      : arbiter_(arbiter), events_(events), clock_(std::move(clock)) {}

  boost::asio::awaitable<HttpResponse> handle(HttpRequest req);

 private:
  HttpResponse route(const HttpRequest& req);

  const Arbiter& arbiter_;
  const std::deque<EventRecord>& events_;
  Clock clock_;
};

// Splits "/v1/history?gpu=0&window=15m" into path and decoded query parameters.
struct Target {
  std::string path;
  std::vector<std::pair<std::string, std::string>> query;
  const std::string* param(std::string_view name) const;
};
Target parse_target(std::string_view target);

}  // namespace vramd
