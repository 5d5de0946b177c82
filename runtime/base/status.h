// Status and Result<T>: errors as values on the data path (no exceptions there).
// Exceptions are used only at the edges (CLI parsing, config loading) and caught in main.
// Both are [[nodiscard]]: an ignored error is a compile error (-Werror), not a lost one.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace weir {

class [[nodiscard]] Status {
 public:
  // kTooLarge: over a limit no retry can pass (an event larger than the NATS server's
  // max_payload): the caller refuses or drops it instead of trying again.
  enum class Code { kOk, kInvalid, kNotFound, kUnavailable, kTimeout, kConflict, kTooLarge, kInternal };

  Status() = default;
  static Status ok() { return {}; }
  static Status invalid(std::string m) { return {Code::kInvalid, std::move(m)}; }
  static Status not_found(std::string m) { return {Code::kNotFound, std::move(m)}; }
  static Status unavailable(std::string m) { return {Code::kUnavailable, std::move(m)}; }
  static Status timeout(std::string m) { return {Code::kTimeout, std::move(m)}; }
  static Status conflict(std::string m) { return {Code::kConflict, std::move(m)}; }
  static Status too_large(std::string m) { return {Code::kTooLarge, std::move(m)}; }
  static Status internal(std::string m) { return {Code::kInternal, std::move(m)}; }

  bool is_ok() const { return code_ == Code::kOk; }
  explicit operator bool() const { return is_ok(); }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }
  std::string str() const;
  // The same code with `prefix` before the message ("state store: " + message).
  Status prefixed(std::string_view prefix) const { return {code_, std::string(prefix) + message_}; }

 private:
  Status(Code c, std::string m) : code_(c), message_(std::move(m)) {}
  Code code_ = Code::kOk;
  std::string message_;
};

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}         // NOLINT(google-explicit-constructor)
  Result(Status status) : v_(std::move(status)) {}  // NOLINT(google-explicit-constructor)
  bool is_ok() const { return std::holds_alternative<T>(v_); }
  explicit operator bool() const { return is_ok(); }
  T& value() { return std::get<T>(v_); }
  const T& value() const { return std::get<T>(v_); }
  T& operator*() { return value(); }
  T* operator->() { return &value(); }
  Status status() const { return is_ok() ? Status::ok() : std::get<Status>(v_); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace weir
