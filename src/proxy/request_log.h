// What each proxied request took (docs/history.md): the proxy writes one fixed-size sample per
// request into a ring allocated once, the daemon drains it into the durations history on its
// store thread. Nothing on the request path allocates, parses JSON or waits on the store.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string_view>
#include <type_traits>
#include <vector>

namespace vramd {

struct RequestSample {
  std::array<char, 64> service{};  // truncated; NUL-padded
  std::array<char, 128> model{};   // the model asked, else the one the answer names
  uint16_t status = 0;
  int64_t at_ms = 0;         // wall time of the end
  float wait_s = -1;         // held for a wake or a slot; -1: not held
  float first_byte_s = -1;   // to the response's head; -1: none came
  float seconds = 0;         // in all
  float tokens_per_s = -1;   // -1: the answer did not say
  std::string_view service_name() const;
  std::string_view model_name() const;
  void set_service(std::string_view s);
  void set_model(std::string_view m);
};

// The last bytes of a response body, kept in a fixed buffer, and what they say about tokens:
// OpenAI's `usage.completion_tokens` (a streamed answer's last event when include_usage is set),
// llama.cpp's `timings.predicted_per_second`, Ollama's `eval_count` and `eval_duration` (its last
// line when streaming). Usage comes at the end of each of these answers.
class UsageScan {
 public:
  static constexpr size_t kTail = 768;
  void reset() { size_ = 0; }
  void feed(const char* data, size_t n);
  std::string_view tail() const { return {buf_.data(), size_}; }
  // Tokens per second, given how long generation took (seconds from the first byte, or the
  // whole request for an answer sent at once); < 0 when the tail does not say.
  double tokens_per_second(double generation_seconds) const;
  // The "model" the answer names ("" when none in the tail).
  std::string_view model() const;

 private:
  std::array<char, kTail> buf_{};
  size_t size_ = 0;
};

// The number after the last `"key":` in `text`; nullopt-like: returns false when absent.
bool last_json_number(std::string_view text, std::string_view key, double& out);

static_assert(std::is_trivially_copyable_v<RequestSample>);

class RequestLog {
 public:
  // The ring's memory is allocated once and left untouched until used: a quiet host never pays
  // for its resident size (65,536 samples, 14 MiB, touched only under a burst).
  explicit RequestLog(size_t capacity = 65536);
  // Called (from push, on the proxy's thread) once the ring is half full, once until the next
  // drain: the owner drains early rather than drop samples under a burst.
  void on_half_full(std::function<void()> f) { on_half_full_ = std::move(f); }
  // Copies `s` into the ring; when the ring is full (nobody drained it), the sample is dropped
  // and counted.
  void push(const RequestSample& s);
  // Moves every sample into `out` (appended), oldest first.
  void drain(std::vector<RequestSample>& out);
  uint64_t dropped() const;
  uint64_t pushed() const;

 private:
  struct Free {
    void operator()(RequestSample* p) const;
  };
  mutable std::mutex mu_;
  std::unique_ptr<RequestSample, Free> ring_;
  size_t capacity_;
  std::function<void()> on_half_full_;
  bool half_told_ = false;
  size_t head_ = 0;  // the oldest
  size_t size_ = 0;
  uint64_t dropped_ = 0;
  uint64_t pushed_ = 0;
};

}  // namespace vramd
