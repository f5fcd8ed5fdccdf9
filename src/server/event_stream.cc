#include "server/event_stream.h"

#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <charconv>

#include <fmt/format.h>

#include "server/json_view.h"

namespace vramd {

namespace asio = boost::asio;

std::string sse_frame(int64_t id, const EventRecord& e, const nlohmann::json& data,
                      const std::string& host) {
  nlohmann::json frame = to_json(e);
  frame["id"] = id;
  if (!host.empty()) frame["host"] = host;
  if (!data.is_null()) frame["data"] = data;
  return fmt::format("id: {}\nevent: {}\ndata: {}\n\n", id, e.type,
                     frame.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

void EventStream::publish(int64_t id, const EventRecord& e, const nlohmann::json& data) {
  if (subscribers_.empty()) return;
  std::string frame = sse_frame(id, e, data, host_);
  for (auto& s : subscribers_) {
    if (s->queue.size() >= kQueueLimit)
      s->overflowed = true;
    else
      s->queue.push_back(frame);
    s->wake.cancel();
  }
}

void EventStream::close() {
  closed_ = true;
  for (auto& s : subscribers_) s->wake.cancel();
}

asio::awaitable<void> EventStream::serve(HttpStream& stream, int64_t after_id, ReadMissed missed) {
  auto sub = std::make_shared<Subscriber>(io_);
  subscribers_.push_back(sub);
  bool ok = co_await stream.start_event_stream();
  int64_t sent_up_to = after_id;
  // A reconnecting client (Last-Event-ID) first gets what it missed, from the store.
  if (ok && after_id > 0) {
    auto read = missed(after_id);
    auto events = co_await std::move(read);
    if (events) {
      for (const auto& e : *events) {
        sent_up_to = std::max(sent_up_to, e.id);
        if (!(ok = co_await stream.write(sse_frame(e.id, e.event, e.data, host_)))) break;
      }
    }
  }
  while (ok && !closed_ && !sub->overflowed) {
    while (ok && !sub->queue.empty()) {
      std::string frame = std::move(sub->queue.front());
      sub->queue.pop_front();
      // Events that came while the store was read were in both: send each id once.
      int64_t id = 0;
      if (frame.starts_with("id: "))
        std::from_chars(frame.data() + 4, frame.data() + frame.size(), id);
      if (id != 0 && id <= sent_up_to) continue;
      ok = co_await stream.write(std::move(frame));
    }
    if (!ok || closed_) break;
    sub->wake.expires_after(std::chrono::seconds(15));
    boost::system::error_code ec;
    co_await sub->wake.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    if (!ec) ok = co_await stream.write(": keep-alive\n\n");  // timer ran out: nothing new
  }
  subscribers_.remove(sub);
}

}  // namespace vramd
