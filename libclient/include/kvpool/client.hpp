// libkvpool: a worker's connection to kvpoold.
//
//   auto client = kvpool::Client::connect("default");          // Result<Client>
//   auto pool = client->pool("g2");                            // Result<Pool>
//   auto blocks = pool->allocate_blocks(2);                    // all or nothing
//   blocks->at(0).init_sequence(salt); blocks->at(0).add_tokens(tokens); ...commit();
//   auto shared = pool->register_blocks(std::move(*blocks));   // ImmutableBlocks
//   auto hits = pool->match_sequence_hashes(hashes);           // longest known prefix
//
// Every call blocks until kvpoold answers; *_async forms send at once and return a
// future. A Client may be used from several threads. If kvpoold dies, every call fails
// with ErrorCode::kDaemonGone (within ~50 ms), never hangs.
#pragma once

#include <chrono>
#include <cstdint>
#include <future>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvpool/block.hpp"
#include "kvpool/core/layout.hpp"
#include "kvpool/core/status.hpp"

namespace kvpool {

struct ConnectOptions {
  // Directory of kvpoold's socket; "" resolves like the daemon does ($RUNTIME_DIRECTORY,
  // /run/kvpool, $XDG_RUNTIME_DIR/kvpool, /tmp/kvpool-<uid>).
  std::string runtime_dir;
  std::chrono::milliseconds connect_timeout{5000};
  // Empty polls of the response ring before parking on its futex: low latency while the
  // daemon answers fast, no burnt core while it does not.
  uint32_t spin_iterations = 4000;
};

class Pool {
 public:
  Result<std::vector<MutableBlock>> allocate_blocks(uint32_t count);
  // Takes committed blocks; returns, per block, the registered block that now holds its
  // hash (the caller's own, or an existing one it was deduplicated onto).
  Result<std::vector<ImmutableBlock>> register_blocks(std::vector<MutableBlock> blocks);
  Result<std::vector<ImmutableBlock>> match_sequence_hashes(std::span<const SequenceHash> hashes);

  std::future<Result<std::vector<MutableBlock>>> allocate_blocks_async(uint32_t count);
  std::future<Result<std::vector<ImmutableBlock>>> register_blocks_async(std::vector<MutableBlock> blocks);
  std::future<Result<std::vector<ImmutableBlock>>> match_sequence_hashes_async(std::span<const SequenceHash> hashes);

  const std::string& name() const;
  const LayoutConfig& layout() const;
  uint32_t page_size() const { return layout().page_size; }
  uint32_t index() const { return index_; }

 private:
  friend class Client;
  Pool(std::shared_ptr<detail::ClientImpl> c, uint32_t index) : client_(std::move(c)), index_(index) {}
  std::shared_ptr<detail::ClientImpl> client_;
  uint32_t index_;
};

class Client {
 public:
  static Result<Client> connect(std::string_view instance = "default", const ConnectOptions& options = {});

  Result<Pool> pool(std::string_view name) const;
  std::vector<std::string> pool_names() const;
  // Round trip to the daemon.
  Status ping();
  // Sends queued releases now instead of with the next request (or within ~10 ms).
  void flush();
  bool daemon_alive() const;
  uint32_t slot() const;

 private:
  explicit Client(std::shared_ptr<detail::ClientImpl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<detail::ClientImpl> impl_;
};

}  // namespace kvpool
