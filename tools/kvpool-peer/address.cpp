#include "address.hpp"

#include <arpa/inet.h>
#include <netdb.h>

#include <charconv>
#include <cstring>

namespace kvpool::peer {

Result<sockaddr_in> parse_address(const std::string& text) {
  const size_t colon = text.rfind(':');
  unsigned port = 0;
  if (colon == std::string::npos || colon == 0 ||
      std::from_chars(text.data() + colon + 1, text.data() + text.size(), port).ec != std::errc{} ||
      port == 0 || port > 65535)
    return Status(ErrorCode::kInvalidArgument,
                  "peer address '" + text + "' is not host:port (e.g. 10.0.0.1:13337)");
  const std::string host = text.substr(0, colon);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  if (::inet_pton(AF_INET, host.c_str(), &a.sin_addr) == 1) return a;
  addrinfo hints{};
  hints.ai_family = AF_INET;
  addrinfo* res = nullptr;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0 || res == nullptr)
    return Status(ErrorCode::kNotFound, "cannot resolve peer host '" + host + "'");
  a.sin_addr = reinterpret_cast<sockaddr_in*>(res->ai_addr)->sin_addr;
  ::freeaddrinfo(res);
  return a;
}

}  // namespace kvpool::peer
