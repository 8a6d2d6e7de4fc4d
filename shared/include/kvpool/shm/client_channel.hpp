// The client segment's user view (the client side of one attachment; the daemon's view is
// daemon/client_segment.hpp and the engine): what every client of kvpoold does the same way,
// written once. libkvpool's Connection adds its policy on top (release batching, mappings,
// pinning, reattach); the test client is a thin shell over it; the ring benchmark runs it.
//
//   claim + publish    a record on the request ring; publish rings the daemon's eventfd
//                      when the engine says it parks (ControlHeader::daemon_sleeping bit 0)
//   read_answer        the one decoder of a response record; a record too short for its
//                      header is refused (kProtocolError), never read as an answer
//   wait               the wait loop: poll briefly, then sleep on the response ring's
//                      doorbell; gone, disconnected or unresponsive end it with a Status
//   start              the lease thread: holds this client's robust mutex for the life of
//                      the attachment and watches the socket (the gone watch); between
//                      looks it does the owner's LeaseWork (release batches)
//
// Threads: one sender and one receiver at a time (the owner serialises each side); gone(),
// kick() and the identity getters from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "kvpool/core/status.hpp"
#include "kvpool/shm/control_segment.hpp"
#include "kvpool/shm/handshake.hpp"
#include "kvpool/shm/protocol.hpp"
#include "kvpool/shm/ring.hpp"
#include "kvpool/shm/segment.hpp"
#include "kvpool/shm/segment_layout.hpp"
#include "kvpool/shm/unique_fd.hpp"

namespace kvpool::shm {

// Whether the welcomed client may use pool `i` (its bit in pool_mask; pools past 32 never).
inline constexpr bool pool_open_to(const proto::Welcome& w, uint32_t i) {
  return i < 32 && (w.pool_mask & (1u << i)) != 0;
}

// One decoded answer record.
struct Answer {
  ErrorCode code = ErrorCode::kOk;
  std::string message;
  std::vector<proto::BlockRef> refs;
  Status status() const { return code == ErrorCode::kOk ? Status() : Status(code, message); }
};

// Decodes one response record: its correlation id into *correlation_id and the answer. A
// record shorter than its ResponseHeader has no correlation id to give: kProtocolError (the
// daemon broke the protocol). One whose counts overrun the record decodes as a
// kProtocolError answer to its correlation id, so that its caller is told.
Result<Answer> decode_answer(const RecordView& record, uint64_t* correlation_id);

struct ChannelOptions {
  // How long a waiter polls for an answer before it sleeps (ConnectOptions::poll_us).
  std::chrono::microseconds poll{50};
  // A daemon whose engine has not stored a heartbeat for this long is reported as
  // kDaemonUnresponsive by a wait that times out; 0: never.
  std::chrono::milliseconds unresponsive_after{0};
};

// Work the owner gives the lease thread: it runs while pending() says so, and keeps the
// thread ticking (every ~10 ms) for about a second after run() says it did something, so
// that work coming every engine step finds the thread awake and costs no kick. Otherwise the
// thread parks without a timeout: kick_if_parked() wakes it.
class LeaseWork {
 public:
  virtual ~LeaseWork() = default;
  virtual bool pending() const = 0;  // relaxed loads only; called on the lease thread
  virtual bool run() = 0;            // true: it did work worth staying awake for
};

class ClientChannel {
 public:
  // Takes an attach's socket, control segment, client segment, rings and doorbell; its
  // pool descriptors (attach.fds from index 3) stay with the caller.
  static Result<std::unique_ptr<ClientChannel>> create(ClientAttach& attach,
                                                       const ChannelOptions& options);
  ~ClientChannel();  // stop()
  ClientChannel(const ClientChannel&) = delete;
  ClientChannel& operator=(const ClientChannel&) = delete;

  // Takes the lease on a thread that lives as long as the channel and watches the socket,
  // then tells the daemon we are Ready (from then on it judges us by the lease). `work`
  // (may be null) must outlive stop().
  Status start(LeaseWork* work);
  // Ends the lease thread, giving the lease back (a clean detach). Idempotent; call it
  // before anything `work` uses is destroyed.
  void stop();
  // Wakes the lease thread if it parked. Call after making pending() true (the fence here
  // pairs with the thread's: it either sees the work or we see it parked).
  void kick_if_parked();
  // Wakes the lease thread (it runs `work` once more soon).
  void kick();

  uint32_t slot() const { return welcome_.slot; }
  uint32_t generation() const { return welcome_.generation; }
  const proto::Welcome& welcome() const { return welcome_; }
  const ControlReader& control_reader() const { return control_; }
  const ControlHeader& control() const { return control_.header(); }
  ClientHeader* client_header() { return client_.as<ClientHeader>(); }
  int socket_fd() const { return sock_.get(); }
  uint32_t max_payload() const { return requests_.max_payload(); }

  // The daemon died, stopped, or cut us off.
  bool gone() const;
  // kDisconnected with the reason the daemon gave when it cut us off, else kDaemonGone.
  Status gone_status(const std::string& when) const;

  // ---- the sending side (one thread at a time) ----
  // Room for one record now, or nullptr when the ring is full (no waiting).
  Result<void*> try_claim(uint32_t type, uint32_t len) { return requests_.try_claim(type, len); }
  // Room for one record, waiting while the ring is full and the daemon lives. `on_full` runs
  // before each wait: the daemon stops taking requests while our answers are unread
  // (backpressure), so the owner reads them there.
  Result<void*> claim(uint32_t type, uint32_t len, const std::function<void()>& on_full);
  // Makes every claimed record visible and wakes the daemon if it parks.
  void publish();
  // The same for records that may wait a tick (releases): a parked daemon is not woken
  // here; the lease thread rings for them at its next tick (~10 ms) if the daemon has not
  // taken them by then, and a request published before that rings for them at once.
  // Ringing costs the caller an eventfd write that wakes the daemon while the caller still
  // runs: 15-20 us of an engine step's drop on a 2-core host (docs/performance.md).
  // Without a lease thread (before start()) it rings as publish() does.
  void publish_deferred();
  // One request (RequestHeader + items) with the next correlation id, published; returns
  // the id. kInvalidArgument when it cannot fit one record.
  Result<uint64_t> send(proto::Opcode op, uint32_t pool, uint32_t count, const void* items,
                        size_t item_bytes, const std::function<void()>& on_full);

  // ---- the receiving side (one thread at a time) ----
  // The next answer off the response ring with its correlation id; nullopt when there is
  // none. Errors are sticky: a ring or record the daemon corrupted stays refused.
  Result<std::optional<std::pair<uint64_t, Answer>>> read_answer();
  // Reads answers until the one to `correlation_id`, handing every other to `other`.
  // Polls briefly (not at all when kvpoold last ran on our core, or while it and the clients
  // in a call outnumber its cores: shm/cpu_share.hpp), then sleeps on the
  // response doorbell; ends with the gone status once the daemon is gone, or
  // kDaemonUnresponsive once it stopped running (ChannelOptions::unresponsive_after).
  Result<Answer> wait(uint64_t correlation_id,
                      const std::function<void(uint64_t, Answer&&)>& other);

 private:
  ClientChannel(ClientAttach& attach, const ChannelOptions& options);
  void lease_main(LeaseWork* work);
  // The lease thread's half of publish_deferred(): rings if a bell is owed and the daemon
  // still parks with records of ours unread.
  void ring_if_owed();
  void mark_gone();
  Status check_heartbeat(const std::string& when) const;
  bool may_poll() const;

  UniqueFd sock_;
  UniqueFd bell_;  // eventfd: wakes a parked daemon
  ControlReader control_;
  Segment client_;
  proto::Welcome welcome_{};
  RingProducer requests_;
  RingConsumer responses_;
  PollPolicy poll_;
  uint64_t unresponsive_ns_ = 0;
  uint64_t next_correlation_ = 1;

  // Written by the lease thread before gone_ (release): readers that see gone_ see it.
  std::string disconnect_reason_;
  std::atomic<bool> gone_{false};
  std::atomic<bool> stop_{false};
  std::atomic<bool> lease_parked_{false};
  // publish_deferred() found the daemon parked and left the bell to the lease thread.
  std::atomic<bool> bell_owed_{false};
  UniqueFd stop_fd_;  // eventfd: stops or kicks the lease thread
  std::thread lease_thread_;
};

}  // namespace kvpool::shm
