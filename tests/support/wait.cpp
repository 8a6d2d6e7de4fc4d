#include "support/wait.hpp"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

namespace kvpool::testsupport {

int ms_left(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return left.count() < 0 ? 0 : static_cast<int>(left.count());
}

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

void wait_until(const std::function<bool()>& pred, std::chrono::milliseconds timeout,
                const std::string& what, const std::function<std::string()>& detail) {
  auto start = Clock::now();
  auto deadline = start + timeout;
  while (true) {
    if (pred()) return;
    if (Clock::now() >= deadline) {
      std::string msg =
          "timed out after " + std::to_string(timeout.count()) + " ms waiting for " + what;
      if (detail) msg += "; seen: " + detail();
      throw TestError(msg);
    }
    std::this_thread::sleep_for(1ms);  // a poll interval, not a synchronisation
  }
}

std::string errno_text(const std::string& what) { return what + ": " + std::strerror(errno); }

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace kvpool::testsupport
