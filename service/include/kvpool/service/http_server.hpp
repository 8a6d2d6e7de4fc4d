// A small HTTP server for /metrics endpoints (kvpool-exporter, kvpool-events), on
// libmicrohttpd: one internal thread answers every request by calling one handler, one
// request at a time. GET and HEAD only; the handler sees the path.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "kvpool/core/status.hpp"

struct MHD_Daemon;

namespace kvpool::http {

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

// Called on the server's thread, one request at a time.
using HttpHandler = std::function<HttpResponse(const std::string& path)>;

class HttpServer {
 public:
  // Listens on `address` ("127.0.0.1:9490", "[::1]:9490", "0.0.0.0:9490"; port 0 picks a
  // free one). kInvalidArgument for an address that is not numeric host:port;
  // kIoError (with the reason) when it cannot listen there.
  static Result<std::unique_ptr<HttpServer>> start(const std::string& address, HttpHandler handler);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // "127.0.0.1:40123": the address with the port actually bound.
  const std::string& bound_address() const { return bound_; }

 private:
  HttpServer() = default;
  HttpHandler handler_;
  MHD_Daemon* daemon_ = nullptr;
  std::string bound_;
  friend struct HttpServerAccess;
};

}  // namespace kvpool::http
