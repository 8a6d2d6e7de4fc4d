#include "kvpool/service/log.hpp"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cinttypes>
#include <cstdio>
#include <cstdlib>

#ifdef KVPOOL_HAVE_SYSTEMD
#include <spdlog/sinks/systemd_sink.h>
#endif

namespace kvpool {

bool stderr_is_journal() {
  const char* js = std::getenv("JOURNAL_STREAM");
  if (js == nullptr) return false;
  uintmax_t dev = 0, ino = 0;
  if (std::sscanf(js, "%ju:%ju", &dev, &ino) != 2) return false;
  struct stat st {};
  if (fstat(STDERR_FILENO, &st) != 0) return false;
  return static_cast<uintmax_t>(st.st_dev) == dev && static_cast<uintmax_t>(st.st_ino) == ino;
}

std::string setup_service_log(const std::string& name, const std::string& level) {
  std::string where = "stderr";
#ifdef KVPOOL_HAVE_SYSTEMD
  if (stderr_is_journal()) {
    // enable_formatting=false: MESSAGE= is the text alone; time and level travel as fields.
    spdlog::set_default_logger(spdlog::systemd_logger_mt(name, name, false));
    where = "journal";
  }
#endif
  if (where == "stderr") {
    spdlog::set_default_logger(spdlog::stderr_color_mt(name));
    spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %v");
  }
  spdlog::set_level(spdlog::level::from_str(level));
  return where;
}

}  // namespace kvpool
