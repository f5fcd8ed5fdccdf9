#include "daemon/duration_recorder.h"

#include <boost/asio/post.hpp>
#include <chrono>
#include <cmath>
#include <spdlog/spdlog.h>

namespace vramd {

namespace asio = boost::asio;

struct RecorderStoreSide {
  std::vector<DurationRecord> unwritten;
  std::optional<std::chrono::steady_clock::time_point> last_prune;
  bool failing = false;
};

namespace {

constexpr auto kFlushEvery = std::chrono::seconds(1);
constexpr auto kPruneEvery = std::chrono::hours(1);

std::optional<double> seconds_or_none(float v) {
  if (v < 0 || !std::isfinite(v)) return std::nullopt;
  return static_cast<double>(v);
}

}  // namespace

DurationRecorder::DurationRecorder(asio::io_context& io, asio::thread_pool& store_thread,
                                   std::shared_ptr<DurationStore> store, Duration retention,
                                   Stamps stamps)
    : io_(io),
      store_thread_(store_thread),
      store_(std::move(store)),
      retention_(retention),
      stamps_(std::move(stamps)),
      timer_(io),
      store_side_(std::make_shared<RecorderStoreSide>()) {
  // A burst fills half the ring before the second is up: drained at once (posted: push runs
  // inside the proxy's exchange).
  log_.on_half_full([this] {
    asio::post(io_, [this] {
      if (!stopped_) flush();
    });
  });
}

DurationRecorder::~DurationRecorder() { stopped_ = true; }

DurationRecord DurationRecorder::to_record(const RequestSample& s) {
  DurationRecord r;
  r.kind = RecordKind::request;
  r.service = std::string(s.service_name());
  r.model = std::string(s.model_name());
  r.at = TimePoint(std::chrono::milliseconds(s.at_ms));
  r.status = s.status;
  r.wait_s = seconds_or_none(s.wait_s);
  r.first_byte_s = seconds_or_none(s.first_byte_s);
  r.seconds = std::max(0.0, static_cast<double>(s.seconds));
  if (s.tokens_per_s > 0 && std::isfinite(s.tokens_per_s)) r.tokens_per_s = s.tokens_per_s;
  return r;
}

void DurationRecorder::start() {
  if (stopped_) return;
  timer_.expires_after(kFlushEvery);
  timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec || stopped_) return;
    flush();
    start();
  });
}

void DurationRecorder::stop() {
  if (stopped_) return;
  flush();
  stopped_ = true;
  timer_.cancel();
}

void DurationRecorder::record(std::vector<DurationRecord> records) {
  for (auto& r : records) pending_.push_back(std::move(r));
}

void DurationRecorder::remember(const ServiceVariant& v) {
  asio::post(store_thread_, [store = store_, v] {
    if (auto s = store->save_variant(v); !s) spdlog::warn("history: {}", s.error());
  });
}

void DurationRecorder::flush() {
  std::vector<RequestSample> samples;
  log_.drain(samples);
  std::map<std::string, Running> running;
  if (!samples.empty() && stamps_) running = stamps_();
  std::vector<DurationRecord> batch = std::move(pending_);
  pending_.clear();
  TimePoint cutoff = std::chrono::time_point_cast<std::chrono::milliseconds>(
                         std::chrono::system_clock::now()) -
                     retention_;
  asio::post(store_thread_, [store = store_, side = store_side_, batch = std::move(batch),
                             samples = std::move(samples), running = std::move(running),
                             cutoff]() mutable {
    for (const RequestSample& sample : samples) {
      DurationRecord r = to_record(sample);
      if (auto it = running.find(r.service); it != running.end()) {
        r.version = it->second.version;
        r.args_fp = it->second.args_fp;
        r.gpu = it->second.gpu;
      }
      batch.push_back(std::move(r));
    }
    auto& s = *side;
    if (!batch.empty() || !s.unwritten.empty()) {
      if (!s.unwritten.empty()) {
        batch.insert(batch.begin(), std::make_move_iterator(s.unwritten.begin()),
                     std::make_move_iterator(s.unwritten.end()));
        s.unwritten.clear();
      }
      if (auto r = store->add(batch); !r) {
        if (!s.failing) spdlog::warn("history: {} records not written: {}", batch.size(), r.error());
        s.failing = true;
        if (batch.size() > kMaxUnwritten)
          batch.erase(batch.begin(), batch.begin() + static_cast<long>(batch.size() - kMaxUnwritten));
        s.unwritten = std::move(batch);
      } else {
        s.failing = false;
      }
    }
    auto now = std::chrono::steady_clock::now();
    if (!s.last_prune || now - *s.last_prune >= kPruneEvery) {
      s.last_prune = now;
      if (auto n = store->prune(cutoff); !n)
        spdlog::warn("history: {}", n.error());
      else if (*n > 0)
        spdlog::info("history: {} records older than the retention dropped", *n);
    }
  });
}

}  // namespace vramd
