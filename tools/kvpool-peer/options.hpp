// kvpool-peer's settings (main.cpp fills them from the command line or a JSON file).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kvpool::peer {

struct PeerOptions {
  std::string instance = "default";  // the local kvpoold's instance
  std::string runtime_dir;           // "": where a client finds that instance
  std::string name;                  // this peer's name (metrics, logs); "": the host name
  // Where the holder listens for peers ("ip:port"); "": this host serves no pool.
  std::string listen;
  // What other hosts dial to reach this one (announced on NATS); "": `listen`.
  std::string advertise;
  // Pools this host serves to authenticated peers. Nothing else is ever served.
  std::vector<std::string> exports;
  std::string key_file;  // the cluster key (auth.hpp); required
  // Bounds: the longest deadline a fetch may ask for; how long a peer has to authenticate;
  // transfers served at once (more are refused: a miss for the asker).
  uint32_t max_deadline_ms = 10000;
  uint32_t auth_timeout_ms = 2000;
  uint32_t max_serves = 64;
  // Discovery on NATS (directory.hpp); "": only requests that name the holder can fetch.
  std::string nats_url;
  std::string nats_namespace = "kvpool";
  std::string nats_component = "kvpool";
  uint64_t worker_id = 0;  // this host's kvpool-events --worker-id (its KV events' worker_id)
  uint32_t announce_ms = 1000;
  uint32_t peer_timeout_ms = 5000;     // a peer not heard from for this long is dropped
  uint64_t index_capacity = 1u << 20;  // sequence hashes remembered across all peers
};

}  // namespace kvpool::peer
