#include "ctl.hpp"

#include <sys/wait.h>

#include <cstdio>

#include <nlohmann/json.hpp>

namespace kvpool::replay {

namespace {

struct Ran {
  int rc;
  std::string out;
};

// Paths come from our own options; quote them for the shell all the same.
std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

Ran run(const CtlTarget& t, const std::string& args) {
  std::string cmd = quote(t.kvpoolctl) + " " + args + " --instance " + quote(t.instance);
  if (!t.runtime_dir.empty()) cmd += " --runtime-dir " + quote(t.runtime_dir);
  cmd += " 2>&1";
  Ran r{-1, {}};
  FILE* f = ::popen(cmd.c_str(), "r");
  if (!f) return r;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof(buf), f)) > 0;) r.out.append(buf, n);
  int st = ::pclose(f);
  r.rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

// `kvpoolctl WHAT --json`, parsed.
Result<nlohmann::json> ctl_json(const CtlTarget& t, const std::string& what) {
  Ran r = run(t, what + " --json");
  if (r.rc != 0)
    return Status(ErrorCode::kNotFound,
                  "kvpoolctl " + what + " failed (rc " + std::to_string(r.rc) + "): " + r.out);
  try {
    return nlohmann::json::parse(r.out);
  } catch (const std::exception& e) {
    return Status(ErrorCode::kInternal,
                  "kvpoolctl " + what + " printed no JSON: " + std::string(e.what()));
  }
}

Result<nlohmann::json> status_json(const CtlTarget& t) { return ctl_json(t, "status"); }

}  // namespace

Result<CtlStatus> ctl_status(const CtlTarget& t, const std::string& pool) {
  auto j = status_json(t);
  if (!j) return j.status();
  CtlStatus s;
  s.clients = (*j)["clients"].get<uint32_t>();
  s.reclaimed_clients = (*j)["reclaimed_clients"].get<uint64_t>();
  s.reclaimed_blocks = (*j)["reclaimed_blocks"].get<uint64_t>();
  for (const auto& p : (*j)["pools"]) {
    if (!pool.empty() && p["name"] != pool) continue;
    s.total = p["total_blocks"].get<uint32_t>();
    s.free = p["free_blocks"].get<uint32_t>();
    s.mutable_blocks = p["mutable_blocks"].get<uint32_t>();
    s.active = p["active_blocks"].get<uint32_t>();
    s.inactive = p["inactive_blocks"].get<uint32_t>();
    s.evictions = p["evictions"].get<uint64_t>();
    if (const auto d = p.find("disk"); d != p.end() && d->is_object()) {
      s.disk_slots = (*d)["slots_total"].get<uint64_t>();
      s.disk_slots_used = (*d)["slots_used"].get<uint64_t>();
      s.disk_blocks_written = (*d)["blocks_written"].get<uint64_t>();
      s.disk_blocks_onboarded = (*d)["blocks_onboarded"].get<uint64_t>();
      s.disk_write_queue_drops = (*d)["write_queue_drops"].get<uint64_t>();
      s.disk_write_skipped = (*d)["write_skipped"].get<uint64_t>();
      s.disk_evictions = (*d)["evictions"].get<uint64_t>();
      s.disk_path = (*d)["path"].get<std::string>();
    }
    return s;
  }
  return Status(ErrorCode::kNotFound, "kvpoold has no pool '" + pool + "'");
}

Result<std::string> ctl_first_pool(const CtlTarget& t) {
  auto j = status_json(t);
  if (!j) return j.status();
  if ((*j)["pools"].empty()) return Status(ErrorCode::kNotFound, "kvpoold has no pools");
  return (*j)["pools"][0]["name"].get<std::string>();
}

Result<CtlPeerFigures> ctl_peers(const CtlTarget& t) {
  auto j = ctl_json(t, "peers");
  if (!j) return j.status();
  CtlPeerFigures f;
  try {
    for (const auto& [name, p] : (*j)["peers"].items()) {
      f.fetches += p["fetches"].get<uint64_t>();
      f.blocks_fetched += p["blocks_fetched"].get<uint64_t>();
      for (const auto& [cause, n] : p["failures"].items()) f.failures += n.get<uint64_t>();
    }
  } catch (const std::exception& e) {
    return Status(ErrorCode::kInternal,
                  "kvpoolctl peers: unexpected JSON: " + std::string(e.what()));
  }
  return f;
}

Status ctl_check(const CtlTarget& t) {
  Ran r = run(t, "check");
  if (r.rc == 0) return Status::ok();
  return Status(ErrorCode::kInternal,
                "kvpoolctl check (rc " + std::to_string(r.rc) + "): " + r.out);
}

}  // namespace kvpool::replay
