// The socket handshake between a client and kvpoold (protocol.hpp has the messages), both
// sides: building each message, checking what the peer sent, and the observer's whole
// exchange (observe), which hands back a validated read-only view of the control segment.
//
//   client -> Hello (or Observe)      daemon -> Welcome + descriptors, or Refusal
//   client -> Ready                   daemon -> (later, only to cut a client off) Disconnect
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kvpool/core/status.hpp"
#include "kvpool/shm/control_segment.hpp"
#include "kvpool/shm/protocol.hpp"
#include "kvpool/shm/ring.hpp"
#include "kvpool/shm/segment.hpp"
#include "kvpool/shm/unique_fd.hpp"

namespace kvpool::proto {

// "kvpoold is gone (why); reconnect when it is back", kDaemonGone.
Status daemon_gone(const std::string& why);

// ---- client side -------------------------------------------------------------------------

// Sends a Hello of `type` (kHello or kObserve) and reads the answer: the Welcome (into
// *welcome) and its descriptors, or the daemon's Refusal as a Status with its code.
Result<std::vector<shm::UniqueFd>> exchange_hello(int fd, const std::string& instance, MsgType type,
                                                  uint16_t layout_major, int timeout_ms,
                                                  Welcome* welcome);
// The daemon answered on the socket file: is it one we may trust with our KV bytes?
Status check_daemon_peer(int fd, const std::string& socket_file);
Status send_ready(int fd);
// After the welcome the daemon writes only to cut a client off: the reason it gave, or
// nullopt when what is there is not a disconnect notice (or nothing is).
std::optional<std::string> read_disconnect_notice(int fd);

// ---- daemon side -------------------------------------------------------------------------

// A Hello as the daemon receives it, checked: size, magic, type (kHello or kObserve) and
// layout major; the instance NUL-terminated. The error's code and message are what the
// daemon refuses with.
Result<Hello> parse_hello(const void* msg, size_t len);
// Whether a message a welcomed client sent is its Ready.
bool is_ready(const void* msg, size_t len);
Welcome make_welcome();
// A Refusal (kRefusal) or disconnect notice (kDisconnect) with `code` and `message` (cut
// to fit); sent best effort.
void send_refusal(int fd, MsgType type, ErrorCode code, const std::string& message);

}  // namespace kvpool::proto

namespace kvpool::shm {

// A client's attach up to its pools, the one sequence libkvpool and the test client share:
// the daemon's socket (its peer checked), the Welcome, the control segment (read-only,
// validated), this client's segment with both rings checked against the Welcome, and the
// doorbell, and the registry segment of each pool the Welcome's pool_mask opens (added to
// `control`). `fds` is what the Welcome carried, the first three and the registry segments
// moved out, so the pools' data descriptors start at index 3. The caller maps its pools,
// then sends Ready.
struct ClientAttach {
  UniqueFd sock;
  proto::Welcome welcome{};
  ControlReader control;
  Segment client;
  UniqueFd bell;
  std::vector<UniqueFd> fds;
  RingHeader* requests = nullptr;   // in `client`
  RingHeader* responses = nullptr;  // in `client`
};
// runtime_dir "": where the daemon puts its socket.
Result<ClientAttach> attach_client(const std::string& instance, const std::string& runtime_dir,
                                   uint16_t layout_major, int timeout_ms);

// The control segment of the kvpoold serving `instance`, read-only, attaching nothing
// (kvpoolctl, kvpool-events, tests), with the registry segments of the pools the daemon
// lets this caller read (the pools' allow-lists; root and the daemon's own uid read all).
// runtime_dir "": where the daemon puts its socket. kNotFound when no daemon answers.
Result<ControlReader> observe(const std::string& instance, const std::string& runtime_dir);

}  // namespace kvpool::shm
