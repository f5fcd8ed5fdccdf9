// The live event feed (GET /v1/events with Accept: text/event-stream): its subscribers and the
// Server-Sent Events frames they get, in one place. Lives on the event loop; no locks.
#pragma once

#include <utility>  // GCC 12: before Boost's awaitable.hpp

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/actions.h"
#include "core/result.h"
#include "server/http_server.h"
#include "store/event_store.h"

namespace vramd {

// One SSE frame: "id: N\nevent: TYPE\ndata: {...}\n\n"; `data` (an unload's figures) when not null.
// `host`: the daemon's host name, in every frame when not empty.
std::string sse_frame(int64_t id, const EventRecord& e, const nlohmann::json& data,
                      const std::string& host = "");

class EventStream {
 public:
  // What a subscriber that resumes (Last-Event-ID) missed: events after an id, from the store.
  using ReadMissed =
      std::function<boost::asio::awaitable<Result<std::vector<StoredEvent>>>(int64_t after_id)>;
  // A subscriber that falls this far behind is closed (it reconnects and resumes by id).
  static constexpr size_t kQueueLimit = 1000;

  explicit EventStream(boost::asio::io_context& io) : io_(io) {}
  // The host named in every frame (several hosts, issue 17).
  void set_host(std::string host) { host_ = std::move(host); }

  // Hands one event to every subscriber.
  void publish(int64_t id, const EventRecord& e, const nlohmann::json& data);
  // Serves one subscriber until it goes away or close(): what it missed after `after_id` (each
  // id once, also when it came live while the store was read), then every event as it comes,
  // and a keep-alive comment every 15 s.
  boost::asio::awaitable<void> serve(HttpStream& stream, int64_t after_id, ReadMissed missed);
  void close();
  size_t subscribers() const { return subscribers_.size(); }

 private:
  std::string host_;
  struct Subscriber {
    explicit Subscriber(boost::asio::io_context& io) : wake(io) {}
    boost::asio::steady_timer wake;
    std::deque<std::string> queue;  // frames waiting to be written
    bool overflowed = false;
  };
  boost::asio::io_context& io_;
  std::list<std::shared_ptr<Subscriber>> subscribers_;
  bool closed_ = false;
};

}  // namespace vramd
