// "host:port" <-> sockaddr_in for UCX's listener and client endpoints (IPv4).
#pragma once

#include <netinet/in.h>

#include <string>

#include "kvpool/core/status.hpp"

namespace kvpool::peer {

// "10.0.0.1:13337" or "hostname:13337" (resolved now). kInvalidArgument naming the text.
Result<sockaddr_in> parse_address(const std::string& text);

}  // namespace kvpool::peer
