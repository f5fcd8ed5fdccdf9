// Expected failures as values: a Result<T> holds a T or an error message.
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace vramd {

struct Error {
  std::string message;
};

template <typename T>
class [[nodiscard]] Result {
 public:
  // Default: an error with no message (asio's co_spawn needs a default-constructible result).
  Result() : v_(Error{}) {}
  Result(T value) : v_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  Result(Error error) : v_(std::move(error)) {}  // NOLINT(google-explicit-constructor)

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }

  // REQUIRES: ok()
  T& value() & {
    assert(ok());
    return std::get<0>(v_);
  }
  const T& value() const& {
    assert(ok());
    return std::get<0>(v_);
  }
  T&& value() && {
    assert(ok());
    return std::get<0>(std::move(v_));
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

  // REQUIRES: !ok()
  const std::string& error() const {
    assert(!ok());
    return std::get<1>(v_).message;
  }

 private:
  std::variant<T, Error> v_;
};

// For operations that return nothing on success.
struct Ok {};
using Status = Result<Ok>;

inline Error make_error(std::string message) { return Error{std::move(message)}; }

}  // namespace vramd
