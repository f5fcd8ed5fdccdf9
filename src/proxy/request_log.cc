#include "proxy/request_log.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <new>

namespace vramd {

namespace {

template <size_t N>
void copy_into(std::array<char, N>& to, std::string_view s) {
  size_t n = std::min(s.size(), N - 1);
  // An empty view may hold a null pointer (a request without a model): memcpy must not see it.
  if (n) std::memcpy(to.data(), s.data(), n);
  std::memset(to.data() + n, 0, N - n);
}

template <size_t N>
std::string_view view_of(const std::array<char, N>& a) {
  return {a.data(), strnlen(a.data(), N)};
}

}  // namespace

std::string_view RequestSample::service_name() const { return view_of(service); }
std::string_view RequestSample::model_name() const { return view_of(model); }
void RequestSample::set_service(std::string_view s) { copy_into(service, s); }
void RequestSample::set_model(std::string_view m) { copy_into(model, m); }

void UsageScan::feed(const char* data, size_t n) {
  if (n == 0) return;  // (data may be null)
  if (n >= kTail) {
    std::memcpy(buf_.data(), data + (n - kTail), kTail);
    size_ = kTail;
    return;
  }
  if (size_ + n > kTail) {
    size_t keep = kTail - n;
    std::memmove(buf_.data(), buf_.data() + (size_ - keep), keep);
    size_ = keep;
  }
  std::memcpy(buf_.data() + size_, data, n);
  size_ += n;
}

bool last_json_number(std::string_view text, std::string_view key, double& out) {
  // `"key"` then optional spaces, ':', optional spaces, a number.
  size_t from = std::string_view::npos;
  for (;;) {
    size_t at = text.rfind(key, from);
    if (at == std::string_view::npos || at == 0) return false;
    from = at - 1;
    size_t end = at + key.size();
    if (text[at - 1] != '"' || end >= text.size() || text[end] != '"') continue;
    size_t i = end + 1;
    while (i < text.size() && (text[i] == ' ' || text[i] == '\t')) ++i;
    if (i >= text.size() || text[i] != ':') continue;
    ++i;
    while (i < text.size() && (text[i] == ' ' || text[i] == '\t')) ++i;
    double v = 0;
    auto [ptr, ec] = std::from_chars(text.data() + i, text.data() + text.size(), v);
    if (ec != std::errc() || ptr == text.data() + i) continue;
    out = v;
    return true;
  }
}

double UsageScan::tokens_per_second(double generation_seconds) const {
  std::string_view t = tail();
  double v = 0, d = 0;
  // llama.cpp's own figure, when it gives one.
  if (last_json_number(t, "predicted_per_second", v) && v > 0) return v;
  // Ollama: eval_count tokens in eval_duration nanoseconds.
  if (last_json_number(t, "eval_count", v) && last_json_number(t, "eval_duration", d) && d > 0)
    return v / (d / 1e9);
  if (last_json_number(t, "completion_tokens", v) && v > 0 && generation_seconds > 0)
    return v / generation_seconds;
  return -1;
}

std::string_view UsageScan::model() const {
  std::string_view t = tail();
  size_t at = t.rfind("\"model\"");
  if (at == std::string_view::npos) return {};
  size_t i = at + 7;
  while (i < t.size() && (t[i] == ' ' || t[i] == ':')) ++i;
  if (i >= t.size() || t[i] != '"') return {};
  size_t end = t.find('"', i + 1);
  if (end == std::string_view::npos) return {};
  return t.substr(i + 1, end - i - 1);
}

void RequestLog::Free::operator()(RequestSample* p) const { std::free(p); }

RequestLog::RequestLog(size_t capacity)
    // malloc, not new[]: constructing the samples would touch (and make resident) every page.
    : ring_(static_cast<RequestSample*>(std::malloc(std::max<size_t>(capacity, 1) * sizeof(RequestSample)))),
      capacity_(std::max<size_t>(capacity, 1)) {
  if (!ring_) throw std::bad_alloc();
}

void RequestLog::push(const RequestSample& s) {
  bool tell = false;
  {
    std::lock_guard lock(mu_);
    ++pushed_;
    if (size_ == capacity_) {
      ++dropped_;
      return;
    }
    std::memcpy(static_cast<void*>(ring_.get() + (head_ + size_) % capacity_), &s, sizeof s);
    ++size_;
    if (size_ * 2 >= capacity_ && !half_told_ && on_half_full_) tell = half_told_ = true;
  }
  if (tell) on_half_full_();
}

void RequestLog::drain(std::vector<RequestSample>& out) {
  std::lock_guard lock(mu_);
  out.reserve(out.size() + size_);
  for (size_t i = 0; i < size_; ++i) {
    RequestSample s;
    std::memcpy(static_cast<void*>(&s), ring_.get() + (head_ + i) % capacity_, sizeof s);
    out.push_back(s);
  }
  head_ = 0;
  size_ = 0;
  half_told_ = false;
}

uint64_t RequestLog::dropped() const {
  std::lock_guard lock(mu_);
  return dropped_;
}

uint64_t RequestLog::pushed() const {
  std::lock_guard lock(mu_);
  return pushed_;
}

}  // namespace vramd
