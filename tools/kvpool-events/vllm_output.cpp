#include "tools/kvpool-events/vllm_output.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace kvpool::events {

VllmOutput::VllmOutput(VllmOutputOptions options)
    : options_(std::move(options)),
      builder_(
          options_.encoding, options_.dp_rank,
          [this](std::string_view payload) {
            if (zmq_->publish(payload)) return true;
            if (send_errors_++ % 1000 == 0) spdlog::warn("ZMQ PUB refused a batch");
            return false;
          },
          options_.block_hashes) {}

VllmOutput::~VllmOutput() = default;

Status VllmOutput::open() {
  auto z = ZmqPublisher::bind(options_.zmq);
  if (!z) return z.status();
  zmq_ = std::move(z.value());
  return Status::ok();
}

std::string VllmOutput::describe() const {
  return fmt::format("vLLM KVEventBatch ({} msgpack) -> ZMQ PUB {} (topic '{}', dp_rank {}){}",
                     options_.encoding == VllmEncoding::kMap ? "map" : "array",
                     zmq_ ? zmq_->endpoint() : options_.zmq.endpoint, options_.zmq.topic,
                     options_.dp_rank,
                     zmq_ && !zmq_->replay_endpoint().empty()
                         ? fmt::format(", replay ROUTER {} ({} batches)", zmq_->replay_endpoint(),
                                       options_.zmq.replay_buffer)
                         : std::string());
}

void VllmOutput::serve() {
  if (zmq_) zmq_->serve_replay();
}

EventOutput::Counters VllmOutput::counters() const {
  const auto& b = builder_.stats();
  return Counters{b.records, b.batches, send_errors_};
}

std::string VllmOutput::stats_line() const {
  const VllmBuilderStats& b = builder_.stats();
  return fmt::format(
      "events {} -> batches {} (stored blocks {} ({} with token ids, {} by key), removed {} ({} "
      "by key), cleared {}, keys over the memory cap {}); next seq {}, replays served {}, send "
      "errors {}",
      b.records, b.batches, b.stored_blocks, b.blocks_with_tokens, b.blocks_with_keys,
      b.removed_blocks, b.removed_with_keys, b.cleared, b.keys_not_kept,
      zmq_ ? zmq_->next_sequence() : 0, zmq_ ? zmq_->replays_served() : 0, send_errors_);
}

}  // namespace kvpool::events
