// kvpoolctl events [--instance NAME] [--runtime-dir DIR] [--json] [--follow]
//                  [--last N | --all | --new]
// Tails the event rings of the pools the caller may read (docs/design.md §7; one ring per
// pool, each with its own event ids): the last 20 events of each (like tail; --all: what the
// rings still hold, which may be 65536 records each), then (--follow)
// every new Stored / Removed / Cleared record as it is appended, until the daemon stops or
// the user interrupts. A reader never writes the ring, so tailing costs the daemon nothing;
// one that falls a lap behind says how many records it lost and goes on.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>
#include <thread>
#include <vector>

#include "commands.hpp"
#include "control_view.hpp"
#include "kvpool/shm/event_ring.hpp"
#include "kvpool/shm/pool_event_rings.hpp"

namespace kvpool {
namespace {

struct EventsOptions : ctl::ViewOptions {
  bool follow = false;
  bool new_only = false;
  bool all = false;
  uint64_t last = 20;
};

const char* type_name(shm::EventType t) {
  switch (t) {
    case shm::EventType::kStored:
      return "stored";
    case shm::EventType::kRemoved:
      return "removed";
    case shm::EventType::kCleared:
      return "cleared";
  }
  return "unknown";
}

std::string pool_name(const ctl::ControlView& v, uint32_t index) {
  const int k = v.position_of(index);
  return k >= 0 ? v.pools[static_cast<size_t>(k)].name() : "#" + std::to_string(index);
}

std::string hex_of(const std::vector<std::byte>& bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * bytes.size());
  for (std::byte b : bytes) {
    out.push_back(kDigits[std::to_integer<unsigned>(b) >> 4]);
    out.push_back(kDigits[std::to_integer<unsigned>(b) & 15]);
  }
  return out;
}

void print_event(const ctl::ControlView& v, const shm::PoolEventRings& ring,
                 const shm::EventRecord& r, bool json) {
  const shm::EventPayload& p = r.payload;
  // A client's send_tokens: the block's token ids, if the ring still holds them.
  std::vector<uint32_t> tokens;
  if (r.has_tokens()) ring.read_tokens(r, &tokens);
  // A BatchStore block's namespaced key (opaque bytes), if the ring still holds it.
  std::vector<std::byte> key;
  const bool key_read = r.has_key() && ring.read_key(r, &key);
  const std::string pool = pool_name(v, p.pool);
  if (json) {
    nlohmann::json j{{"event_id", r.event_id},
                     {"type", type_name(r.type())},
                     {"pool", pool},
                     {"tier", r.disk_tier() ? "disk" : "memory"},
                     {"time_ns", p.time_ns}};
    // Every hash also as a decimal string (*_str): jq and JavaScript read JSON numbers as
    // doubles and silently round 64-bit hashes.
    if (r.type() != shm::EventType::kCleared) {
      j["sequence_hash"] = p.sequence_hash;
      j["sequence_hash_str"] = std::to_string(p.sequence_hash);
    }
    if (r.type() == shm::EventType::kStored) {
      j["block_hash"] = p.block_hash;
      j["block_hash_str"] = std::to_string(p.block_hash);
      j["parent_hash"] = r.has_parent() ? nlohmann::json(p.parent_hash) : nlohmann::json(nullptr);
      j["parent_hash_str"] =
          r.has_parent() ? nlohmann::json(std::to_string(p.parent_hash)) : nlohmann::json(nullptr);
      j["priority"] = p.priority;
      j["batch_id"] = p.batch_id;
      j["batch_size"] = p.batch_size;
      j["token_ids"] = tokens;
      // Hex: the key is bytes, which JSON has no type for. null: it had one, overwritten since.
      if (r.has_key())
        j["key_hex"] = key_read ? nlohmann::json(hex_of(key)) : nlohmann::json(nullptr);
    }
    std::cout << j.dump() << "\n";
    return;
  }
  char line[256];
  switch (r.type()) {
    case shm::EventType::kStored:
      if (r.has_parent())
        std::snprintf(line, sizeof(line),
                      "%" PRIu64 " stored  pool=%s seq=%" PRIu64 " block=%" PRIu64
                      " parent=%" PRIu64 " priority=%u",
                      r.event_id, pool.c_str(), p.sequence_hash, p.block_hash, p.parent_hash,
                      p.priority);
      else
        std::snprintf(line, sizeof(line),
                      "%" PRIu64 " stored  pool=%s seq=%" PRIu64 " block=%" PRIu64
                      " parent=- priority=%u",
                      r.event_id, pool.c_str(), p.sequence_hash, p.block_hash, p.priority);
      if (!tokens.empty())
        std::snprintf(line + std::strlen(line), sizeof(line) - std::strlen(line), " tokens=%zu",
                      tokens.size());
      if (key_read)
        std::snprintf(line + std::strlen(line), sizeof(line) - std::strlen(line), " key=%zu bytes",
                      key.size());
      break;
    case shm::EventType::kRemoved:
      std::snprintf(line, sizeof(line), "%" PRIu64 " removed pool=%s seq=%" PRIu64, r.event_id,
                    pool.c_str(), p.sequence_hash);
      break;
    default:
      std::snprintf(line, sizeof(line), "%" PRIu64 " %s pool=%s", r.event_id, type_name(r.type()),
                    pool.c_str());
  }
  // The pool's disk tier (docs/disk-tier.md): a Stored / Removed of its own.
  if (r.disk_tier())
    std::snprintf(line + std::strlen(line), sizeof(line) - std::strlen(line), " tier=disk");
  std::cout << line << "\n";
}

void print_lost(uint64_t lost, bool json) {
  if (json)
    std::cout << nlohmann::json{{"lost", lost}}.dump() << "\n";
  else
    std::cout << "lost " << lost << " events: the ring lapped this reader\n";
}

bool daemon_alive(const ctl::ControlView& v) {
  if (v.control.state() != shm::DaemonState::kReady) return false;  // an acquire load
  // EPERM: alive, run by another user (the unit's kvpool user).
  return ::kill(static_cast<pid_t>(v.header->daemon_pid), 0) == 0 || errno == EPERM;
}

void run_events(const EventsOptions& o) {
  ctl::ControlView v = ctl::open_control(o.instance, o.runtime_dir);
  if (!v.control.has_event_ring())
    throw CommandError("kvpoold of instance '" + o.instance +
                       "' keeps no event ring this uid may read (\"event_ring_slots\": 0 in "
                       "its config, or no pool open to uid " +
                       std::to_string(::getuid()) + ")");
  // The ring of each pool this caller may read (its registry segment), as one stream.
  auto reader = shm::PoolEventRings::open(v.control);
  if (!reader) throw CommandError(reader.status());
  shm::PoolEventRings& ring = reader.value();
  if (o.new_only) {
    ring.seek_to_end();
  } else if (!o.all) {
    ring.seek_back(o.last);  // the last N of each pool's ring
  }

  // Without --follow: everything published when we started, then exit. The reader starts at
  // id 1; a ring that has wrapped since reports the records it no longer holds as lost.
  const std::vector<uint64_t> stop_at = ring.published();
  auto idle_pause = std::chrono::milliseconds(1);
  while (true) {
    shm::EventRecord r;
    switch (ring.next(&r)) {
      case shm::EventRingReader::Outcome::kEvent:
        print_event(v, ring, r, o.json);
        idle_pause = std::chrono::milliseconds(1);
        continue;
      case shm::EventRingReader::Outcome::kLapped:
        print_lost(ring.lost(), o.json);
        continue;
      case shm::EventRingReader::Outcome::kEmpty:
        break;
    }
    if (!o.follow && ring.reached(stop_at)) break;
    std::cout.flush();
    if (!daemon_alive(v)) {
      if (!o.follow) break;
      throw CommandError("kvpoold of instance '" + o.instance + "' stopped");
    }
    // A tail, not a consumer the daemon knows about: poll, backing off to 50 ms when idle.
    std::this_thread::sleep_for(idle_pause);
    idle_pause = std::min(idle_pause * 2, std::chrono::milliseconds(50));
  }
  std::cout.flush();
}

}  // namespace

void add_events_command(CLI::App& app) {
  auto options = std::make_shared<EventsOptions>();
  CLI::App* cmd = app.add_subcommand(
      "events", "Print the registry events the daemon's ring holds (stored / removed / cleared)");
  ctl::add_view_options(cmd, *options);
  cmd->add_flag("-f,--follow", options->follow,
                "Keep printing new events as they come, until the daemon stops (or Ctrl-C)");
  cmd->add_option("-n,--last", options->last, "Print the last N events the ring holds")
      ->capture_default_str();
  cmd->add_flag("--all", options->all, "Print every event the ring still holds");
  cmd->add_flag("--new", options->new_only, "Skip what the ring holds now: only new events");
  cmd->callback([options] { run_events(*options); });
}

}  // namespace kvpool
