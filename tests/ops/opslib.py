"""What the operator tests (tests/ops) share: a real kvpoold in a temp runtime dir, and
waits bounded by a deadline on a condition (never a sleep as synchronisation).

Binary paths come from the command line of each test (tests/ops/CMakeLists.txt).
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time


class Failure(Exception):
    pass


def fail(msg):
    raise Failure(msg)


def wait_until(pred, timeout, what, detail=None):
    """Polls pred() until it returns a true value (returned); Failure at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() >= deadline:
            seen = f"; seen: {detail()}" if detail else ""
            fail(f"timed out after {timeout} s waiting for {what}{seen}")
        time.sleep(0.01)  # a poll interval, not a synchronisation


class Daemon:
    """kvpoold with the default config on a unique instance in a fresh runtime dir."""

    def __init__(self, kvpoold, kvpoolctl, config=None, env=None, stderr=None):
        self.kvpoold, self.kvpoolctl = kvpoold, kvpoolctl
        self.dir = tempfile.mkdtemp(prefix="kvpool-ops-")
        self.instance = f"ops{os.getpid()}x{int(time.monotonic() * 1000) % 100000}"
        self.log_path = os.path.join(self.dir, "kvpoold.log")
        args = [kvpoold, "--instance", self.instance, "--runtime-dir", self.dir]
        if config is not None:
            path = os.path.join(self.dir, "kvpoold.json")
            with open(path, "w") as f:
                json.dump(config, f)
            args += ["--config", path]
        self.log = open(self.log_path, "w") if stderr is None else None
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL,
                                     stderr=stderr if stderr is not None else self.log,
                                     env=env, stdin=subprocess.DEVNULL)
        wait_until(self._up, 30, "kvpoold to answer kvpoolctl status", self.log_text)

    def _up(self):
        if self.proc.poll() is not None:
            fail(f"kvpoold exited {self.proc.returncode} at start: {self.log_text()}")
        return self.ctl("status", check=False).returncode == 0

    def view_args(self):
        return ["--instance", self.instance, "--runtime-dir", self.dir]

    def ctl(self, *args, check=True):
        r = subprocess.run([self.kvpoolctl, *args, *self.view_args()], capture_output=True,
                           text=True, stdin=subprocess.DEVNULL, timeout=30)
        if check and r.returncode != 0:
            fail(f"kvpoolctl {' '.join(args)} failed ({r.returncode}): {r.stderr}")
        return r

    def log_text(self):
        try:
            with open(self.log_path) as f:
                return f.read()
        except OSError:
            return ""

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.log:
            self.log.close()
            self.log = None

    def cleanup(self):
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


def run_checks(checks):
    """Runs each (name, fn) in order; prints ok/FAIL; exits 1 on the first failure."""
    for name, fn in checks:
        try:
            fn()
        except Failure as e:
            print(f"FAIL: {name}: {e}", file=sys.stderr)
            sys.exit(1)
        print(f"ok: {name}")
