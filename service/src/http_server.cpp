#include "kvpool/service/http_server.hpp"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netdb.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

namespace kvpool::http {

struct HttpServerAccess {
  static MHD_Result answer(void* cls, MHD_Connection* connection, const char* url,
                           const char* method, const char* /*version*/, const char* /*upload_data*/,
                           size_t* upload_data_size, void** /*con_cls*/) {
    auto* self = static_cast<HttpServer*>(cls);
    HttpResponse r;
    const bool get = std::strcmp(method, MHD_HTTP_METHOD_GET) == 0;
    const bool head = std::strcmp(method, MHD_HTTP_METHOD_HEAD) == 0;
    if (!get && !head) {
      r.status = MHD_HTTP_METHOD_NOT_ALLOWED;
      r.body = std::string(method) + " is not supported here: use GET\n";
    } else if (*upload_data_size != 0) {
      r.status = MHD_HTTP_BAD_REQUEST;
      r.body = "a GET takes no body\n";
    } else {
      r = self->handler_(url);
    }
    MHD_Response* resp = MHD_create_response_from_buffer(
        r.body.size(), const_cast<char*>(r.body.data()), MHD_RESPMEM_MUST_COPY);
    if (resp == nullptr) return MHD_NO;
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, r.content_type.c_str());
    if (r.status == MHD_HTTP_METHOD_NOT_ALLOWED)
      MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
    MHD_Result ret = MHD_queue_response(connection, static_cast<unsigned>(r.status), resp);
    MHD_destroy_response(resp);
    return ret;
  }
};

namespace {

// "host:port" or "[v6]:port", numeric only: an exporter's address is configuration, and a
// name that resolves differently tomorrow is not what an operator meant.
Result<sockaddr_storage> parse_address(const std::string& address, socklen_t* len) {
  std::string host, port;
  if (!address.empty() && address.front() == '[') {
    size_t close = address.find(']');
    if (close == std::string::npos || close + 1 >= address.size() || address[close + 1] != ':')
      return Status(ErrorCode::kInvalidArgument,
                    "listen address '" + address + "': expected [IPv6]:port");
    host = address.substr(1, close - 1);
    port = address.substr(close + 2);
  } else {
    size_t colon = address.rfind(':');
    if (colon == std::string::npos)
      return Status(ErrorCode::kInvalidArgument,
                    "listen address '" + address + "': expected host:port (e.g. 127.0.0.1:9490)");
    host = address.substr(0, colon);
    port = address.substr(colon + 1);
  }
  if (host.empty()) host = "0.0.0.0";
  addrinfo hints{};
  hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV | AI_PASSIVE;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (int e = getaddrinfo(host.c_str(), port.c_str(), &hints, &res); e != 0 || res == nullptr)
    return Status(
        ErrorCode::kInvalidArgument,
        "listen address '" + address + "': not a numeric host:port (" + gai_strerror(e) + ")");
  sockaddr_storage out{};
  std::memcpy(&out, res->ai_addr, res->ai_addrlen);
  *len = res->ai_addrlen;
  freeaddrinfo(res);
  return out;
}

std::string format_address(const sockaddr_storage& a, uint16_t port) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (a.ss_family == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6&>(a).sin6_addr, buf, sizeof(buf));
    // Appended, not `"[" + std::string(...)`: g++ 12 -O3 reports a false -Wrestrict there.
    std::string out = "[";
    out += buf;
    out += "]:";
    out += std::to_string(port);
    return out;
  }
  inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in&>(a).sin_addr, buf, sizeof(buf));
  return std::string(buf) + ":" + std::to_string(port);
}

}  // namespace

Result<std::unique_ptr<HttpServer>> HttpServer::start(const std::string& address,
                                                      HttpHandler handler) {
  socklen_t len = 0;
  auto addr = parse_address(address, &len);
  if (!addr) return addr.status();
  std::unique_ptr<HttpServer> s(new HttpServer());
  s->handler_ = std::move(handler);
  unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL;
  if (addr->ss_family == AF_INET6) flags |= MHD_USE_IPv6;
  uint16_t port =
      ntohs(addr->ss_family == AF_INET6 ? reinterpret_cast<const sockaddr_in6&>(*addr).sin6_port
                                        : reinterpret_cast<const sockaddr_in&>(*addr).sin_port);
  errno = 0;
  s->daemon_ = MHD_start_daemon(flags, port, nullptr, nullptr, &HttpServerAccess::answer, s.get(),
                                MHD_OPTION_SOCK_ADDR, reinterpret_cast<sockaddr*>(&*addr),
                                // A stalled scraper must not hold the one thread forever.
                                MHD_OPTION_CONNECTION_TIMEOUT, 10u, MHD_OPTION_CONNECTION_LIMIT,
                                64u, MHD_OPTION_END);
  if (s->daemon_ == nullptr) {
    int e = errno;
    return Status(ErrorCode::kIoError, "cannot listen on " + address + ": " +
                                           (e != 0 ? std::strerror(e) : "libmicrohttpd refused"));
  }
  const MHD_DaemonInfo* info = MHD_get_daemon_info(s->daemon_, MHD_DAEMON_INFO_BIND_PORT);
  s->bound_ = format_address(*addr, info != nullptr ? info->port : port);
  return s;
}

HttpServer::~HttpServer() {
  if (daemon_ != nullptr) MHD_stop_daemon(daemon_);
}

}  // namespace kvpool::http
