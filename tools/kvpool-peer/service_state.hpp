// Service's private records (service.hpp), shared by its .cpp files only.
#pragma once

#include <thread>
#include <vector>

#include "kvpool/core/clock.hpp"
#include "service.hpp"

namespace kvpool::peer {

// What each descriptor in the service's epoll set is (epoll_event.data.u64).
constexpr uint64_t kTagStop = 1;
constexpr uint64_t kTagWorker = 2;
constexpr uint64_t kTagLocal = 3;
constexpr uint64_t kTagWaiter = 4;  // | fd << 8
constexpr uint64_t kTagOnboard = 5;

inline uint64_t mono_ns() { return now_ns(CLOCK_MONOTONIC); }

struct Service::Conn {
  uint64_t id = 0;
  ucp_ep_h ep = nullptr;
  bool outbound = false;  // we dialed it (fetcher side)
  enum class State { kHandshake, kReady, kClosing } state = State::kHandshake;
  std::string address;    // dialed address, or the client's
  std::string peer_name;  // from Hello / Challenge; the metrics key
  uint64_t peer_epoch = 0;
  Nonce my_nonce{};
  Nonce their_nonce{};
  bool got_hello = false;
  uint64_t created_ns = 0;
  uint64_t closing_ns = 0;
  void* close_request = nullptr;  // ucp_ep_close_nbx in flight
  std::vector<uint64_t> waiting;  // fetches to send once authenticated
  std::string why_closed;
  const std::string& key() const { return peer_name.empty() ? address : peer_name; }
};

struct Service::Fetch {
  enum BlockState : uint8_t { kPending, kReceiving, kReceived, kFailed };
  uint64_t id = 0;
  int waiter_fd = -1;  // -1: the worker hung up, nobody to answer
  uint64_t conn_id = 0;
  uint32_t pool = 0;
  std::string peer;  // metrics key
  std::vector<uint64_t> hashes;
  std::vector<MutableBlock> blocks;
  std::vector<uint8_t> state;
  std::vector<BlockHeader> meta;
  int64_t expected = -1;   // blocks the holder pinned (-1: no reply yet)
  uint32_t receiving = 0;  // receives in flight into our blocks
  uint64_t start_ns = 0;
  uint64_t deadline_ns = 0;
  uint64_t epoch = 0;     // the holder's, from its reply
  bool answered = false;  // the worker has its answer; what is left drains
};

struct Service::Serve {
  uint64_t id = 0;
  uint64_t conn_id = 0;
  std::string peer;
  std::vector<ImmutableBlock> pins;  // the transfer's pins; dropped when it ends
  std::vector<BlockHeader> headers;  // live until each send completes
  uint32_t sending = 0;              // sends in flight
  uint32_t next = 0;                 // the next block to send
  uint32_t pool = 0;
  uint64_t request_id = 0;
  uint64_t deadline_ns = 0;
  uint64_t bytes = 0;  // per block
  bool cut = false;    // its endpoint was closed at the deadline
};

// A fetch whose blocks host memory lacked: its onboard match (disk tier) runs on a thread
// of its own, which sets `pins` and then posts onboard_fd_; the serve starts then
// (on_onboarded). Destroying the record waits for the thread.
struct Service::Onboard {
  uint64_t conn_id = 0;
  FetchRequest request{};
  uint32_t pool = 0;
  uint64_t deadline_ns = 0;
  std::future<Result<std::vector<ImmutableBlock>>> pins;
  std::thread thread;
  ~Onboard() {
    if (thread.joinable()) thread.join();
  }
};

struct Service::Waiter {
  shm::UniqueFd fd;
  std::vector<ImmutableBlock> held;  // the fetched blocks, until the worker hangs up
  bool asked = false;
};

struct Service::Event {
  enum Kind { kAm, kConnRequest, kEpError, kBlockSent, kBlockReceived } kind = kAm;
  uint16_t am_id = 0;
  ucp_ep_h ep = nullptr;
  std::vector<std::byte> header;
  std::vector<std::byte> data;
  void* desc = nullptr;  // rendezvous data not yet received
  size_t length = 0;
  ucp_conn_request_h request = nullptr;
  ucs_status_t status = UCS_OK;
  uint64_t id = 0;
  uint32_t index = 0;
};

// user_data of one send or receive.
struct OpContext {
  enum Kind { kControl, kBlockSend, kBlockRecv } kind;
  Service* service;
  uint64_t id;  // serve or fetch
  uint32_t index;
  std::vector<std::byte> header;  // a control message's header, live until it is sent
};

}  // namespace kvpool::peer
