// The element type of a pool's KV data, as the config names it ("dtype": "bf16", ...).
// Optional: a pool configured with dtype_bytes alone has kUnspecified, and its data are
// unsigned integers of dtype_bytes to whoever reads them. Stable numbers: the dtype
// travels in shared memory (PoolInfo::dtype, layout 1.4; 0 from older daemons).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace kvpool {

enum class DType : uint32_t {
  kUnspecified = 0,
  kFp16 = 1,     // IEEE binary16
  kBf16 = 2,     // bfloat16
  kFp32 = 3,     // IEEE binary32
  kFp8E4M3 = 4,  // float8 e4m3 (OCP FP8, "e4m3fn")
  kU8 = 5,       // unsigned bytes
};

// The config's names: "fp16", "bf16", "fp32", "fp8_e4m3", "u8" ("" for kUnspecified).
inline std::string_view dtype_name(DType d) {
  switch (d) {
    case DType::kFp16:
      return "fp16";
    case DType::kBf16:
      return "bf16";
    case DType::kFp32:
      return "fp32";
    case DType::kFp8E4M3:
      return "fp8_e4m3";
    case DType::kU8:
      return "u8";
    case DType::kUnspecified:
      break;
  }
  return "";
}

inline std::optional<DType> parse_dtype(std::string_view name) {
  for (DType d : {DType::kFp16, DType::kBf16, DType::kFp32, DType::kFp8E4M3, DType::kU8})
    if (dtype_name(d) == name) return d;
  return std::nullopt;
}

// Bytes per element; 0 for kUnspecified (dtype_bytes says).
inline uint32_t dtype_bytes(DType d) {
  switch (d) {
    case DType::kFp16:
    case DType::kBf16:
      return 2;
    case DType::kFp32:
      return 4;
    case DType::kFp8E4M3:
    case DType::kU8:
      return 1;
    case DType::kUnspecified:
      break;
  }
  return 0;
}

// A dtype number read from shared memory that this build does not know reads as unspecified.
inline DType dtype_from_shm(uint32_t v) {
  return v <= static_cast<uint32_t>(DType::kU8) ? static_cast<DType>(v) : DType::kUnspecified;
}

}  // namespace kvpool
