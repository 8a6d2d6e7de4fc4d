// kvpool-peer: the peer tier's agent beside one kvpoold. One thread runs everything: a UCP
// worker (woken through its event fd in our epoll set), the local socket workers ask on
// (kvpool/peer/local_request.hpp), and a libkvpool connection to the local kvpoold.
//
// Holder: serves pools named in `exports` to peers that proved the cluster key. A fetch
// pins the blocks (one match reference each) for that transfer only: the pins go when the
// last block's send completes, or at the fetch's deadline (the endpoint is closed first, so
// UCX no longer reads them). If this process dies, kvpoold reclaims its references. Blocks
// that host memory lacks are looked for on the pool's disk tier (an onboard match, which
// waits for the disk: on a thread of its own, so this thread never does).
//
// Fetcher: allocates the blocks first, asks the holder, receives each block's bytes straight
// into its block, checks sequence hash, epoch and checksum, registers the intact prefix
// and answers the worker, who matches it locally. At the deadline the endpoint is closed
// (which ends every receive into our blocks) before any block goes back to the pool.
// kvpoold itself never waits on, or knows of, the network.
#pragma once

#include <ucp/api/ucp.h>

#include <cstdint>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "auth.hpp"
#include "kvpool/client.hpp"
#include "kvpool/core/layout.hpp"
#include "kvpool/shm/unix_socket.hpp"
#include "options.hpp"
#include "peer_metrics.hpp"
#include "prefault.hpp"
#include "wire.hpp"

namespace kvpool::peer {

class Directory;

// What each active-message handler is registered with: UCX does not pass the id.
struct AmArg {
  class Service* service;
  uint16_t id;
};

// A local pool as the peer tier sees it.
struct LocalPool {
  std::string name;
  std::optional<Pool> pool;
  std::optional<Layout> layout;
  uint64_t fingerprint = 0;
  bool exported = false;
  std::string unusable;  // why blocks of it cannot travel ("": they can)
  PageMap pages;         // its blocks this process has mapped (prefault.hpp)
};

// What a pool must share with a peer's for blocks to travel between them: the shape of
// a block's bytes and the hash scheme, not the pool's size or alignment.
uint64_t layout_fingerprint(const Pool& pool);

class Service {
 public:
  static Result<std::unique_ptr<Service>> create(const PeerOptions& options, ClusterKey key);
  ~Service();
  // Runs until request_stop() (async-signal-safe).
  Status run();
  void request_stop();
  void set_directory(Directory* d) { directory_ = d; }
  // Called (on the service's thread) with one JSON event per fetch that brought blocks:
  // {"peer_event":"fetched","host","from","from_epoch","pool","sequence_hashes","bytes"}.
  // main.cpp publishes it on NATS (Discovery::publish_fetched).
  void set_fetched_hook(std::function<void(const std::string&)> hook) {
    fetched_hook_ = std::move(hook);
  }
  uint64_t epoch() const { return epoch_; }
  const std::string& name() const { return options_.name; }
  const std::vector<LocalPool>& pools() const { return pools_; }

  // Records of the service_state.hpp (public for its helpers; nothing outside uses them).
  struct Conn;
  struct Fetch;
  struct Serve;
  struct Onboard;  // a fetch whose pins wait for the disk tier
  struct Waiter;   // a worker's connection on the local socket
  struct Event;    // what a UCX callback saw, handled after progress returns

 private:
  Service(PeerOptions o, ClusterKey k);
  Status init();
  Status init_ucx();
  Status init_pools();
  void wait_fds(int timeout_ms);  // epoll: stop, worker, local socket, waiters
  void handle_events();
  void handle_am(Event& e);
  int next_timeout_ms(uint64_t now) const;
  void check_deadlines(uint64_t now);

  // ---- connections (connections.cpp) ----
  Result<Conn*> outbound(const std::string& address);
  void accept_conn(ucp_conn_request_h req);
  void close_conn(Conn& c, const std::string& why);
  void reap_closed();
  Conn* conn_of(ucp_ep_h ep);
  Status send_control(Conn& c, uint16_t id, const void* header, size_t len,
                      const void* data = nullptr, size_t data_len = 0);
  void on_hello(Conn& c, const Hello& h);
  void on_challenge(Conn& c, const Challenge& ch);
  void on_auth(Conn& c, const Auth& a);
  void on_auth_ok(Conn& c);
  void on_refused(Conn& c, const Refused& r);
  void refuse(Conn& c, ErrorCode code, const std::string& why, bool close);

  // ---- holder (holder.cpp) ----
  void on_fetch(Conn& c, const FetchRequest& rq, const uint64_t* hashes);
  void start_onboard(Conn& c, const FetchRequest& rq, uint32_t pool, std::vector<uint64_t> hashes,
                     uint64_t deadline_ns);
  void on_onboarded();
  void begin_serve(Conn& c, const FetchRequest& rq, uint32_t pool, std::vector<ImmutableBlock> pins,
                   uint64_t deadline_ns);
  void reply_fetch(Conn& c, uint64_t id, ErrorCode code, const std::string& why, uint32_t count = 0,
                   uint64_t block_bytes = 0);
  void serve_done(uint64_t serve_id);
  void send_blocks(Serve& s);
  void on_block_sent(uint64_t serve_id, ucs_status_t st);

  // ---- fetcher (fetcher.cpp) ----
  void start_fetch(Waiter& w, const LocalRequestHeader& h, std::vector<uint64_t> hashes);
  void send_fetch(Fetch& f, Conn& c);
  void on_fetch_reply(Conn& c, const FetchReply& r);
  void on_block(uint64_t conn_id, const BlockHeader& h, void* data, size_t len, bool rndv);
  void on_block_received(uint64_t fetch_id, uint32_t index, ucs_status_t st);
  bool verify(Fetch& f, uint32_t index);
  void maybe_finish(Fetch& f);
  void finish_fetch(Fetch& f);
  void fail_fetch(Fetch& f, ErrorCode code, const std::string& why);
  void release_idle_blocks(Fetch& f);
  Fetch* fetch_of(uint64_t id);

  // ---- local socket (local_socket.cpp) ----
  void accept_waiters();
  void on_waiter_readable(int fd);
  void answer_waiter(int fd, ErrorCode code, uint32_t fetched, const std::string& why);
  void drop_waiter(int fd);
  std::string status_json() const;

  static ucs_status_t am_callback(void* arg, const void* header, size_t header_length, void* data,
                                  size_t length, const ucp_am_recv_param_t* param);
  static void conn_callback(ucp_conn_request_h req, void* arg);
  static void ep_error_callback(void* arg, ucp_ep_h ep, ucs_status_t status);
  static void send_callback(void* request, ucs_status_t status, void* user_data);
  static void recv_callback(void* request, ucs_status_t status, size_t length, void* user_data);

  PeerOptions options_;
  ClusterKey key_;
  uint64_t epoch_ = 0;
  std::optional<Client> client_;
  std::vector<LocalPool> pools_;
  Directory* directory_ = nullptr;
  std::function<void(const std::string&)> fetched_hook_;
  Metrics metrics_;

  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  ucp_listener_h listener_ = nullptr;
  shm::UniqueFd epoll_fd_;
  shm::UniqueFd stop_fd_;
  shm::UniqueFd local_fd_;
  shm::UniqueFd onboard_fd_;  // eventfd: an onboard thread finished
  std::string local_path_;
  bool stopping_ = false;

  uint64_t next_id_ = 1;
  std::map<uint64_t, std::unique_ptr<Conn>> conns_;
  std::unordered_map<ucp_ep_h, uint64_t> conn_by_ep_;
  std::map<std::string, uint64_t> conn_by_address_;  // outbound, while usable
  std::map<uint64_t, std::unique_ptr<Fetch>> fetches_;
  std::map<uint64_t, std::unique_ptr<Serve>> serves_;
  std::map<uint64_t, std::unique_ptr<Onboard>> onboards_;
  std::map<int, std::unique_ptr<Waiter>> waiters_;
  std::vector<Event> events_;
  AmArg am_args_[kAmCount] = {};
};

}  // namespace kvpool::peer
