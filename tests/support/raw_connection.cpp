#include "support/raw_connection.hpp"

#include <cstring>

#include "kvpool/core/paths.hpp"
#include "kvpool/shm/handshake.hpp"

namespace kvpool::testsupport {

Result<std::unique_ptr<RawConnection>> RawConnection::open(const std::string& instance,
                                                           const RawOptions& options) {
  KVPOOL_RETURN_IF_ERROR(validate_instance_name(instance));
  auto at = shm::attach_client(instance, options.runtime_dir, options.layout_major,
                               static_cast<int>(options.connect_timeout.count()));
  if (!at) return at.status();
  std::unique_ptr<RawConnection> c(new RawConnection());
  auto ch = shm::ClientChannel::create(
      *at, shm::ChannelOptions{std::chrono::microseconds(options.poll_us), {}});
  if (!ch) return ch.status();
  c->channel_ = std::move(ch.value());
  KVPOOL_RETURN_IF_ERROR(c->map_pools(at->welcome, at->fds));
  // Ready only once the lease is held: from then on the daemon judges us by it.
  KVPOOL_RETURN_IF_ERROR(c->channel_->start(nullptr));
  return c;
}

// After the first three descriptors, one per pool open to us whose storage travels as one
// (proto::welcome_carries_fd), in pool order.
Status RawConnection::map_pools(const proto::Welcome& w, std::vector<shm::UniqueFd>& fds) {
  const std::span<const shm::PoolInfo> infos = channel_->control_reader().pool_infos();
  size_t next_fd = 3;
  for (uint32_t i = 0; i < infos.size(); ++i) {
    shm::PoolInfo info = infos[i];
    info.name[sizeof(info.name) - 1] = '\0';
    auto layout = Layout::create(info.layout);
    if (!layout) return layout.status();
    RawPool p{info.name, info, layout.value(), shm::Segment(), shm::pool_open_to(w, i)};
    if (p.usable && proto::welcome_carries_fd(static_cast<shm::StorageKind>(info.storage))) {
      if (next_fd >= fds.size())
        return Status(ErrorCode::kProtocolError, "welcome carries too few pool descriptors");
      auto data = shm::Segment::map_fd(std::move(fds[next_fd++]), /*writable=*/true);
      if (!data) return data.status();
      if (data->size() < layout->total_bytes())
        return Status(ErrorCode::kProtocolError,
                      "pool '" + p.name + "' data is smaller than its layout");
      p.data = std::move(data.value());
    }
    pools_.push_back(std::move(p));
  }
  if (next_fd != fds.size())
    return Status(ErrorCode::kProtocolError, "welcome carries " + std::to_string(fds.size()) +
                                                 " descriptors, " + std::to_string(next_fd) +
                                                 " expected");
  return Status::ok();
}

// The ring is full: the daemon takes no more while our answers are unread. Keep them.
void RawConnection::keep_answers() {
  while (true) {
    auto got = channel_->read_answer();
    if (!got || !*got) return;
    early_.insert(std::move(**got));
  }
}

Result<uint64_t> RawConnection::send(proto::Opcode op, uint32_t pool, uint32_t count,
                                     const void* items, size_t item_bytes) {
  if (gone()) return channel_->gone_status("before the request was sent");
  return channel_->send(op, pool, count, items, item_bytes, [this] { keep_answers(); });
}

Status RawConnection::send_raw(uint32_t type, const void* bytes, uint32_t len) {
  auto c = channel_->try_claim(type, len);
  if (!c) return c.status();
  if (!*c) return Status(ErrorCode::kResourceExhausted, "request ring full");
  if (len) std::memcpy(*c, bytes, len);
  channel_->publish();
  return Status::ok();
}

Result<RawResponse> RawConnection::wait(uint64_t correlation_id) {
  if (auto it = early_.find(correlation_id); it != early_.end()) {
    RawResponse r = std::move(it->second);
    early_.erase(it);
    return r;
  }
  return channel_->wait(correlation_id, [this](uint64_t corr, RawResponse&& r) {
    early_.emplace(corr, std::move(r));
  });
}

}  // namespace kvpool::testsupport
