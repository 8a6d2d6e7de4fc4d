// Test support: the one error type, and waiting with deadlines. Nothing in tests/support
// synchronises by sleeping: every wait is on a descriptor or a condition with a deadline,
// and a missed deadline throws TestError saying what was awaited (GoogleTest reports an
// exception thrown in a test body as that test's failure, with the message).
#pragma once

#include <chrono>
#include <functional>
#include <stdexcept>
#include <string>

namespace kvpool::testsupport {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

class TestError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Milliseconds left until `deadline` (0 when past), for poll().
int ms_left(Clock::time_point deadline);
double ms_since(Clock::time_point t);

// Polls `pred` (with a short pause between polls) until it holds; at the deadline throws
// TestError "timed out after N ms waiting for <what>" plus `detail()` when given (say what
// was seen instead).
void wait_until(const std::function<bool()>& pred, std::chrono::milliseconds timeout,
                const std::string& what, const std::function<std::string()>& detail = {});

// "what: <strerror(errno)>".
std::string errno_text(const std::string& what);
// The whole file ("" when it cannot be read).
std::string read_file(const std::string& path);

}  // namespace kvpool::testsupport
