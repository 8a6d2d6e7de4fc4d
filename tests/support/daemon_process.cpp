#include "support/daemon_process.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include "kvpool/core/paths.hpp"
#include "kvpool/shm/handshake.hpp"

namespace kvpool::testsupport {
namespace {

std::atomic<int> g_instance_counter{0};

}  // namespace

// ---- daemon view -----------------------------------------------------------------------------

DaemonView DaemonView::open(const std::string& instance, const std::string& runtime_dir) {
  // Validated once, completely (offsets, lengths, arenas): see shm/control_segment.hpp.
  auto control = shm::observe(instance, runtime_dir);
  if (!control)
    throw TestError("cannot observe kvpoold instance '" + instance +
                    "': " + control.status().to_string());
  DaemonView v;
  v.control_ = std::move(control.value());
  v.snapshots_.resize(v.control_.num_pools());
  return v;
}

PoolLook DaemonView::pool(uint32_t i) const {
  const pool::ArenaView& live = control_.arena(i);
  Snapshot& s = snapshots_.at(i);
  if (!s.bytes)
    s.bytes.reset(static_cast<std::byte*>(std::aligned_alloc(64, (live.bytes() + 63) / 64 * 64)),
                  std::free);
  // The engine may be mid-call: retry until the arena's seqlock says the copy is whole.
  auto deadline = Clock::now() + 5s;
  while (!live.copy_to(s.bytes.get())) {
    if (Clock::now() > deadline) throw TestError("no consistent copy of the pool arena in 5 s");
    std::this_thread::yield();
  }
  auto core = pool::PoolCore::attach(s.bytes.get(), live.bytes(), i, live.name());
  if (!core) throw TestError("pool arena: " + core.status().to_string());
  s.core = std::move(core.value());
  return PoolLook(&live, &s.core);
}

uint32_t DaemonView::clients() const {
  uint32_t n = 0;
  for (uint32_t i = 0; i < control_.max_clients(); ++i)
    n += control_.slot(i).state.load(std::memory_order_acquire) !=
         static_cast<uint32_t>(shm::SlotState::kFree);
  return n;
}

std::string DaemonView::describe() const {
  auto rl = [](const auto& a) { return std::to_string(a.load(std::memory_order_relaxed)); };
  std::string s;
  for (uint32_t i = 0; i < control_.num_pools(); ++i) {
    if (!control_.has_pool(i)) continue;
    const pool::ArenaView& p = control_.arena(i);
    auto c = p.counts();
    s += "pool '" + p.name() + "': total " + std::to_string(c.total) + " free " +
         std::to_string(c.free) + " mutable " + std::to_string(c.mutable_blocks) + " active " +
         std::to_string(c.active) + " inactive " + std::to_string(c.inactive) +
         ", rejected_handles " + rl(p.stats().rejected_handles) + "; ";
  }
  s += "clients " + std::to_string(clients()) + ", reclaimed_clients " +
       rl(stats().reclaimed_clients) + ", reclaimed_blocks " + rl(stats().reclaimed_blocks) +
       ", protocol_errors " + rl(stats().protocol_errors) + ", disconnects " +
       rl(stats().disconnects) + ", refused_attaches " + rl(stats().refused_attaches);
  return s;
}

// ---- configs ---------------------------------------------------------------------------------

nlohmann::json host_pool(const std::string& name, uint32_t blocks, uint32_t page_size) {
  return {{"name", name},
          {"num_blocks", blocks},
          {"layout",
           {{"num_layers", 2},
            {"outer_dim", 2},
            {"page_size", page_size},
            {"inner_dim", 16},
            {"dtype_bytes", 2},
            {"alignment", 64}}}};
}

nlohmann::json test_config(nlohmann::json pools) {
  if (pools.is_null()) pools = nlohmann::json::array({host_pool("g", 64)});
  // uid_share_percent 100: these tests run one uid that takes whole pools and every slot
  // (evictions, exhaustion); the per-uid defaults have tests of their own (trust_test.cpp).
  return {{"max_clients", 16},
          {"poll_us", 20},
          {"log_level", "info"},
          {"pools", pools},
          {"uid_share_percent", 100}};
}

// ---- daemon ----------------------------------------------------------------------------------

DaemonProcess::DaemonProcess(nlohmann::json config, std::string kvpoold)
    : kvpoold_(std::move(kvpoold)) {
  char tmpl[] = "/tmp/kvpool-mp-XXXXXX";
  if (!::mkdtemp(tmpl)) throw TestError(errno_text("mkdtemp"));
  dir_ = tmpl;
  instance_ = "t" + std::to_string(::getpid()) + "-" + std::to_string(++g_instance_counter);
  runtime_dir_ = dir_;
  if (!config.contains("instance")) config["instance"] = instance_;
  if (!config.contains("runtime_dir")) config["runtime_dir"] = runtime_dir_;
  if (config["instance"].is_string()) instance_ = config["instance"].get<std::string>();
  if (config["runtime_dir"].is_string()) runtime_dir_ = config["runtime_dir"].get<std::string>();
  config_path_ = dir_ + "/kvpoold.json";
  std::ofstream(config_path_) << config.dump(2) << "\n";

  notify_path_ = dir_ + "/notify";
  notify_fd_ = shm::UniqueFd(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!notify_fd_) throw TestError(errno_text("socket"));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, notify_path_.c_str(), sizeof(addr.sun_path) - 1);
  if (::bind(notify_fd_.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0)
    throw TestError(errno_text("bind " + notify_path_));
  int one = 1;
  ::setsockopt(notify_fd_.get(), SOL_SOCKET, SO_PASSCRED, &one, sizeof(one));
  notify_stop_ = shm::UniqueFd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!notify_stop_) throw TestError(errno_text("eventfd"));
  notify_thread_ = std::thread([this] { notify_main(); });
}

DaemonProcess::~DaemonProcess() {
  if (proc_) proc_->kill_and_reap();
  // A failed test shows what the daemon said, from every start.
  if (::testing::Test::HasFailure()) {
    for (int k = 1; k <= starts_; ++k) {
      std::string path = dir_ + "/kvpoold." + std::to_string(k) + ".stderr";
      std::cerr << "---- kvpoold stderr (instance " << instance_ << ", start " << k << ") ----\n"
                << read_file(path) << "---- end ----\n";
    }
  }
  if (notify_thread_.joinable()) {
    uint64_t one = 1;
    ssize_t w = ::write(notify_stop_.get(), &one, sizeof(one));
    (void)w;
    notify_thread_.join();
  }
  // A daemon killed by the test leaves its segments behind: remove them.
  for (const auto& f : shm_files()) ::shm_unlink(("/" + f).c_str());
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

void DaemonProcess::notify_main() {
  pollfd fds[2] = {{notify_fd_.get(), POLLIN, 0}, {notify_stop_.get(), POLLIN, 0}};
  while (true) {
    int n = ::poll(fds, 2, -1);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 || (fds[1].revents & POLLIN)) return;
    while (true) {
      char data[4096];
      alignas(cmsghdr) char control[CMSG_SPACE(sizeof(ucred))];
      iovec iov{data, sizeof(data) - 1};
      msghdr msg{};
      msg.msg_iov = &iov;
      msg.msg_iovlen = 1;
      msg.msg_control = control;
      msg.msg_controllen = sizeof(control);
      ssize_t r = ::recvmsg(notify_fd_.get(), &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
      if (r < 0) break;  // EAGAIN: drained
      pid_t sender = -1;
      for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_CREDENTIALS) {
          ucred cred;
          std::memcpy(&cred, CMSG_DATA(c), sizeof(cred));
          sender = cred.pid;
        }
      }
      std::string text(data, static_cast<size_t>(r));
      const Clock::time_point at = Clock::now();
      std::lock_guard lk(mu_);
      stream_.push_back({sender, text, at});
      std::istringstream lines(text);
      for (std::string line; std::getline(lines, line);)
        if (!line.empty()) notes_[sender].push_back(line);
      cv_.notify_all();
    }
  }
}

bool DaemonProcess::notified(const std::string& line) {
  std::lock_guard lk(mu_);
  auto it = notes_.find(pid());
  if (it == notes_.end()) return false;
  for (auto& l : it->second)
    if (l == line) return true;
  return false;
}

std::optional<DaemonProcess::Notification> DaemonProcess::next_notification(
    Clock::time_point deadline) {
  std::unique_lock lk(mu_);
  if (!cv_.wait_until(lk, deadline, [&] { return !stream_.empty(); })) return std::nullopt;
  Notification n = std::move(stream_.front());
  stream_.pop_front();
  return n;
}

std::string DaemonProcess::await(const std::string& needle, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (auto n = next_notification(deadline))
    if (n->text.find(needle) != std::string::npos) return n->text;
  throw TestError("no '" + needle + "' from kvpoold within " + std::to_string(timeout.count()) +
                  " ms; its stderr:\n" + stderr_text());
}

std::string DaemonProcess::socket_path() const {
  return kvpool::socket_path(runtime_dir_, instance_);
}

std::string DaemonProcess::stderr_text() const {
  return stderr_path_.empty() ? std::string() : read_file(stderr_path_);
}

bool DaemonProcess::stderr_gets(const std::string& needle,
                                std::chrono::milliseconds timeout) const {
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    if (stderr_text().find(needle) != std::string::npos) return true;
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(5ms);  // polling a file, not synchronising on time
  }
}

std::vector<std::string> DaemonProcess::shm_files() const {
  std::vector<std::string> out;
  const std::string prefix = "kvpool." + instance_ + ".";
  std::error_code ec;
  for (auto& e : std::filesystem::directory_iterator("/dev/shm", ec)) {
    std::string name = e.path().filename().string();
    if (name.starts_with(prefix)) out.push_back(name);
  }
  return out;
}

void DaemonProcess::spawn(const std::vector<std::string>& extra_args) {
  if (proc_ && proc_->running())
    throw TestError("kvpoold pid " + std::to_string(proc_->pid()) + " is still running");
  ++starts_;
  stderr_path_ = dir_ + "/kvpoold." + std::to_string(starts_) + ".stderr";
  shm::UniqueFd err(::open(stderr_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (!err) throw TestError(errno_text("open " + stderr_path_));
  std::vector<std::string> argv{kvpoold_, "--config", config_path_};
  argv.insert(argv.end(), extra_args.begin(), extra_args.end());
  auto env = child_environment(extra_env_);
  env.push_back("NOTIFY_SOCKET=" + notify_path_);
  if (proc_) proc_->kill_and_reap();
  proc_ = std::make_unique<ChildProcess>();
  proc_->spawn(argv, env, -1, err.get(), err.get());
}

bool DaemonProcess::wait_ready(std::chrono::milliseconds timeout) {
  auto deadline = Clock::now() + timeout;
  const pid_t p = pid();
  std::unique_lock lk(mu_);
  auto ready = [&] {
    auto it = notes_.find(p);
    if (it == notes_.end()) return false;
    for (auto& l : it->second)
      if (l == "READY=1") return true;
    return false;
  };
  while (!ready()) {
    auto now = Clock::now();
    if (now >= deadline) return false;
    lk.unlock();
    bool alive = running();
    lk.lock();
    if (!alive) return ready();
    // Wakes on every notify datagram; the bound only re-checks whether the daemon exited.
    cv_.wait_for(lk, std::min<Clock::duration>(deadline - now, 20ms));
  }
  return true;
}

void DaemonProcess::start(std::chrono::milliseconds ready_timeout) {
  spawn();
  if (!wait_ready(ready_timeout)) {
    std::string how = running() ? "still running" : proc_->wait_exit(1s)->describe();
    proc_->kill_and_reap();
    throw TestError("kvpoold (instance '" + instance_ + "') did not send READY=1 within " +
                    std::to_string(ready_timeout.count()) + " ms (" + how + "); its stderr:\n" +
                    stderr_text());
  }
}

ExitStatus DaemonProcess::stop(std::chrono::milliseconds timeout) {
  kill(SIGTERM);
  auto st = wait_exit(timeout);
  if (!st)
    throw TestError("kvpoold did not exit within " + std::to_string(timeout.count()) +
                    " ms of SIGTERM; its stderr:\n" + stderr_text());
  return *st;
}

void DaemonProcess::restart() {
  if (proc_ && !proc_->wait_exit(10s))
    throw TestError("restart: the previous kvpoold pid " + std::to_string(proc_->pid()) +
                    " has not exited");
  start();
}

std::pair<ExitStatus, std::string> DaemonProcess::run_other(const std::vector<std::string>& args,
                                                            std::chrono::milliseconds timeout) {
  static std::atomic<int> n{0};
  std::string path = dir_ + "/other." + std::to_string(++n) + ".stderr";
  shm::UniqueFd err(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (!err) throw TestError(errno_text("open " + path));
  std::vector<std::string> argv{kvpoold_};
  argv.insert(argv.end(), args.begin(), args.end());
  ChildProcess c;
  c.spawn(argv, child_environment(), -1, err.get(), err.get());
  auto st = c.wait_exit(timeout);
  if (!st) {
    c.kill_and_reap();
    throw TestError("a second kvpoold did not exit within " + std::to_string(timeout.count()) +
                    " ms; its stderr:\n" + read_file(path));
  }
  return {*st, read_file(path)};
}

std::pair<ExitStatus, std::string> DaemonProcess::run_ctl(const std::vector<std::string>& args,
                                                          std::chrono::milliseconds timeout) {
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) throw TestError(errno_text("pipe2"));
  shm::UniqueFd rd(out[0]), wr(out[1]);
  std::vector<std::string> argv{KVPOOLCTL_PATH};
  argv.insert(argv.end(), args.begin(), args.end());
  for (const char* a : {"--instance", instance_.c_str(), "--runtime-dir", runtime_dir_.c_str()})
    argv.emplace_back(a);
  ChildProcess c;
  c.spawn(argv, child_environment(), -1, wr.get(), 2);
  wr.reset();
  const std::string what = "kvpoolctl " + (args.empty() ? std::string() : args.front());
  std::string text = read_all(rd.get(), timeout, what);
  auto st = c.wait_exit(timeout);
  if (!st)
    throw TestError(what + " did not exit within " + std::to_string(timeout.count()) +
                    " ms; its output: " + text);
  return {*st, text};
}

nlohmann::json DaemonProcess::ctl_status() {
  auto [st, text] = run_ctl({"status", "--json"});
  if (!st.exited() || st.code() != 0)
    throw TestError("kvpoolctl status failed (" + st.describe() + "): " + text);
  return nlohmann::json::parse(text);
}

}  // namespace kvpool::testsupport
