#include "auth.hpp"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <sys/random.h>
#include <sys/stat.h>

#include <fstream>
#include <iterator>

namespace kvpool::peer {

Result<ClusterKey> ClusterKey::from_bytes(std::string_view bytes) {
  while (!bytes.empty() && (bytes.back() == '\n' || bytes.back() == '\r')) bytes.remove_suffix(1);
  if (bytes.size() < 16)
    return Status(ErrorCode::kConfigError,
                  "the peer key has " + std::to_string(bytes.size()) +
                      " bytes, at least 16 are needed (e.g. head -c 32 /dev/urandom | base64)");
  ClusterKey k;
  k.key_ = std::string(bytes);
  return k;
}

Result<ClusterKey> ClusterKey::load(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return io_error("cannot read peer key file " + path, errno);
  if ((st.st_mode & 077) != 0)
    return Status(ErrorCode::kPermissionDenied,
                  "peer key file " + path + " is readable by group or others (chmod 600 it)");
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!in.good() && !in.eof()) return Status(ErrorCode::kIoError, "cannot read " + path);
  return from_bytes(bytes);
}

Mac ClusterKey::mac(std::string_view label, const Nonce& a, const Nonce& b) const {
  std::string msg(label);
  msg.append(reinterpret_cast<const char*>(a.data()), a.size());
  msg.append(reinterpret_cast<const char*>(b.data()), b.size());
  Mac out{};
  unsigned int len = 0;
  HMAC(EVP_sha256(), key_.data(), static_cast<int>(key_.size()),
       reinterpret_cast<const unsigned char*>(msg.data()), msg.size(), out.data(), &len);
  return out;
}

Mac ClusterKey::holder_mac(const Nonce& nonce_f, const Nonce& nonce_h) const {
  return mac("kvpool-peer holder", nonce_f, nonce_h);
}

Mac ClusterKey::fetcher_mac(const Nonce& nonce_h, const Nonce& nonce_f) const {
  return mac("kvpool-peer fetcher", nonce_h, nonce_f);
}

Nonce random_nonce() {
  Nonce n{};
  size_t got = 0;
  while (got < n.size()) {
    ssize_t r = ::getrandom(n.data() + got, n.size() - got, 0);
    if (r > 0) got += static_cast<size_t>(r);
  }
  return n;
}

bool macs_equal(const uint8_t* a, const Mac& b) {
  return CRYPTO_memcmp(a, b.data(), b.size()) == 0;
}

}  // namespace kvpool::peer
