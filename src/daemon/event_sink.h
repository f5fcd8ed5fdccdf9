// The daemon's event sink: each event to the live stream (SSE subscribers, on the loop) and to
// the store (on the store thread), in order; the events a failing store did not take, kept (up
// to kMaxUnstored) and written first once it works again; and the shell's own faults (a store
// that cannot write, a stalled sampler, ...), each told once as `backend.failed` and once as
// `backend.recovered`.
//
// Lives on the daemon's loop; `unstored_` and `store_ok_` are touched only on the store thread.
#pragma once

#include <utility>  // (before Boost.Asio's awaitable.hpp, which uses std::exchange)

#include <boost/asio/io_context.hpp>
#include <boost/asio/thread_pool.hpp>

#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/actions.h"
#include "server/api.h"
#include "server/event_stream.h"
#include "store/event_store.h"

namespace vramd {

class EventSink {
 public:
  struct Hooks {
    std::function<Now()> clock;
    // The sink's own events (backend.failed, backend.recovered): the daemon applies them like
    // the core's (logged, counted, then published here).
    std::function<void(EmitEvent)> emit;
  };
  static constexpr size_t kMaxUnstored = 1000;
  // While the store fails, the events it did not take are tried again this often.
  static constexpr auto kRetryAfter = std::chrono::seconds(1);

  // REQUIRES: `io` and `store_thread` outlive it; open() before publish().
  EventSink(boost::asio::io_context& io, boost::asio::thread_pool& store_thread, Hooks hooks);

  // The store to write to; ids go on from its highest.
  void open(std::shared_ptr<EventStore> store, std::string host);
  // To the stream now; returns it with its id and data, to be stored (store()) or written with
  // a lease's change (the lease writer).
  StoredEvent publish(const EventRecord& event);
  // To the store, on the store thread, after those it has not taken yet.
  void store(StoredEvent event);
  // The store thread's view of whether the store writes (the lease writer's writes count too).
  void store_thread_saw(bool ok) { store_ok_ = ok; }

  // `backend` fails with `error` (told when it starts failing or its error changes), or works
  // again (told once, with how long it was down).
  void failed(const std::string& backend, const std::string& error);
  void works(const std::string& backend);
  // The backends that fail now, oldest first.
  std::vector<BackendFault> faults() const;

  EventStream& stream() { return stream_; }
  // Closes the stream; no more retries.
  void stop();

 private:
  void write(std::optional<StoredEvent> e);  // on the store thread
  void retry_soon();

  boost::asio::io_context& io_;
  boost::asio::thread_pool& store_thread_;
  Hooks hooks_;
  std::shared_ptr<EventStore> store_;
  EventStream stream_;
  int64_t next_id_ = 1;
  bool stopping_ = false;
  std::map<std::string, BackendFault> faults_;  // backend -> its current failure
  // Store thread only: whether its last write worked, and the events it could not write
  // (written first, in order, once it takes writes again; the oldest dropped past kMaxUnstored).
  bool store_ok_ = true;
  std::deque<StoredEvent> unstored_;
};

}  // namespace vramd
