#include "daemon/event_sink.h"

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "core/units.h"
#include "server/json_view.h"

namespace vramd {

namespace asio = boost::asio;

EventSink::EventSink(asio::io_context& io, asio::thread_pool& store_thread, Hooks hooks)
    : io_(io), store_thread_(store_thread), hooks_(std::move(hooks)), stream_(io) {}

void EventSink::open(std::shared_ptr<EventStore> store, std::string host) {
  store_ = std::move(store);
  if (auto max = store_->max_id(); max) next_id_ = *max + 1;
  stream_.set_host(std::move(host));
}

StoredEvent EventSink::publish(const EventRecord& event) {
  StoredEvent e{next_id_++, event,
                event.verdict  ? to_json(*event.verdict)
                : event.change ? to_json(*event.change)
                               : nlohmann::json(nullptr)};
  stream_.publish(e.id, e.event, e.data);  // SSE subscribers first: they are on this loop
  return e;
}

void EventSink::store(StoredEvent event) {
  asio::post(store_thread_, [this, e = std::move(event)]() mutable { write(std::move(e)); });
}

void EventSink::write(std::optional<StoredEvent> e) {
  if (e)
    unstored_.push_back(std::move(*e));
  else if (unstored_.empty())
    return;
  std::string error;
  while (!unstored_.empty()) {
    const StoredEvent& next = unstored_.front();
    auto r = store_->append(next.event, next.data, next.id);
    if (!r) {
      error = r.error();
      break;
    }
    unstored_.pop_front();
  }
  if (unstored_.size() > kMaxUnstored) {
    spdlog::warn("the store has not taken {} events: the oldest is dropped", unstored_.size());
    unstored_.pop_front();
  }
  bool ok = error.empty();
  if (!ok) spdlog::warn("{}", error);
  // Only a change is posted back: a working store costs the loop nothing.
  if (ok != std::exchange(store_ok_, ok))
    asio::post(io_, [this, error] {
      if (stopping_) return;
      if (error.empty())
        works("store");
      else
        failed("store", error);
    });
}

void EventSink::retry_soon() {
  // Events that could not be written are tried again while the store fails, so that it is seen
  // to work again (and they are written) even when nothing new happens.
  auto timer = std::make_shared<asio::steady_timer>(io_, kRetryAfter);
  timer->async_wait([this, timer](const boost::system::error_code&) {
    if (stopping_ || !faults_.count("store")) return;
    asio::post(store_thread_, [this] { write(std::nullopt); });
    retry_soon();
  });
}

void EventSink::failed(const std::string& backend, const std::string& error) {
  auto it = faults_.find(backend);
  if (it != faults_.end() && it->second.error == error) return;
  Now now = hooks_.clock();
  if (it == faults_.end())
    faults_[backend] = BackendFault{backend, error, now.wall};
  else
    it->second.error = error;
  spdlog::error("{}: {}", backend, error);
  if (backend == "store" && it == faults_.end()) retry_soon();
  // An event like the core's, so the dashboard, SSE and `vramd events` see it (stored when the
  // store works again, if it is the store that fails).
  hooks_.emit(make_event(now, "backend.failed", std::nullopt, backend,
                         fmt::format("{}: {}", backend, error)));
}

void EventSink::works(const std::string& backend) {
  auto it = faults_.find(backend);
  if (it == faults_.end()) return;
  Now now = hooks_.clock();
  Duration down = std::chrono::duration_cast<Duration>(now.wall - it->second.since);
  faults_.erase(it);
  hooks_.emit(make_event(now, "backend.recovered", std::nullopt, backend,
                         fmt::format("{} works again after {}", backend, format_duration(down))));
}

std::vector<BackendFault> EventSink::faults() const {
  std::vector<BackendFault> out;
  for (const auto& [name, f] : faults_) out.push_back(f);
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.since < b.since; });
  return out;
}

void EventSink::stop() {
  stopping_ = true;
  stream_.close();
}

}  // namespace vramd
