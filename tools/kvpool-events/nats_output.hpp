// Dynamo's KV router events (router_event.hpp) as JSON on NATS, on
// namespace.{ns}.component.{component}.{topic}, with resync requests on <subject>.resync.
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "tools/kvpool-events/event_output.hpp"
#include "tools/kvpool-events/message_builder.hpp"
#include "tools/kvpool-events/nats_link.hpp"

namespace kvpool::events {

struct NatsOutputOptions {
  NatsOptions nats;
  std::string ns = "dynamo";
  std::string component = "kvpool";
  std::string topic = std::string(kDefaultTopic);
  RouterIdentity identity;
  // Dynamo 0.2.1's envelope (worker_id and event only), for routers that predate the
  // storage tier and residency fields.
  bool legacy_envelope = false;
};

class NatsOutput final : public EventOutput {
 public:
  explicit NatsOutput(NatsOutputOptions options);
  ~NatsOutput() override;

  Status open() override;
  std::string describe() const override;
  bool connected() const override { return nats_ && nats_->connected(); }
  uint64_t epoch() const override { return nats_ ? nats_->epoch() : 0; }
  bool take_resync_request() override {
    return resync_requested_.exchange(false, std::memory_order_acq_rel);
  }
  void set_pools(std::vector<PoolMeta> pools) override { builder_.set_pools(std::move(pools)); }
  // Dynamo's RouterEvent has no field for token ids (KvCacheStoredBlockData: block_hash,
  // tokens_hash, mm_extra_info): they are not sent.
  // Nor for an opaque key: every hash in a RouterEvent is a u64 (ExternalSequenceBlockHash,
  // LocalBlockHash), so a keyed block goes by its index hash.
  void add(const shm::EventRecord& record, std::span<const uint32_t>,
           std::span<const std::byte>) override {
    builder_.add(record);
  }
  void flush() override { builder_.flush(); }
  void resync(std::span<const RegisteredBlock> blocks) override { builder_.resync(blocks); }
  bool in_sync() const override { return builder_.in_sync(); }
  void close() override;
  std::string stats_line() const override;
  Counters counters() const override;

  const std::string& subject() const { return subject_; }

 private:
  bool publish(std::string_view json);

  NatsOutputOptions options_;
  std::string subject_;
  MessageBuilder builder_;
  uint64_t publish_errors_ = 0;
  std::atomic<bool> resync_requested_{false};
  std::unique_ptr<NatsLink> nats_;  // last: destroyed first, before what its callbacks use
};

}  // namespace kvpool::events
