#include "service.hpp"

#include <spdlog/spdlog.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "address.hpp"
#include "kvpool/core/paths.hpp"
#include "service_state.hpp"

namespace kvpool::peer {
namespace {

// ucp_worker_progress calls between two looks at deadlines and our own descriptors.
constexpr int kProgressBurst = 64;

}  // namespace

uint64_t layout_fingerprint(const Pool& pool) {
  const LayoutConfig& l = pool.layout();
  const uint32_t words[] = {2,
                            l.num_layers,
                            l.outer_dim,
                            l.page_size,
                            l.inner_dim,
                            l.dtype_bytes,
                            static_cast<uint32_t>(l.kind),
                            static_cast<uint32_t>(pool.dtype()),
                            static_cast<uint32_t>(pool.hash_scheme())};
  return XXH3_64bits(words, sizeof(words));
}

Result<std::unique_ptr<Service>> Service::create(const PeerOptions& options, ClusterKey key) {
  std::unique_ptr<Service> s(new Service(options, std::move(key)));
  KVPOOL_RETURN_IF_ERROR(s->init());
  return s;
}

Service::Service(PeerOptions o, ClusterKey k) : options_(std::move(o)), key_(std::move(k)) {}

Service::~Service() {
  for (auto& [id, c] : conns_)
    if (c->ep != nullptr && c->close_request == nullptr) {
      ucp_request_param_t p{};
      p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
      p.flags = UCP_EP_CLOSE_FLAG_FORCE;
      void* r = ucp_ep_close_nbx(c->ep, &p);
      while (UCS_PTR_IS_PTR(r) && ucp_request_check_status(r) == UCS_INPROGRESS)
        ucp_worker_progress(worker_);
      if (UCS_PTR_IS_PTR(r)) ucp_request_free(r);
    }
  fetches_.clear();
  serves_.clear();
  onboards_.clear();  // waits for their threads (which use client_ and onboard_fd_)
  if (listener_) ucp_listener_destroy(listener_);
  if (worker_) ucp_worker_destroy(worker_);
  if (context_) ucp_cleanup(context_);
  if (!local_path_.empty()) ::unlink(local_path_.c_str());
}

Status Service::init() {
  const uint64_t now_s = now_ns(CLOCK_REALTIME) / 1'000'000'000ull;
  const Nonce salt = random_nonce();
  uint64_t r = 0;
  std::memcpy(&r, salt.data(), sizeof(r));
  epoch_ = (now_s << 20) ^ r;  // differs on every start, even in one second
  if (options_.name.empty()) {
    char host[256] = {};
    ::gethostname(host, sizeof(host) - 1);
    options_.name = host;
  }
  KVPOOL_RETURN_IF_ERROR(init_pools());
  KVPOOL_RETURN_IF_ERROR(init_ucx());
  epoll_fd_ = shm::UniqueFd(::epoll_create1(EPOLL_CLOEXEC));
  stop_fd_ = shm::UniqueFd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  onboard_fd_ = shm::UniqueFd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!epoll_fd_ || !stop_fd_ || !onboard_fd_) return io_error("epoll/eventfd", errno);
  int efd = -1;
  if (ucs_status_t st = ucp_worker_get_efd(worker_, &efd); st != UCS_OK)
    return Status(ErrorCode::kInternal,
                  std::string("ucp_worker_get_efd: ") + ucs_status_string(st));
  std::string dir = options_.runtime_dir;
  if (dir.empty()) {
    auto found = find_runtime_dir(options_.instance);
    if (!found) return found.status();
    dir = *found;
  }
  local_path_ = peer_socket_path(dir, options_.instance);
  auto lfd = shm::listen_unix(local_path_);
  if (!lfd) return lfd.status();
  local_fd_ = std::move(*lfd);
  ::chmod(local_path_.c_str(), 0660);  // as kvpoold's socket: its group may ask
  auto add = [&](int fd, uint64_t tag) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = tag;
    return ::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_ADD, fd, &ev);
  };
  if (add(stop_fd_.get(), kTagStop) != 0 || add(efd, kTagWorker) != 0 ||
      add(local_fd_.get(), kTagLocal) != 0 || add(onboard_fd_.get(), kTagOnboard) != 0)
    return io_error("epoll_ctl", errno);
  return Status::ok();
}

Status Service::init_pools() {
  ConnectOptions co;
  co.runtime_dir = options_.runtime_dir;
  // A stalled kvpoold must not stall the peer tier for long: its calls fail instead.
  co.unresponsive_after = std::chrono::milliseconds(2000);
  auto client = Client::connect(options_.instance, co);
  if (!client) return client.status();
  client_.emplace(std::move(*client));
  for (const std::string& name : client_->pool_names()) {
    LocalPool lp;
    lp.name = name;
    auto pool = client_->pool(name);
    if (!pool) return pool.status();
    lp.pool.emplace(*pool);
    lp.layout.emplace(*Layout::create(pool->layout()));
    lp.fingerprint = layout_fingerprint(*pool);
    lp.pages = PageMap(pool->layout().num_blocks);
    lp.exported =
        std::find(options_.exports.begin(), options_.exports.end(), name) != options_.exports.end();
    if (pool->is_device())
      lp.unusable = "pool '" + name + "' is a device pool: the peer tier moves host pools only";
    else if (pool->layout().kind != LayoutKind::kFullyContiguous)
      lp.unusable = "pool '" + name +
                    "' is LayerSeparate: the peer tier moves FullyContiguous pools only "
                    "(one contiguous run of bytes per block)";
    if (lp.exported && !lp.unusable.empty()) return Status(ErrorCode::kConfigError, lp.unusable);
    pools_.push_back(std::move(lp));
  }
  for (const std::string& e : options_.exports)
    if (std::none_of(pools_.begin(), pools_.end(), [&](const LocalPool& p) { return p.name == e; }))
      return Status(
          ErrorCode::kConfigError,
          "exported pool '" + e + "' is not a pool of kvpoold '" + options_.instance + "'");
  return Status::ok();
}

Status Service::init_ucx() {
  // A restarted kvpool-peer must listen on its port again at once, while the connections of
  // the one before it still linger there in TIME_WAIT (peers dial the announced address).
  // UCX's default is to refuse the bind; an operator's own UCX_CM_REUSEADDR still wins.
  // Set before any other thread exists (Discovery starts after the service).
  ::setenv("UCX_CM_REUSEADDR", "y", /*overwrite=*/0);
  // UCX 1.13's TCP PUT zcopy (the rendezvous it picks over TCP) aborted a holder with an
  // assertion (tcp_ep.c:939, PUT_TX_WAITING_ACK) that resumed from SIGSTOP after its fetcher
  // had closed the endpoint (1 of ~18 runs of peer_netns_sigstop). Without it, large blocks
  // go by active-message rendezvous, a copy more on the receiving side: ucx_perftest lost
  // 15-18% of its bandwidth with it in kvpool_peer_bench (docs/peers.md).
  ::setenv("UCX_TCP_PUT_ENABLE", "n", /*overwrite=*/0);
  // UCX's TCP transport receives at most one segment (64 KiB by default) per recv() and cuts
  // an active-message rendezvous into fragments of that size: a block of hundreds of KiB
  // then costs each side a syscall, a handler call and a copy call per 64 KiB. With 512 KiB
  // segments kvpool-peer spent ~20% less CPU per byte in kvpool_peer_bench, where CPU
  // bounds the bandwidth (docs/peers.md); each receive buffer UCX keeps is that size.
  ::setenv("UCX_TCP_RX_SEG_SIZE", "512K", /*overwrite=*/0);
  ucp_config_t* config = nullptr;
  if (ucs_status_t st = ucp_config_read(nullptr, nullptr, &config); st != UCS_OK)
    return Status(ErrorCode::kConfigError,
                  std::string("ucp_config_read: ") + ucs_status_string(st));
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_NAME;
  params.features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
  params.name = "kvpool-peer";
  ucs_status_t st = ucp_init(&params, config, &context_);
  ucp_config_release(config);
  if (st != UCS_OK)
    return Status(ErrorCode::kInternal, std::string("ucp_init: ") + ucs_status_string(st));
  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SINGLE;  // one thread does everything
  if ((st = ucp_worker_create(context_, &wp, &worker_)) != UCS_OK)
    return Status(ErrorCode::kInternal, std::string("ucp_worker_create: ") + ucs_status_string(st));
  for (uint16_t id = kAmHello; id < kAmCount; ++id) {
    ucp_am_handler_param_t hp{};
    hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                    UCP_AM_HANDLER_PARAM_FIELD_ARG;
    hp.id = id;
    hp.cb = &Service::am_callback;
    am_args_[id] = AmArg{this, id};
    hp.arg = &am_args_[id];
    if ((st = ucp_worker_set_am_recv_handler(worker_, &hp)) != UCS_OK)
      return Status(ErrorCode::kInternal,
                    std::string("ucp_worker_set_am_recv_handler: ") + ucs_status_string(st));
  }
  if (options_.listen.empty()) return Status::ok();
  auto addr = parse_address(options_.listen);
  if (!addr) return addr.status();
  ucp_listener_params_t lp{};
  lp.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
  lp.sockaddr.addr = reinterpret_cast<const sockaddr*>(&*addr);
  lp.sockaddr.addrlen = sizeof(*addr);
  lp.conn_handler.cb = &Service::conn_callback;
  lp.conn_handler.arg = this;
  if ((st = ucp_listener_create(worker_, &lp, &listener_)) != UCS_OK)
    return Status(ErrorCode::kIoError,
                  "cannot listen for peers on " + options_.listen + ": " + ucs_status_string(st));
  return Status::ok();
}

void Service::request_stop() {
  uint64_t one = 1;
  ssize_t r = ::write(stop_fd_.get(), &one, sizeof(one));
  (void)r;
}

Status Service::run() {
  spdlog::info(
      "kvpool-peer '{}' ready: epoch {:016x}, listening on {}, exporting {} pool(s), "
      "local socket {}",
      options_.name, epoch_, options_.listen.empty() ? "(nothing)" : options_.listen,
      options_.exports.size(), local_path_);
  while (!stopping_) {
    // Bounded: a long transfer keeps UCX busy, and deadlines and the local socket must
    // still be looked at.
    int n = 0;
    while (n < kProgressBurst && ucp_worker_progress(worker_) != 0) ++n;
    handle_events();
    const uint64_t now = mono_ns();
    check_deadlines(now);
    reap_closed();
    if (n == kProgressBurst || !events_.empty()) {
      wait_fds(0);
      continue;
    }
    // Park on epoll (the UCP worker's fd among ours) once the worker is armed: nothing that
    // arrives while we sleep is missed (ucp_worker_arm's contract).
    if (ucp_worker_arm(worker_) == UCS_ERR_BUSY) continue;  // more to progress first
    wait_fds(next_timeout_ms(now));
  }
  return Status::ok();
}

void Service::wait_fds(int timeout_ms) {
  epoll_event evs[32];
  int n = ::epoll_wait(epoll_fd_.get(), evs, 32, timeout_ms);
  for (int i = 0; i < n; ++i) {
    const uint64_t tag = evs[i].data.u64;
    switch (tag & 0xFF) {
      case kTagStop:
        stopping_ = true;
        break;
      case kTagWorker:
        break;  // progressed on the next pass
      case kTagLocal:
        accept_waiters();
        break;
      case kTagWaiter:
        on_waiter_readable(static_cast<int>(tag >> 8));
        break;
      case kTagOnboard:
        on_onboarded();
        break;
    }
  }
}

int Service::next_timeout_ms(uint64_t now) const {
  uint64_t next = now + 100'000'000ull;  // a tick, for handshake and close bounds
  for (const auto& [id, f] : fetches_)
    if (!f->answered) next = std::min(next, f->deadline_ns);
  for (const auto& [id, s] : serves_) next = std::min(next, s->deadline_ns);
  if (next <= now) return 0;
  return static_cast<int>((next - now + 999'999) / 1'000'000);
}

// What the callbacks queued: handled here, outside ucp_worker_progress, so no UCX call is
// made from inside a callback and no container changes under a callback's feet.
void Service::handle_events() {
  while (!events_.empty()) {
    std::vector<Event> batch;
    batch.swap(events_);
    for (Event& e : batch) {
      switch (e.kind) {
        case Event::kAm:
          handle_am(e);
          break;
        case Event::kConnRequest:
          accept_conn(e.request);
          break;
        case Event::kEpError:
          if (Conn* c = conn_of(e.ep))
            close_conn(*c, std::string("transport error: ") + ucs_status_string(e.status));
          break;
        case Event::kBlockSent:
          on_block_sent(e.id, e.status);
          break;
        case Event::kBlockReceived:
          on_block_received(e.id, e.index, e.status);
          break;
      }
    }
  }
}

void Service::check_deadlines(uint64_t now) {
  std::vector<uint64_t> late;
  for (auto& [id, f] : fetches_)
    if (!f->answered && now >= f->deadline_ns) late.push_back(id);
  for (uint64_t id : late)
    if (Fetch* f = fetch_of(id)) {
      metrics_.failed(f->peer, FetchFailure::kTimeout);
      const uint64_t conn_id = f->conn_id;
      const bool in_flight = f->receiving > 0;
      finish_fetch(*f);  // answers with what is intact; may erase f
      // Receives still in flight write into our blocks: closing the endpoint ends them, and
      // those blocks go back to the pool as each completes.
      if (in_flight)
        if (auto it = conns_.find(conn_id); it != conns_.end())
          close_conn(*it->second, "fetch deadline passed with transfers in flight");
    }
  std::vector<uint64_t> cut;
  for (auto& [id, s] : serves_)
    if (!s->cut && now >= s->deadline_ns) cut.push_back(id);
  for (uint64_t id : cut) {
    auto it = serves_.find(id);
    if (it == serves_.end()) continue;
    Serve& s = *it->second;
    s.cut = true;
    ++metrics_.of(s.peer).serve_timeouts;
    // The fetcher did not take its blocks in time: end the sends (so UCX stops reading
    // them), then the pins go (serve_done, when the last send has completed).
    if (auto c = conns_.find(s.conn_id); c != conns_.end())
      close_conn(*c->second, "a transfer it asked for passed its deadline");
    if (s.sending == 0) serve_done(id);
  }
  // Handshakes that do not finish in time.
  for (auto& [id, c] : conns_)
    if (c->state == Conn::State::kHandshake &&
        now - c->created_ns > uint64_t{options_.auth_timeout_ms} * 1'000'000ull)
      close_conn(*c,
                 "no authentication within " + std::to_string(options_.auth_timeout_ms) + " ms");
}

}  // namespace kvpool::peer
