#!/usr/bin/env python3
"""`kvpoolctl top` on a terminal: run in a pseudo-terminal against a real kvpoold while a
real worker makes traffic; it must clear the screen once, redraw in place (cursor home) on
every refresh, show the pool row and a non-zero requests/s once traffic flows, and quit on
`q` with exit status 0 and the terminal settings restored. Piped (not a terminal), it prints
plain blocks and exits after --iterations.

Usage: top_test.py KVPOOLD KVPOOLCTL DEMO_WORKER
"""

import json
import os
import pty
import re
import select
import subprocess
import sys
import termios
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from opslib import Daemon, fail, run_checks, wait_until  # noqa: E402

KVPOOLD, KVPOOLCTL, WORKER = sys.argv[1:4]
state = {"out": b""}


def start():
    state["daemon"] = Daemon(KVPOOLD, KVPOOLCTL)


def on_a_terminal():
    d = state["daemon"]
    master, slave = pty.openpty()
    before = termios.tcgetattr(slave)
    proc = subprocess.Popen([KVPOOLCTL, "top", "--interval", "0.2", *d.view_args()],
                            stdin=slave, stdout=slave, stderr=slave, close_fds=True)
    state["top"] = proc
    worker = subprocess.Popen([WORKER, *d.view_args(), "--seconds", "3", "--seed", "1"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    state["worker"] = worker

    def read_some():
        r, _, _ = select.select([master], [], [], 0.05)
        if r:
            try:
                state["out"] += os.read(master, 65536)
            except OSError:
                pass
        return state["out"]

    def busy_frame():
        text = read_some().decode(errors="replace")
        # The last complete frame with traffic: requests/s above zero, and the pool row.
        return (re.search(r"requests/s [1-9]\d*", text) and re.search(r"\ng2 +\d+", text)
                and text.count("\x1b[H") >= 3)

    wait_until(busy_frame, 20, "three frames, one with requests/s > 0 and the pool g2",
               lambda: state["out"][-600:])
    out = state["out"].decode(errors="replace")
    if out.count("\x1b[2J") != 1:
        fail(f"expected one clear-screen, saw {out.count(chr(27) + '[2J')}")
    if out.count("\x1b[H") < 3:
        fail(f"expected a redraw per refresh, saw {out.count(chr(27) + '[H')} cursor-homes")
    # Every line is erased to its end before the newline: a line shorter than the one
    # drawn there before leaves none of its characters behind (issue 27).
    unerased = re.findall(r"(?<!\x1b\[K)\n", out.replace("\r\n", "\n"))  # the pty adds \r
    if unerased or "\x1b[K" not in out:
        fail(f"{len(unerased)} line(s) end without erase-to-end-of-line: {out[-600:]!r}")
    if "(q quits)" not in out or "hit%" not in out:
        fail(f"frame lacks the hint or the hit% column: {out[-600:]!r}")
    os.write(master, b"q")
    try:
        rc = proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        fail("kvpoolctl top did not quit on q")
    if rc != 0:
        fail(f"kvpoolctl top exited {rc} on q: {read_some()[-400:]!r}")
    if termios.tcgetattr(slave) != before:
        fail("kvpoolctl top left the terminal in raw mode")
    worker.wait(timeout=30)
    os.close(master)
    os.close(slave)


def piped():
    r = subprocess.run([KVPOOLCTL, "top", "--interval", "0.1", "--iterations", "3",
                        *state["daemon"].view_args()], capture_output=True, text=True,
                       stdin=subprocess.DEVNULL, timeout=30)
    if r.returncode != 0:
        fail(f"piped top exited {r.returncode}: {r.stderr}")
    if "\x1b" in r.stdout:
        fail("piped top wrote terminal escapes")
    if r.stdout.count("requests/s") != 3:
        fail(f"expected 3 blocks, got:\n{r.stdout}")


def piped_json():
    r = subprocess.run([KVPOOLCTL, "top", "--json", "--interval", "0.1", "--iterations", "2",
                        *state["daemon"].view_args()], capture_output=True, text=True,
                       stdin=subprocess.DEVNULL, timeout=30)
    if r.returncode != 0:
        fail(f"top --json exited {r.returncode}: {r.stderr}")
    lines = r.stdout.splitlines()
    if len(lines) != 2:
        fail(f"top --json: expected 2 JSON lines, got:\n{r.stdout}")
    frames = [json.loads(line) for line in lines]
    if frames[0]["requests_per_s"] is not None or frames[1]["requests_per_s"] is None:
        fail(f"top --json: rates are null on the first line only: {frames}")
    if [p["name"] for p in frames[1]["pools"]] != ["g2"] or "free" not in frames[1]["pools"][0]:
        fail(f"top --json: pool rows: {frames[1]}")


try:
    run_checks([("kvpoold", start),
                ("on a pseudo-terminal: redraws in place, shows traffic, q quits", on_a_terminal),
                ("piped: plain text, --iterations", piped),
                ("--json: one JSON object per interval", piped_json)])
finally:
    for k in ("top", "worker"):
        if k in state and state[k].poll() is None:
            state[k].kill()
            state[k].wait()
    if "daemon" in state:
        state["daemon"].cleanup()
