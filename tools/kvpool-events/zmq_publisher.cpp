#include "tools/kvpool-events/zmq_publisher.hpp"

#include <spdlog/spdlog.h>
#include <zmq.h>

#include <array>
#include <cerrno>
#include <cstring>

namespace kvpool::events {
namespace {

std::array<char, 8> be64(int64_t v) {
  std::array<char, 8> b{};
  const auto u = static_cast<uint64_t>(v);
  for (int i = 0; i < 8; ++i) b[i] = static_cast<char>(u >> (56 - 8 * i));
  return b;
}

uint64_t from_be64(const char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

Status zmq_error(const std::string& what) {
  return Status(ErrorCode::kInvalidArgument, what + ": " + zmq_strerror(zmq_errno()));
}

Result<std::string> bind_socket(void* sock, const std::string& endpoint, const char* role) {
  if (zmq_bind(sock, endpoint.c_str()) != 0)
    return zmq_error(std::string("cannot bind the ") + role + " socket to '" + endpoint +
                     "' (use tcp://HOST:PORT or ipc://PATH)");
  char buf[512];
  size_t len = sizeof(buf);
  if (zmq_getsockopt(sock, ZMQ_LAST_ENDPOINT, buf, &len) != 0) return endpoint;
  return std::string(buf);
}

// Sends the frames of one message; the last without ZMQ_SNDMORE.
template <size_t N>
bool send_frames(void* sock, const std::array<std::string_view, N>& frames, int flags) {
  for (size_t i = 0; i < N; ++i) {
    const int more = i + 1 < N ? ZMQ_SNDMORE : 0;
    if (zmq_send(sock, frames[i].data(), frames[i].size(), more | flags) < 0) return false;
  }
  return true;
}

}  // namespace

Result<std::unique_ptr<ZmqPublisher>> ZmqPublisher::bind(const ZmqOptions& options) {
  std::unique_ptr<ZmqPublisher> p(new ZmqPublisher());
  p->options_ = options;
  p->ctx_ = zmq_ctx_new();
  if (!p->ctx_) return zmq_error("zmq_ctx_new");
  p->pub_ = zmq_socket(p->ctx_, ZMQ_PUB);
  if (!p->pub_) return zmq_error("zmq_socket(PUB)");
  int hwm = options.send_hwm;
  zmq_setsockopt(p->pub_, ZMQ_SNDHWM, &hwm, sizeof(hwm));
  int linger = 1000;  // a clean stop still delivers what is queued, for a while
  zmq_setsockopt(p->pub_, ZMQ_LINGER, &linger, sizeof(linger));
  auto ep = bind_socket(p->pub_, options.endpoint, "PUB");
  if (!ep) return ep.status();
  p->bound_endpoint_ = *ep;
  if (!options.replay_endpoint.empty()) {
    p->router_ = zmq_socket(p->ctx_, ZMQ_ROUTER);
    if (!p->router_) return zmq_error("zmq_socket(ROUTER)");
    zmq_setsockopt(p->router_, ZMQ_LINGER, &linger, sizeof(linger));
    auto rep = bind_socket(p->router_, options.replay_endpoint, "replay ROUTER");
    if (!rep) return rep.status();
    p->bound_replay_ = *rep;
  }
  return p;
}

ZmqPublisher::~ZmqPublisher() {
  if (router_) zmq_close(router_);
  if (pub_) zmq_close(pub_);
  if (ctx_) zmq_ctx_term(ctx_);
}

bool ZmqPublisher::publish(std::string_view payload) {
  const uint64_t seq = next_seq_++;
  const auto seq_bytes = be64(static_cast<int64_t>(seq));
  const bool ok =
      send_frames<3>(pub_, {options_.topic, std::string_view(seq_bytes.data(), 8), payload}, 0);
  if (options_.replay_buffer > 0) {
    if (buffer_.size() >= options_.replay_buffer) buffer_.pop_front();
    buffer_.push_back({seq, std::string(payload)});
  }
  return ok;
}

void ZmqPublisher::serve_replay() {
  if (!router_) return;
  for (;;) {
    // One request: identity, then (REQ's empty delimiter,) the 8-byte start sequence.
    std::array<std::string, 4> frames;
    size_t n = 0;
    bool more = true;
    while (more) {
      zmq_msg_t msg;
      zmq_msg_init(&msg);
      if (zmq_msg_recv(&msg, router_, n == 0 ? ZMQ_DONTWAIT : 0) < 0) {
        zmq_msg_close(&msg);
        return;  // nothing waiting (EAGAIN), or the socket is closing
      }
      if (n < frames.size())
        frames[n].assign(static_cast<const char*>(zmq_msg_data(&msg)), zmq_msg_size(&msg));
      ++n;
      more = zmq_msg_more(&msg) != 0;
      zmq_msg_close(&msg);
    }
    const std::string& start_frame = frames[std::min<size_t>(n, frames.size()) - 1];
    if (n < 2 || n > 3 || start_frame.size() != 8) {
      spdlog::warn("ignoring a malformed replay request ({} frame(s))", n);
      continue;
    }
    const std::string_view id = frames[0];
    const uint64_t start = from_be64(start_frame.data());
    ++replays_;
    for (const Buffered& b : buffer_) {
      if (b.seq < start) continue;
      const auto seq_bytes = be64(static_cast<int64_t>(b.seq));
      // Blocking sends: a ROUTER drops only for an unknown identity, never waits for long.
      send_frames<4>(router_,
                     {id, std::string_view(), std::string_view(seq_bytes.data(), 8),
                      std::string_view(b.payload)},
                     0);
    }
    const auto end = be64(-1);
    send_frames<4>(
        router_, {id, std::string_view(), std::string_view(end.data(), 8), std::string_view()}, 0);
  }
}

}  // namespace kvpool::events
