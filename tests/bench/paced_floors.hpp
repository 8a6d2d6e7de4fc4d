// The floors of kvpool_paced_bench: what one request/answer round trip between two
// processes costs on this machine with no pool work at all, only the wake-ups. One server
// process parks until a client rings, answers at once, and parks again; each client rings
// and parks until answered. Paced like the backends (the caller sleeps between calls), the
// server is parked for the same gap, so what the machine charges to wake an idle core (and
// a parked process) is in the floor too. Up to kMaxClients clients share one server, as
// kvpoold's clients share one engine: a shared doorbell in, one answer word per client out.
//   futex:   the doorbell and the answers are futex words in a shared mapping
//   eventfd: the doorbell is one eventfd, each client's answer its own eventfd
//   pipe:    the doorbell is one pipe, each client's answer its own pipe: a byte written to
//            a pipe wakes its reader with the kernel's sync wake-up (pipe_write ->
//            wake_up_interruptible_sync_poll), which may run the reader on the writer's
//            warm core as the writer goes to sleep; futex and eventfd wake-ups are not sync
#pragma once

#include <sys/types.h>

#include <array>

namespace kvpool::bench {

class FloorServer {
 public:
  enum class Kind { kFutex, kEventfd, kPipe };
  static constexpr int kMaxClients = 8;

  // Maps the shared words and forks the server. Before the process starts any thread.
  explicit FloorServer(Kind kind);
  ~FloorServer();  // stops the server (in the process that made it)
  FloorServer(const FloorServer&) = delete;
  FloorServer& operator=(const FloorServer&) = delete;

  const char* name() const {
    return kind_ == Kind::kFutex     ? "futex-floor"
           : kind_ == Kind::kEventfd ? "eventfd-floor"
                                     : "pipe-floor";
  }
  pid_t pid() const { return pid_; }
  // One request and its answer for client `slot` (0..kMaxClients-1, one process per slot),
  // in this process or any forked after the constructor.
  void round_trip(int slot);

 private:
  struct Shared;
  [[noreturn]] void serve();

  Kind kind_;
  Shared* shared_ = nullptr;
  // eventfd or pipe: clients -> server, and server -> client i (pipes: read end, write end).
  int doorbell_fd_ = -1;
  int doorbell_wr_ = -1;
  std::array<int, kMaxClients> answer_fd_;
  std::array<int, kMaxClients> answer_wr_;
  pid_t pid_ = -1;
  pid_t owner_ = -1;  // the process that forked the server, the only one that stops it
};

}  // namespace kvpool::bench
