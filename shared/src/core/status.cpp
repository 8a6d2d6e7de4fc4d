#include "kvpool/core/status.hpp"

#include <cerrno>
#include <cstring>

namespace kvpool {

std::string_view error_code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::kOk:
      return "Ok";
    case ErrorCode::kNotEnoughBlocks:
      return "NotEnoughBlocks";
    case ErrorCode::kInvalidArgument:
      return "InvalidArgument";
    case ErrorCode::kInvalidState:
      return "InvalidState";
    case ErrorCode::kBlockFull:
      return "BlockFull";
    case ErrorCode::kBlockEmpty:
      return "BlockEmpty";
    case ErrorCode::kIncompleteBlock:
      return "IncompleteBlock";
    case ErrorCode::kInvalidHandle:
      return "InvalidHandle";
    case ErrorCode::kNotFound:
      return "NotFound";
    case ErrorCode::kResourceExhausted:
      return "ResourceExhausted";
    case ErrorCode::kDaemonGone:
      return "DaemonGone";
    case ErrorCode::kProtocolError:
      return "ProtocolError";
    case ErrorCode::kVersionMismatch:
      return "VersionMismatch";
    case ErrorCode::kConfigError:
      return "ConfigError";
    case ErrorCode::kPermissionDenied:
      return "PermissionDenied";
    case ErrorCode::kIoError:
      return "IoError";
    case ErrorCode::kTimeout:
      return "Timeout";
    case ErrorCode::kUnsupported:
      return "Unsupported";
    case ErrorCode::kDeviceError:
      return "DeviceError";
    case ErrorCode::kDisconnected:
      return "Disconnected";
    case ErrorCode::kInternal:
      return "Internal";
    case ErrorCode::kQuotaExceeded:
      return "QuotaExceeded";
    case ErrorCode::kDaemonUnresponsive:
      return "DaemonUnresponsive";
    case ErrorCode::kChecksumMismatch:
      return "ChecksumMismatch";
  }
  return "Unknown";
}

std::string Status::to_string() const {
  if (is_ok()) return "Ok";
  std::string s(error_code_name(code_));
  if (!message_.empty()) {
    s += ": ";
    s += message_;
  }
  return s;
}

Status io_error(std::string_view what, int err) {
  std::string msg(what);
  msg += ": ";
  msg += std::strerror(err);
  return Status(err == EACCES || err == EPERM ? ErrorCode::kPermissionDenied : ErrorCode::kIoError,
                std::move(msg));
}

}  // namespace kvpool
