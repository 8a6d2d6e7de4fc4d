// Logging set-up of kvpool's long-running programs (kvpoold, kvpool-events,
// kvpool-exporter): to the journal when systemd connected stderr to it, else to stderr.
#pragma once

#include <string>

namespace kvpool {

// Whether stderr is the journal: systemd sets JOURNAL_STREAM=<dev>:<inode> of the stream it
// connected, and it counts only while stderr is still that stream (a child whose stderr
// was redirected inherits the variable but not the stream).
bool stderr_is_journal();

// Makes `name` the default spdlog logger at `level` ("info", ...). Under the journal
// (stderr_is_journal()) it logs through spdlog's systemd_sink: one journal entry per line
// with the level as PRIORITY= and SYSLOG_IDENTIFIER=<name>, the message without our own
// timestamp (the journal keeps its own). Otherwise to stderr, timestamped, as before.
// Returns "journal" or "stderr" (for the start-up line).
std::string setup_service_log(const std::string& name, const std::string& level);

}  // namespace kvpool
