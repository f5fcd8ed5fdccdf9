// The event sink against a real SQLite file: events stored in order with the ids the stream
// gave them; a store that fails is one `backend.failed`, its events kept and written first,
// in order, once it works again (tried again each second with nothing new), then one
// `backend.recovered`; past kMaxUnstored the oldest is dropped.
#include "daemon/event_sink.h"

#include <gtest/gtest.h>

#include <boost/asio/post.hpp>
#include <fmt/format.h>

#include <atomic>

#include "integration/test_util.h"

namespace vramd {
namespace event_sink_test {

namespace asio = boost::asio;
using namespace std::chrono_literals;

// The SQLite event store, refusing writes while `failing` (as a full disk does).
class FailingEvents : public EventStore {
 public:
  explicit FailingEvents(std::unique_ptr<EventStore> real) : real_(std::move(real)) {}
  Result<int64_t> append(const EventRecord& event, const nlohmann::json& data, int64_t id) override {
    if (failing) return make_error("database or disk is full");
    return real_->append(event, data, id);
  }
  Result<int64_t> max_id() const override { return real_->max_id(); }
  Result<std::vector<StoredEvent>> list(int64_t after_id, std::optional<TimePoint> since,
                                        size_t limit) const override {
    return real_->list(after_id, since, limit);
  }
  Result<int64_t> count() const override { return real_->count(); }

  std::atomic<bool> failing{false};

 private:
  std::unique_ptr<EventStore> real_;
};

class Fixture {
 public:
  Fixture() {
    auto real = EventStore::open(dir.file("vramd.db"), 100000);
    EXPECT_TRUE(real.ok()) << real.error();
    // One event from an earlier run of vramd: ids go on from it.
    EXPECT_TRUE((*real)->append(record("daemon.earlier"), nullptr, 41).ok());
    store = std::make_shared<FailingEvents>(std::move(*real));
    sink = std::make_unique<EventSink>(
        io, store_thread,
        EventSink::Hooks{[] { return Now{MonoTime(Duration(1)), std::chrono::time_point_cast<Duration>(std::chrono::system_clock::now())}; },
                         [this](EmitEvent e) {
                           emitted.push_back(e.event.type);
                           sink->store(sink->publish(e.event));
                         }});
    sink->open(store, "gpu1");
  }
  ~Fixture() {
    sink->stop();
    store_thread.join();
  }
  static EventRecord record(const std::string& type) {
    EventRecord e;
    e.at = std::chrono::time_point_cast<Duration>(std::chrono::system_clock::now());
    e.type = type;
    e.message = type;
    return e;
  }
  // Runs the loop until `done` or `limit`.
  void run_until(const std::function<bool()>& done, Duration limit = 5s) {
    auto until = std::chrono::steady_clock::now() + limit;
    while (!done() && std::chrono::steady_clock::now() < until) {
      io.restart();
      io.run_for(10ms);
    }
  }
  // (id, type) of every stored event after the earlier run's.
  std::vector<std::pair<int64_t, std::string>> stored() {
    auto list = store->list(41, std::nullopt, 5000);
    EXPECT_TRUE(list.ok()) << list.error();
    std::vector<std::pair<int64_t, std::string>> out;
    for (const auto& e : *list) out.emplace_back(e.id, e.event.type);
    return out;
  }

  testing::TempDir dir;
  asio::io_context io;
  asio::thread_pool store_thread{1};
  std::shared_ptr<FailingEvents> store;
  std::unique_ptr<EventSink> sink;
  std::vector<std::string> emitted;
};

TEST(EventSink, EventsAreStoredInOrderWithTheIdsTheStreamGaveThem) {
  Fixture f;
  StoredEvent a = f.sink->publish(Fixture::record("owner.appeared"));
  StoredEvent b = f.sink->publish(Fixture::record("owner.gone"));
  EXPECT_EQ(a.id, 42) << "ids go on from the store's highest";
  EXPECT_EQ(b.id, 43);
  f.sink->store(a);
  f.sink->store(b);
  f.run_until([&] { return f.stored().size() == 2; });
  EXPECT_EQ(f.stored(), (std::vector<std::pair<int64_t, std::string>>{{42, "owner.appeared"},
                                                                      {43, "owner.gone"}}));
  EXPECT_TRUE(f.emitted.empty());
  EXPECT_TRUE(f.sink->faults().empty());
}

TEST(EventSink, AFailingStoreIsOneFaultItsEventsAreKeptAndWrittenInOrderWhenItWorks) {
  Fixture f;
  f.store->failing = true;
  for (const char* type : {"unload.started", "unload.freed"})
    f.sink->store(f.sink->publish(Fixture::record(type)));
  f.run_until([&] { return !f.sink->faults().empty(); });
  ASSERT_EQ(f.sink->faults().size(), 1u);
  EXPECT_EQ(f.sink->faults()[0].backend, "store");
  EXPECT_EQ(f.sink->faults()[0].error, "database or disk is full");
  // The same error again is no new event.
  f.sink->store(f.sink->publish(Fixture::record("lease.overuse")));
  f.run_until([] { return false; }, 100ms);
  EXPECT_EQ(f.emitted, std::vector<std::string>{"backend.failed"});
  EXPECT_TRUE(f.stored().empty());
  // It works again: with nothing new, the retry (each kRetryAfter) writes what it kept, in order.
  f.store->failing = false;
  f.run_until([&] { return f.sink->faults().empty() && f.stored().size() == 5; });
  EXPECT_TRUE(f.sink->faults().empty());
  EXPECT_EQ(f.emitted, (std::vector<std::string>{"backend.failed", "backend.recovered"}));
  auto stored = f.stored();
  ASSERT_EQ(stored.size(), 5u);
  std::vector<std::string> types;
  for (size_t i = 0; i < stored.size(); ++i) {
    EXPECT_EQ(stored[i].first, 42 + static_cast<int64_t>(i)) << "in the order they were told";
    types.push_back(stored[i].second);
  }
  EXPECT_EQ(types, (std::vector<std::string>{"unload.started", "unload.freed", "backend.failed",
                                             "lease.overuse", "backend.recovered"}));
}

TEST(EventSink, PastTheLimitTheOldestUnstoredEventIsDropped) {
  Fixture f;
  f.store->failing = true;
  for (size_t i = 0; i < EventSink::kMaxUnstored + 5; ++i) {
    EventRecord e = Fixture::record("lease.queued");
    e.message = fmt::format("{}", i);
    f.sink->store(f.sink->publish(e));
  }
  // Every write tried (the store thread takes them in order) before the store works again.
  std::atomic<bool> tried{false};
  asio::post(f.store_thread, [&] { tried = true; });
  f.run_until([&] { return tried && !f.sink->faults().empty(); });
  f.store->failing = false;
  auto last_type = [&] {
    auto l = f.store->list(41, std::nullopt, 5000);
    return l.ok() && !l->empty() ? l->back().event.type : std::string();
  };
  f.run_until([&] { return f.sink->faults().empty() && last_type() == "backend.recovered"; });
  auto list = f.store->list(41, std::nullopt, 5000);
  ASSERT_TRUE(list.ok()) << list.error();
  ASSERT_FALSE(list->empty());
  // The kept ones are the newest, in order; the first few are gone.
  EXPECT_LE(list->size(), EventSink::kMaxUnstored + 2);
  EXPECT_NE((*list)[0].event.message, "0");
  EXPECT_EQ(list->back().event.type, "backend.recovered");
  for (size_t i = 1; i < list->size(); ++i) EXPECT_LT((*list)[i - 1].id, (*list)[i].id);
}

}  // namespace event_sink_test
}  // namespace vramd
