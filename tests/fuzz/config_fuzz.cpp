// libFuzzer target: kvpoold's configuration parser (daemon::parse_config) on arbitrary text.
// It must never crash, throw or hang; an error is kConfigError with a one-line message (no
// control characters: it goes to logs and terminals); a config it accepts passes
// validate_config and survives config_to_json -> parse_config unchanged.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "daemon/config.hpp"

using namespace kvpool;

namespace {

[[noreturn]] void die(const char* what, const std::string& detail) {
  std::fprintf(stderr, "config_fuzz: %s: %s\n", what, detail.c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  Result<daemon::Config> parsed = daemon::parse_config(text);
  if (!parsed) {
    const Status& st = parsed.status();
    if (st.code() != ErrorCode::kConfigError) die("not a config error", st.to_string());
    if (st.message().empty()) die("empty error message", text);
    for (char ch : st.message()) {
      const auto c = static_cast<unsigned char>(ch);
      if (c < 0x20 || c == 0x7f) die("control character in the error message", st.message());
    }
    return 0;
  }
  const daemon::Config& config = *parsed;
  if (Status v = daemon::validate_config(config); !v.is_ok())
    die("accepted config fails validate_config", v.to_string());
  const std::string json = daemon::config_to_json(config);
  Result<daemon::Config> again = daemon::parse_config(json);
  if (!again) die("config_to_json output does not parse", again.status().to_string() + "\n" + json);
  if (!(*again == config)) die("config does not round-trip", json);
  return 0;
}
