#include "kvpool/core/paths.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <vector>

namespace kvpool {

namespace {

// A directory in world-writable /tmp is only ours if we (or root) own it and nobody else
// may write it; else another user could have made it to serve a fake daemon.
bool private_dir(const std::string& dir, std::string* why) {
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) {
    *why = "does not exist";
    return false;
  }
  if (!S_ISDIR(st.st_mode)) {
    *why = "is not a directory";
    return false;
  }
  if (st.st_uid != ::getuid() && st.st_uid != 0) {
    *why = "is owned by uid " + std::to_string(st.st_uid) + ", not by this user: not trusted";
    return false;
  }
  if ((st.st_mode & 022) != 0) {
    *why = "is writable by others (mode " + std::to_string(st.st_mode & 0777) + "): not trusted";
    return false;
  }
  return true;
}

}  // namespace

Result<std::string> find_runtime_dir(std::string_view instance) {
  struct Candidate {
    std::string dir;
    bool shared_tmp;
  };
  std::vector<Candidate> candidates;
  auto env = [](const char* name) -> std::string {
    const char* v = std::getenv(name);
    return v && *v ? std::string(v) : std::string();
  };
  if (auto d = env("KVPOOL_RUNTIME_DIR"); !d.empty()) candidates.push_back({d, false});
  if (auto d = env("RUNTIME_DIRECTORY"); !d.empty())
    candidates.push_back({d.substr(0, d.find(':')), false});
  candidates.push_back({"/run/kvpool", false});
  if (auto d = env("XDG_RUNTIME_DIR"); !d.empty()) candidates.push_back({d + "/kvpool", false});
  candidates.push_back({"/tmp/kvpool-" + std::to_string(::getuid()), true});

  std::string looked;
  for (const Candidate& c : candidates) {
    const std::string sock = socket_path(c.dir, instance);
    std::string why;
    if (c.shared_tmp && !private_dir(c.dir, &why)) {
      // fall through to the report
    } else if (::access(sock.c_str(), F_OK) != 0) {
      why = errno == EACCES ? "may hold the socket, but this user may not enter it (join the "
                              "daemon's group, e.g. kvpool)"
                            : "has no socket " + std::string(instance) + ".sock";
    } else if (::access(sock.c_str(), W_OK) != 0) {
      why =
          "has the socket, but this user may not connect to it (join the daemon's group, "
          "e.g. kvpool)";
    } else {
      return c.dir;
    }
    looked += (looked.empty() ? "" : "; ") + c.dir + " " + why;
  }
  return Status(ErrorCode::kNotFound, "no kvpoold instance '" + std::string(instance) +
                                          "' found (" + looked +
                                          "); is it running? set runtime_dir or "
                                          "KVPOOL_RUNTIME_DIR if it uses another directory");
}

Status check_daemon_uid(const std::string& socket_file, uint32_t daemon_uid) {
  if (daemon_uid == 0 || daemon_uid == ::getuid()) return Status::ok();
  const std::string dir = socket_file.substr(0, socket_file.find_last_of('/'));
  struct stat st {};
  if (::stat(dir.empty() ? "/" : dir.c_str(), &st) == 0 && st.st_uid == daemon_uid)
    return Status::ok();
  return Status(ErrorCode::kPermissionDenied,
                "the server on " + socket_file + " runs as uid " + std::to_string(daemon_uid) +
                    ", which owns neither its directory nor is root or this user: not trusting "
                    "it with this worker's KV cache");
}

std::string default_runtime_dir() {
  if (const char* d = std::getenv("RUNTIME_DIRECTORY"); d && *d) {
    std::string s(d);
    // systemd may list several directories separated by ':'; ours is the first.
    return s.substr(0, s.find(':'));
  }
  if (access("/run/kvpool", W_OK | X_OK) == 0) return "/run/kvpool";
  if (const char* x = std::getenv("XDG_RUNTIME_DIR"); x && *x) return std::string(x) + "/kvpool";
  return "/tmp/kvpool-" + std::to_string(getuid());
}

Status validate_instance_name(std::string_view instance) {
  if (instance.empty() || instance.size() > 48)
    return Status(ErrorCode::kInvalidArgument, "instance name must be 1 to 48 characters, got " +
                                                   std::to_string(instance.size()));
  for (char c : instance) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-' || c == '.';
    if (!ok)
      return Status(ErrorCode::kInvalidArgument,
                    "instance name '" + std::string(instance) + "' may only use [A-Za-z0-9_.-]");
  }
  return Status::ok();
}

std::string socket_path(std::string_view runtime_dir, std::string_view instance) {
  return std::string(runtime_dir) + "/" + std::string(instance) + ".sock";
}

std::string control_segment_name(std::string_view instance) {
  return "kvpool." + std::string(instance) + ".ctl";
}

std::string pool_segment_name(std::string_view instance, std::string_view pool) {
  return "kvpool." + std::string(instance) + ".pool." + std::string(pool);
}

}  // namespace kvpool
