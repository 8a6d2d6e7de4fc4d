// The cluster key and the challenge-response of wire.hpp (HMAC-SHA256, OpenSSL libcrypto).
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "kvpool/core/status.hpp"
#include "wire.hpp"

namespace kvpool::peer {

using Nonce = std::array<uint8_t, kNonceBytes>;
using Mac = std::array<uint8_t, kMacBytes>;

class ClusterKey {
 public:
  // Reads the key file: its bytes, trailing newlines dropped; at least 16 bytes. The file
  // must not be readable by group or others (it lets its holder read exported pools).
  static Result<ClusterKey> load(const std::string& path);
  static Result<ClusterKey> from_bytes(std::string_view bytes);

  Mac holder_mac(const Nonce& nonce_f, const Nonce& nonce_h) const;
  Mac fetcher_mac(const Nonce& nonce_h, const Nonce& nonce_f) const;

 private:
  Mac mac(std::string_view label, const Nonce& a, const Nonce& b) const;
  std::string key_;
};

Nonce random_nonce();
// Constant time: how long a comparison takes says nothing about where it differs.
bool macs_equal(const uint8_t* a, const Mac& b);

}  // namespace kvpool::peer
