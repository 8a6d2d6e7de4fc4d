#!/usr/bin/env python3
"""kvpoold logs to the journal when its stderr is the journal stream: JOURNAL_STREAM names
stderr's device:inode. Each entry then carries its level as PRIORITY= (info 6, warn 4) and
SYSLOG_IDENTIFIER=kvpoold, and MESSAGE= holds no timestamp of ours; nothing goes to stderr.
When JOURNAL_STREAM names another stream (a child whose stderr was redirected), it logs to
stderr with timestamps as before and sends the journal nothing.

The journal is a real datagram socket at /run/systemd/journal/socket (where libsystemd's
sd_journal_send writes), inside a private mount namespace with its own /run: needs root and
unshare(1); exits 77 otherwise.

Usage: journald_test.py KVPOOLD KVPOOLCTL
"""

import os
import re
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from opslib import Daemon, fail, run_checks, wait_until  # noqa: E402

KVPOOLD, KVPOOLCTL = sys.argv[1:3]
JOURNAL = "/run/systemd/journal/socket"

if "--inner" not in sys.argv:
    if os.geteuid() != 0 or subprocess.run(["sh", "-c", "command -v unshare"],
                                           capture_output=True).returncode != 0:
        print("SKIP: a private /run for the fake journal needs root and unshare")
        sys.exit(77)
    if subprocess.run(["unshare", "--mount", "true"], capture_output=True).returncode != 0:
        print("SKIP: unshare --mount is not permitted here")
        sys.exit(77)
    os.execvp("unshare", ["unshare", "--mount", "--propagation", "private", sys.executable,
                          os.path.abspath(__file__), KVPOOLD, KVPOOLCTL, "--inner"])

if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "kvpool-journal", "/run"]).returncode:
    print("SKIP: this container may not mount in a private namespace (no CAP_SYS_ADMIN)")
    sys.exit(77)
os.makedirs(os.path.dirname(JOURNAL))
journal = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
journal.bind(JOURNAL)
journal.setblocking(False)
entries = []


def drain():
    while True:
        try:
            data = journal.recv(65536)
        except BlockingIOError:
            return
        fields = {}
        for line in data.decode(errors="replace").split("\n"):
            if "=" in line:
                k, v = line.split("=", 1)
                fields[k] = v
        entries.append(fields)


def entry(pattern):
    drain()
    return next((e for e in entries if re.search(pattern, e.get("MESSAGE", ""))), None)


state = {}


def start(journal_stream):
    stderr = open(f"/tmp/kvpool-journald-{os.getpid()}-{len(state)}.err", "w+")
    st = os.fstat(stderr.fileno())
    env = dict(os.environ)
    env["JOURNAL_STREAM"] = f"{st.st_dev}:{st.st_ino}" if journal_stream else f"{st.st_dev}:1"
    d = Daemon(KVPOOLD, KVPOOLCTL, env=env, stderr=stderr)
    return d, stderr


def to_journal():
    d, err = start(journal_stream=True)
    state["journal"] = (d, err)
    ready = wait_until(lambda: entry(r"^kvpoold ready: instance '" + d.instance), 20,
                       "the 'kvpoold ready' entry in the journal", lambda: entries)
    if ready.get("PRIORITY") != "6":
        fail(f"info entry has PRIORITY={ready.get('PRIORITY')}, not 6: {ready}")
    if ready.get("SYSLOG_IDENTIFIER") != "kvpoold":
        fail(f"SYSLOG_IDENTIFIER={ready.get('SYSLOG_IDENTIFIER')}: {ready}")
    if re.match(r"\d{4}-\d\d-\d\d", ready["MESSAGE"]):
        fail(f"MESSAGE carries a second timestamp: {ready['MESSAGE']}")
    # A warning: a hello that is not kvpool's is refused with a warn-level line.
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as s:
        s.connect(os.path.join(d.dir, f"{d.instance}.sock"))
        s.send(bytes(80))
        s.settimeout(10)
        s.recv(512)
    warn = wait_until(lambda: entry(r"^refused a client"), 20, "the refusal warning",
                      lambda: entries)
    if warn.get("PRIORITY") != "4":
        fail(f"warn entry has PRIORITY={warn.get('PRIORITY')}, not 4: {warn}")
    d.stop()
    wait_until(lambda: entry(r"^kvpoold stopped"), 20, "'kvpoold stopped'", lambda: entries)
    err.seek(0)
    text = err.read()
    if text.strip():
        fail(f"kvpoold also wrote to stderr while logging to the journal:\n{text}")


def to_stderr():
    d, err = start(journal_stream=False)
    state["stderr"] = (d, err)
    before = len(entries)
    d.stop()
    err.seek(0)
    text = err.read()
    if not re.search(r"^\d{4}-\d\d-\d\dT[\d:.]+ info kvpoold ready", text, re.M):
        fail(f"stderr lacks the timestamped 'kvpoold ready' line:\n{text}")
    drain()
    if len(entries) != before:
        fail(f"journal got entries though stderr is not the journal: {entries[before:]}")


try:
    run_checks([("stderr is the journal: entries with priorities, no timestamps", to_journal),
                ("JOURNAL_STREAM names another stream: stderr as before", to_stderr)])
finally:
    for d, err in state.values():
        d.cleanup()
        err.close()
        os.unlink(err.name)
