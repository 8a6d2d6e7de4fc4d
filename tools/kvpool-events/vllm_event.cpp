#include "tools/kvpool-events/vllm_event.hpp"

// msgpack-c's packer needs no Boost for packing.
#define MSGPACK_NO_BOOST
#include <msgpack/pack.hpp>

namespace kvpool::events {
namespace {

// The packer's output: appends to a reused string (no sbuffer copy).
struct StringOut {
  std::string* s;
  void write(const char* p, size_t n) { s->append(p, n); }
};
using Packer = msgpack::packer<StringOut>;

void str(Packer& pk, std::string_view s) {
  pk.pack_str(static_cast<uint32_t>(s.size()));
  pk.pack_str_body(s.data(), static_cast<uint32_t>(s.size()));
}

// A field name in the map form; nothing in the array form (fields go by position).
void key(Packer& pk, VllmEncoding enc, std::string_view name) {
  if (enc == VllmEncoding::kMap) str(pk, name);
}

// One block hash: its key as bin when it has one, else the 64-bit hash.
void hash(Packer& pk, int64_t h, std::string_view key) {
  if (key.empty()) {
    pk.pack_int64(h);
    return;
  }
  pk.pack_bin(static_cast<uint32_t>(key.size()));
  pk.pack_bin_body(key.data(), static_cast<uint32_t>(key.size()));
}

void hashes(Packer& pk, const VllmEvent& e) {
  pk.pack_array(static_cast<uint32_t>(e.block_hashes.size()));
  for (size_t i = 0; i < e.block_hashes.size(); ++i)
    hash(pk, e.block_hashes[i], i < e.block_keys.size() ? e.block_keys[i] : std::string_view());
}

void medium(Packer& pk, std::string_view m) {
  if (m.empty()) {
    pk.pack_nil();
  } else {
    str(pk, m);
  }
}

// Opens a tagged event: the map (or array) header and the tag.
void open_event(Packer& pk, VllmEncoding enc, std::string_view tag, uint32_t fields) {
  if (enc == VllmEncoding::kMap) {
    pk.pack_map(fields + 1);
    str(pk, "type");
  } else {
    pk.pack_array(fields + 1);
  }
  str(pk, tag);
}

void event(Packer& pk, VllmEncoding enc, const VllmEvent& e) {
  switch (e.kind) {
    case VllmEvent::Kind::kStored:
      open_event(pk, enc, "BlockStored", 7);
      key(pk, enc, "block_hashes");
      hashes(pk, e);
      key(pk, enc, "parent_block_hash");
      if (e.parent_block_hash) {
        hash(pk, *e.parent_block_hash, e.parent_key);
      } else {
        pk.pack_nil();
      }
      key(pk, enc, "token_ids");
      pk.pack_array(static_cast<uint32_t>(e.token_ids.size()));
      for (uint32_t t : e.token_ids) pk.pack_uint32(t);
      key(pk, enc, "block_size");
      pk.pack_uint32(e.block_size);
      key(pk, enc, "lora_id");
      pk.pack_nil();
      key(pk, enc, "medium");
      medium(pk, e.medium);
      key(pk, enc, "lora_name");
      pk.pack_nil();
      break;
    case VllmEvent::Kind::kRemoved:
      open_event(pk, enc, "BlockRemoved", 2);
      key(pk, enc, "block_hashes");
      hashes(pk, e);
      key(pk, enc, "medium");
      medium(pk, e.medium);
      break;
    case VllmEvent::Kind::kCleared:
      open_event(pk, enc, "AllBlocksCleared", 0);
      break;
  }
}

}  // namespace

void encode_vllm_batch(std::string& out, VllmEncoding enc, double ts,
                       std::span<const VllmEvent> events, int64_t data_parallel_rank,
                       HashScheme scheme) {
  out.clear();
  StringOut sink{&out};
  Packer pk(sink);
  if (enc == VllmEncoding::kMap) {
    pk.pack_map(4);
  } else {
    pk.pack_array(4);
  }
  key(pk, enc, "ts");
  pk.pack_double(ts);
  key(pk, enc, "events");
  pk.pack_array(static_cast<uint32_t>(events.size()));
  for (const VllmEvent& e : events) event(pk, enc, e);
  key(pk, enc, "data_parallel_rank");
  pk.pack_int64(data_parallel_rank);
  key(pk, enc, "hash_scheme");
  str(pk, hash_scheme_name(scheme));
}

}  // namespace kvpool::events
