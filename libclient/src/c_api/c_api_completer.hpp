// A thread that runs completion jobs one after another, in the order they were queued.
//
// The C++ async forms return deferred futures: the wait for kvpoold's answer happens in
// whoever calls get(). A completion-based API (the C ABI's callbacks, Python's asyncio) needs
// someone else to do that wait: this thread. One per client is enough, since kvpoold answers
// one client's requests in order. Header-only so that the Python module can use it too.
//
// Destroying a Completer runs every job already queued, then stops its thread. If the last
// owner is dropped on the thread itself (a callback released the last handle), the thread
// is detached and finishes on its own: its state is shared with it, never freed under it.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

namespace kvpool::c_api {

class Completer {
 public:
  Completer() : state_(std::make_shared<State>()) {
    thread_ = std::thread([s = state_] { run(*s); });
  }
  Completer(const Completer&) = delete;
  Completer& operator=(const Completer&) = delete;
  ~Completer() {
    {
      std::lock_guard<std::mutex> lock(state_->mu);
      state_->stop = true;
    }
    state_->cv.notify_one();
    if (std::this_thread::get_id() == thread_.get_id())
      thread_.detach();
    else
      thread_.join();
  }

  void post(std::function<void()> job) {
    {
      std::lock_guard<std::mutex> lock(state_->mu);
      state_->jobs.push_back(std::move(job));
    }
    state_->cv.notify_one();
  }

 private:
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<std::function<void()>> jobs;
    bool stop = false;
  };

  static void run(State& s) {
    std::unique_lock<std::mutex> lock(s.mu);
    for (;;) {
      s.cv.wait(lock, [&] { return s.stop || !s.jobs.empty(); });
      if (s.jobs.empty()) return;  // stop, and nothing left to run
      auto job = std::move(s.jobs.front());
      s.jobs.pop_front();
      lock.unlock();
      job();
      job = nullptr;  // drop what it captured before taking the lock again
      lock.lock();
    }
  }

  std::shared_ptr<State> state_;
  std::thread thread_;
};

}  // namespace kvpool::c_api
