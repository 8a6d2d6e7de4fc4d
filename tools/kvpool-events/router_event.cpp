#include "tools/kvpool-events/router_event.hpp"

#include <nlohmann/json.hpp>

namespace kvpool::events {
namespace {

using OrderedJson = nlohmann::ordered_json;

// The envelope in Dynamo's field order (protocols.rs RouterEvent: worker_id, storage_tier,
// residency_domain, event, state_source), so EventSource{worker_id} alone still gives Dynamo
// 0.2.1's form byte for byte. Empty strings and a missing dp_rank are left out.
OrderedJson envelope(const EventSource& src, uint64_t event_id, OrderedJson data) {
  OrderedJson j;
  j["worker_id"] = src.worker_id;
  if (!src.storage_tier.empty()) j["storage_tier"] = src.storage_tier;
  if (!src.residency_domain.empty()) j["residency_domain"] = src.residency_domain;
  OrderedJson& ev = j["event"];
  ev["event_id"] = event_id;
  if (src.dp_rank) ev["dp_rank"] = *src.dp_rank;
  ev["data"] = std::move(data);
  // Dynamo's CacheOwnerId is a struct: it goes out as the JSON object it was configured as.
  if (src.state_source && !src.state_source->is_null()) j["state_source"] = *src.state_source;
  if (!src.hash_scheme.empty()) j["hash_scheme"] = src.hash_scheme;
  return j;
}

void append(std::string& out, const OrderedJson& j) { out += j.dump(); }

Status bad(const std::string& what) {
  return Status(ErrorCode::kInvalidArgument, "not a router event: " + what);
}

}  // namespace

std::string kv_events_subject(std::string_view ns, std::string_view component,
                              std::string_view topic) {
  return "namespace." + std::string(ns) + ".component." + std::string(component) + "." +
         std::string(topic);
}

std::string resync_subject(std::string_view ns, std::string_view component,
                           std::string_view topic) {
  return kv_events_subject(ns, component, topic) + ".resync";
}

void append_stored_json(std::string& out, const EventSource& src, uint64_t event_id,
                        std::optional<uint64_t> parent_hash, std::span<const StoredHashes> blocks) {
  OrderedJson list = OrderedJson::array();
  for (const StoredHashes& b : blocks)
    list.push_back(OrderedJson{{"block_hash", b.block_hash}, {"tokens_hash", b.tokens_hash}});
  OrderedJson stored;
  stored["parent_hash"] = parent_hash ? OrderedJson(*parent_hash) : OrderedJson(nullptr);
  stored["blocks"] = std::move(list);
  append(out, envelope(src, event_id, OrderedJson{{"stored", std::move(stored)}}));
}

void append_removed_json(std::string& out, const EventSource& src, uint64_t event_id,
                         std::span<const uint64_t> block_hashes) {
  OrderedJson removed;
  removed["block_hashes"] =
      OrderedJson(std::vector<uint64_t>(block_hashes.begin(), block_hashes.end()));
  append(out, envelope(src, event_id, OrderedJson{{"removed", std::move(removed)}}));
}

void append_cleared_json(std::string& out, const EventSource& src, uint64_t event_id) {
  append(out, envelope(src, event_id, OrderedJson("cleared")));
}

Result<RouterEvent> parse_router_event(std::string_view text) {
  using nlohmann::json;
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return bad("invalid JSON");
  if (!j.is_object()) return bad("not an object");
  RouterEvent e;
  auto w = j.find("worker_id");
  if (w == j.end() || !w->is_number_integer()) return bad("worker_id missing or not an integer");
  e.worker_id = w->get<int64_t>();
  for (auto [name, field] : {std::pair<const char*, std::string*>{"storage_tier", &e.storage_tier},
                             {"residency_domain", &e.residency_domain},
                             {"hash_scheme", &e.hash_scheme}}) {
    auto f = j.find(name);
    if (f == j.end() || f->is_null()) continue;
    if (!f->is_string()) return bad(std::string(name) + " is not a string");
    *field = f->get<std::string>();
  }
  // Dynamo's CacheOwnerId is a struct: an object (kept as its compact JSON), never a string.
  if (auto f = j.find("state_source"); f != j.end() && !f->is_null()) {
    if (!f->is_object()) return bad("state_source is not an object (Dynamo's CacheOwnerId)");
    e.state_source = f->dump();
  }
  auto ev = j.find("event");
  if (ev == j.end() || !ev->is_object()) return bad("event missing or not an object");
  auto id = ev->find("event_id");
  if (id == ev->end() || !id->is_number_unsigned())
    return bad("event.event_id missing or not unsigned");
  e.event_id = id->get<uint64_t>();
  if (auto dp = ev->find("dp_rank"); dp != ev->end()) {
    if (!dp->is_number_unsigned() || dp->get<uint64_t>() > UINT32_MAX)
      return bad("event.dp_rank is not a u32");
    e.dp_rank = dp->get<uint32_t>();
  }
  auto data = ev->find("data");
  if (data == ev->end()) return bad("event.data missing");
  if (data->is_string()) {
    if (data->get<std::string>() != "cleared") return bad("event.data is an unknown string");
    e.kind = RouterEvent::Kind::kCleared;
    return e;
  }
  if (!data->is_object() || data->size() != 1) return bad("event.data is not a one-key object");
  if (auto st = data->find("stored"); st != data->end()) {
    e.kind = RouterEvent::Kind::kStored;
    if (!st->is_object()) return bad("stored is not an object");
    auto parent = st->find("parent_hash");
    if (parent == st->end()) return bad("stored.parent_hash missing");
    if (parent->is_number_unsigned()) {
      e.parent_hash = parent->get<uint64_t>();
    } else if (!parent->is_null()) {
      return bad("stored.parent_hash is neither null nor unsigned");
    }
    auto blocks = st->find("blocks");
    if (blocks == st->end() || !blocks->is_array())
      return bad("stored.blocks missing or not an array");
    e.blocks.reserve(blocks->size());
    for (const json& b : *blocks) {
      if (!b.is_object()) return bad("stored.blocks[] is not an object");
      auto bh = b.find("block_hash");
      auto th = b.find("tokens_hash");
      if (bh == b.end() || th == b.end() || !bh->is_number_unsigned() || !th->is_number_unsigned())
        return bad("stored.blocks[] needs unsigned block_hash and tokens_hash");
      e.blocks.push_back({bh->get<uint64_t>(), th->get<uint64_t>()});
    }
    return e;
  }
  if (auto rm = data->find("removed"); rm != data->end()) {
    e.kind = RouterEvent::Kind::kRemoved;
    if (!rm->is_object()) return bad("removed is not an object");
    auto hashes = rm->find("block_hashes");
    if (hashes == rm->end() || !hashes->is_array())
      return bad("removed.block_hashes missing or not an array");
    e.block_hashes.reserve(hashes->size());
    for (const json& h : *hashes) {
      if (!h.is_number_unsigned()) return bad("removed.block_hashes[] is not unsigned");
      e.block_hashes.push_back(h.get<uint64_t>());
    }
    return e;
  }
  return bad("event.data is neither stored, removed nor cleared");
}

Result<std::optional<int64_t>> parse_resync_request(std::string_view text) {
  using nlohmann::json;
  if (text.empty()) return std::optional<int64_t>();
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return bad("resync request is not a JSON object");
  auto w = j.find("worker_id");
  if (w == j.end()) return std::optional<int64_t>();
  if (!w->is_number_integer()) return bad("resync request worker_id is not an integer");
  return std::optional<int64_t>(w->get<int64_t>());
}

}  // namespace kvpool::events
