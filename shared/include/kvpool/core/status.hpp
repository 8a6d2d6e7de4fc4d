// One error type for all of kvpool: a code a program can branch on and a message a person
// can act on ("pool 'g2' has 12 free blocks, 64 requested"). No exceptions inside the
// library; exceptions appear only at the edges (config parsing, CLI).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace kvpool {

// Stable numeric values: they travel in shm protocol records.
enum class ErrorCode : uint16_t {
  kOk = 0,
  kNotEnoughBlocks = 1,      // allocate(n) with fewer than n free + evictable blocks
  kInvalidArgument = 2,      // a value out of range (count, index, dimension)
  kInvalidState = 3,         // operation not allowed in the block's current state
  kBlockFull = 4,            // add_token on a full block
  kBlockEmpty = 5,           // pop_token on an empty block
  kIncompleteBlock = 6,      // commit() before the block holds page_size tokens
  kInvalidHandle = 7,        // stale generation, foreign handle, unknown block id
  kNotFound = 8,             // unknown pool, instance, file
  kResourceExhausted = 9,    // a fixed capacity (slots, holds, ring) is used up
  kDaemonGone = 10,          // the daemon died or shut down under this client
  kProtocolError = 11,       // malformed record on a ring or the socket
  kVersionMismatch = 12,     // shm layout major version differs
  kConfigError = 13,         // bad configuration field
  kPermissionDenied = 14,    // uid/gid not allowed, or OS permission error
  kIoError = 15,             // an OS call failed (message carries errno text)
  kTimeout = 16,             // a bounded wait ran out
  kUnsupported = 17,         // e.g. built without CUDA
  kDeviceError = 18,         // a CUDA call failed
  kDisconnected = 19,        // this client was disconnected by the daemon
  kInternal = 20,            // a bug: an invariant broke
  kQuotaExceeded = 21,       // this client's share (blocks, references, priority) is used up
  kDaemonUnresponsive = 22,  // the daemon runs but stopped answering (stalled, SIGSTOPped)
  kChecksumMismatch = 23,    // a block's bytes no longer match its checksum (it was evicted)
};

// Short, stable name of a code ("NotEnoughBlocks").
std::string_view error_code_name(ErrorCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // ok
  Status(ErrorCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok() { return {}; }

  bool is_ok() const { return code_ == ErrorCode::kOk; }
  explicit operator bool() const { return is_ok(); }
  ErrorCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "NotEnoughBlocks: pool 'g2' has 12 free blocks, 64 requested"
  std::string to_string() const;

 private:
  ErrorCode code_ = ErrorCode::kOk;
  std::string message_;
};

// A value or the Status that explains why there is none.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}         // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {}  // NOLINT: must not be ok
  Result(ErrorCode code, std::string message) : v_(Status(code, std::move(message))) {}

  bool is_ok() const { return std::holds_alternative<T>(v_); }
  explicit operator bool() const { return is_ok(); }

  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }

  // The error; Status::ok() when a value is present.
  Status status() const { return is_ok() ? Status() : std::get<Status>(v_); }

 private:
  std::variant<T, Status> v_;
};

// Status with the text of errno appended: io_error("shm_open /kvpool.x", errno).
Status io_error(std::string_view what, int err);

}  // namespace kvpool

// Propagates a non-ok Status from an expression that yields one.
#define KVPOOL_RETURN_IF_ERROR(expr)            \
  do {                                          \
    ::kvpool::Status _kvpool_st = (expr);       \
    if (!_kvpool_st.is_ok()) return _kvpool_st; \
  } while (0)
