// vLLM's KV events (vllm_event.hpp) on a ZMQ PUB socket with an optional replay ROUTER
// (zmq_publisher.hpp): what a vLLM or SGLang worker publishes, so the llm-d KV-cache indexer
// or Dynamo's KvEventPublisher(zmq_endpoint=...) relay can consume a kvpool as they do an
// engine.
#pragma once

#include <memory>
#include <string>

#include "tools/kvpool-events/event_output.hpp"
#include "tools/kvpool-events/vllm_builder.hpp"
#include "tools/kvpool-events/zmq_publisher.hpp"

namespace kvpool::events {

struct VllmOutputOptions {
  ZmqOptions zmq;
  VllmEncoding encoding = VllmEncoding::kMap;
  int64_t dp_rank = 0;                                     // KVEventBatch.data_parallel_rank
  VllmBlockHashes block_hashes = VllmBlockHashes::kIndex;  // --vllm-block-hashes
};

class VllmOutput final : public EventOutput {
 public:
  explicit VllmOutput(VllmOutputOptions options);
  ~VllmOutput() override;

  Status open() override;
  std::string describe() const override;
  void serve() override;
  void set_pools(std::vector<PoolMeta> pools) override { builder_.set_pools(std::move(pools)); }
  void add(const shm::EventRecord& record, std::span<const uint32_t> tokens,
           std::span<const std::byte> key) override {
    builder_.add(record, tokens, key);
  }
  void flush() override { builder_.flush(); }
  void resync(std::span<const RegisteredBlock> blocks) override { builder_.resync(blocks); }
  bool in_sync() const override { return builder_.in_sync(); }
  void close() override { builder_.flush(); }
  std::string stats_line() const override;
  Counters counters() const override;

 private:
  VllmOutputOptions options_;
  VllmBatchBuilder builder_;
  uint64_t send_errors_ = 0;
  std::unique_ptr<ZmqPublisher> zmq_;
};

}  // namespace kvpool::events
