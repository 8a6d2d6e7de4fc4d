// Where kvpool-events sends what it reads from the ring: one format on one transport.
// The forwarder (forwarder.hpp) owns the ring, the daemon and the resync rules; an output
// owns the translation (a builder) and the transport, and tells the forwarder when the
// consumers' view may be wrong (a reconnect, a resync request, a failed send).
//
//   NatsOutput: Dynamo's router JSON on NATS (nats_output.hpp)
//   VllmOutput: vLLM's KVEventBatch msgpack on a ZMQ PUB socket (vllm_output.hpp)
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kvpool/core/status.hpp"
#include "kvpool/shm/event_ring.hpp"
#include "tools/kvpool-events/message_builder.hpp"
#include "tools/kvpool-events/pool_meta.hpp"

namespace kvpool::events {

class EventOutput {
 public:
  virtual ~EventOutput() = default;

  // Opens the transport (binds, or starts connecting in the background). Only bad options
  // fail; an unreachable server is retried.
  virtual Status open() = 0;
  // One line for the log: format, where to, as whom.
  virtual std::string describe() const = 0;

  // False while nothing can be delivered (NATS down): the forwarder then skips the ring and
  // resyncs once it is back.
  virtual bool connected() const { return true; }
  // Changes whenever what was sent may have been lost (a reconnect): a resync is due.
  virtual uint64_t epoch() const { return 0; }
  // True once for each resync a consumer asked for.
  virtual bool take_resync_request() { return false; }
  // Answers consumers' side requests (replay). Called every round; never blocks for long.
  virtual void serve() {}

  // The attached daemon's pools (index = the ring's pool field); called on every attach.
  virtual void set_pools(std::vector<PoolMeta> pools) = 0;
  // Feeds the next ring record (in id order, without gaps; after a gap, resync()) with its
  // token ids and key (EventRingReader::read_tokens / read_key; empty when it has none or
  // they were lost).
  virtual void add(const shm::EventRecord& record, std::span<const uint32_t> tokens,
                   std::span<const std::byte> key) = 0;
  // Sends what is pending (the ring has nothing more for now).
  virtual void flush() = 0;
  // "Forget everything": a clear, then `blocks` (the whole registry) as stored events.
  virtual void resync(std::span<const RegisteredBlock> blocks) = 0;
  // False once something could not be told since the last resync(): a resync is due.
  virtual bool in_sync() const = 0;
  // Before exit: deliver what is queued (bounded wait).
  virtual void close() {}

  virtual std::string stats_line() const = 0;

  // For /metrics (kvpool-events --metrics-listen): records turned into messages, messages
  // (NATS messages or vLLM batches) handed to the transport, and those it refused.
  struct Counters {
    uint64_t records = 0;
    uint64_t messages = 0;
    uint64_t send_errors = 0;
  };
  virtual Counters counters() const = 0;
};

}  // namespace kvpool::events
