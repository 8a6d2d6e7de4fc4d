// kvpool-router-demo: the router side of kvpool's KV events, small enough to read. It
// subscribes to the kv_events subject, keeps a per-worker index of sequence hashes, and
// says for a token list how many leading blocks each worker already holds.
//
//   kvpool-router-demo [--nats-url U] [--namespace NS] [--component C] [--topic kv-events]
//                      [--page-size 16] [--salt 1337] [--hash-scheme dynamo-0.2]
//                      [--lora-name L] [--cache-namespace N] --query 1 2 3 ...  (answer, exit)
//
// The salt must be the workers': Dynamo's router hashes with 1337 (kDynamoSeed), so that is
// the default here and what a worker should use to be matched by Dynamo's router too. With
// --hash-scheme dynamo-router, --lora-name / --cache-namespace give the salt as Dynamo
// derives it (dynamo_router_salt), unless --salt says otherwise.
//   kvpool-router-demo [...]                                           (line mode on stdin)
//
// Line mode (for scripts and tests), one JSON line answered per command line:
//   overlap T1 T2 ...  -> {"blocks":N,"overlap":{"<worker>":n,...}}
//   size               -> {"connected":b,"messages":M,"errors":E,"resync_requests":R,
//                          "total_blocks":B,"workers":{"<worker>":n,...}}
//   resync             -> {"ok":true}   (asks every forwarder for its whole registry)
//   quit
// On every (re)connect to NATS it asks the forwarders to resync, so it never works from a
// view that missed messages while it (or NATS) was away.
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <cstdio>
#include <iostream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "examples/router_demo/router_index.hpp"
#include "kvpool/core/token_block.hpp"
#include "kvpool/core/version.hpp"
#include "tools/kvpool-events/nats_link.hpp"
#include "tools/kvpool-events/router_event.hpp"

namespace {

using namespace kvpool;
using namespace kvpool::events;

struct State {
  std::mutex mu;
  RouterIndex index;
  uint64_t messages = 0;
  uint64_t errors = 0;
  std::atomic<uint64_t> resync_requests{0};
};

Result<std::vector<uint64_t>> hashes_of(const std::vector<Token>& tokens, uint32_t page, Salt salt,
                                        HashScheme scheme) {
  auto seq = TokenBlockSequence::create(tokens, page, salt, scheme);
  if (!seq) return seq.status();
  return seq->sequence_hashes();
}

nlohmann::json overlap_json(State& st, const std::vector<uint64_t>& hashes) {
  nlohmann::json j;
  j["blocks"] = hashes.size();
  j["overlap"] = nlohmann::json::object();
  std::lock_guard lock(st.mu);
  for (const auto& [w, n] : st.index.overlaps(hashes)) j["overlap"][std::to_string(w)] = n;
  return j;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kvpool-router-demo: a KV-aware router's index, fed by kvpool-events over NATS"};
  app.set_version_flag("--version", "kvpool-router-demo " + kvpool::version_string());
  NatsOptions nats;
  nats.name = "kvpool-router-demo";
  std::string ns = "dynamo", component = "kvpool", log_level = "warn";
  uint32_t page_size = 16;
  uint64_t salt = kDynamoSeed;
  std::string topic(kDefaultTopic), scheme_name = "dynamo-0.2", lora_name, cache_namespace;
  std::vector<Token> query;
  uint32_t wait_ms = 1000;
  app.add_option("--nats-url", nats.url, "NATS server")->capture_default_str();
  app.add_option("--namespace", ns, "Dynamo namespace of the subject")->capture_default_str();
  app.add_option("--component", component, "Dynamo component of the subject")
      ->capture_default_str();
  app.add_option("--page-size", page_size, "tokens per block (as the workers' pools)")
      ->capture_default_str();
  app.add_option("--topic", topic, "last part of the subject: kv-events or kv_events (legacy)")
      ->capture_default_str();
  app.add_option("--salt", salt, "hash salt (as the workers use; Dynamo's router: 1337)")
      ->capture_default_str();
  app.add_option("--hash-scheme", scheme_name, "dynamo-0.2 | dynamo-router (as the pools)")
      ->capture_default_str();
  app.add_option("--lora-name", lora_name, "dynamo-router: the LoRA adapter mixed into the salt");
  app.add_option("--cache-namespace", cache_namespace,
                 "dynamo-router: the cache namespace mixed into the salt");
  app.add_option("--query", query, "token ids: print each worker's overlap and exit");
  app.add_option("--wait-ms", wait_ms, "--query: how long to collect events first")
      ->capture_default_str();
  app.add_option("--log-level", log_level, "trace|debug|info|warn|error|critical|off")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  auto logger = spdlog::stderr_color_mt("kvpool-router-demo");
  spdlog::set_default_logger(logger);
  spdlog::set_level(spdlog::level::from_str(log_level));
  if (page_size == 0) {
    std::fprintf(stderr, "kvpool-router-demo: --page-size must be > 0\n");
    return 2;
  }
  const auto parsed_scheme = parse_hash_scheme(scheme_name);
  if (!parsed_scheme) {
    std::fprintf(stderr, "kvpool-router-demo: --hash-scheme must be dynamo-0.2 or dynamo-router\n");
    return 2;
  }
  const HashScheme scheme = *parsed_scheme;
  if (scheme == HashScheme::kDynamoRouter && app.count("--salt") == 0)
    salt = dynamo_router_salt(cache_namespace, lora_name);

  State st;
  auto link = NatsLink::connect(nats);
  if (!link) {
    std::fprintf(stderr, "kvpool-router-demo: %s\n", link.status().to_string().c_str());
    return 1;
  }
  NatsLink& nc = **link;
  const std::string subject = kv_events_subject(ns, component, topic);
  const std::string resync_subj = resync_subject(ns, component, topic);
  Status sub = nc.subscribe(subject, [&st](std::string_view data) {
    auto e = parse_router_event(data);
    std::lock_guard lock(st.mu);
    ++st.messages;
    if (!e) {
      if (st.errors++ == 0) spdlog::warn("{}", e.status().message());
      return;
    }
    st.index.apply(*e);
  });
  if (!sub.is_ok()) {
    std::fprintf(stderr, "kvpool-router-demo: %s\n", sub.to_string().c_str());
    return 1;
  }
  // Every (re)connect: ask the forwarders for everything (messages sent while we were away
  // are gone). The request follows our subscription on the same connection, so the answers
  // reach us.
  std::atomic<bool> done{false};
  std::thread resyncer([&] {
    uint64_t seen = 0;
    while (!done.load(std::memory_order_relaxed)) {
      const uint64_t e = nc.epoch();
      if (e != seen && nc.connected() && nc.publish(resync_subj, "{}").is_ok()) {
        seen = e;
        st.resync_requests.fetch_add(1, std::memory_order_relaxed);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  });
  auto finish = [&](int rc) {
    done.store(true);
    resyncer.join();
    return rc;
  };

  if (!query.empty()) {
    auto hashes = hashes_of(query, page_size, salt, scheme);
    if (!hashes) {
      std::fprintf(stderr, "kvpool-router-demo: %s\n", hashes.status().to_string().c_str());
      return finish(2);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(wait_ms));  // a human's tool: collect
    nlohmann::json j = overlap_json(st, *hashes);
    std::printf("%zu full block(s) of %u tokens\n", hashes->size(), page_size);
    for (auto& [w, n] : j["overlap"].items())
      std::printf("worker %s: %u leading block(s)\n", w.c_str(), n.get<uint32_t>());
    return finish(0);
  }

  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream in(line);
    std::string cmd;
    in >> cmd;
    nlohmann::json out;
    if (cmd == "overlap") {
      std::vector<Token> tokens;
      for (Token t; in >> t;) tokens.push_back(t);
      auto hashes = hashes_of(tokens, page_size, salt, scheme);
      out =
          hashes ? overlap_json(st, *hashes) : nlohmann::json{{"error", hashes.status().message()}};
    } else if (cmd == "size") {
      std::lock_guard lock(st.mu);
      out["connected"] = nc.connected();
      out["messages"] = st.messages;
      out["errors"] = st.errors;
      out["resync_requests"] = st.resync_requests.load();
      out["total_blocks"] = st.index.total_blocks();
      out["workers"] = nlohmann::json::object();
      for (const auto& [w, n] : st.index.sizes()) out["workers"][std::to_string(w)] = n;
    } else if (cmd == "resync") {
      Status s = nc.publish(resync_subj, "{}");
      out = s.is_ok() ? nlohmann::json{{"ok", true}} : nlohmann::json{{"error", s.message()}};
    } else if (cmd == "quit") {
      break;
    } else if (cmd.empty()) {
      continue;
    } else {
      out["error"] = "unknown command '" + cmd + "' (overlap, size, resync, quit)";
    }
    std::printf("%s\n", out.dump().c_str());
    std::fflush(stdout);
  }
  return finish(0);
}
