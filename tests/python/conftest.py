"""A real kvpoold for the Python binding tests, started like tests/multiproc/harness.cpp does:
a JSON config with a unique instance and a fresh runtime dir, NOTIFY_SOCKET to learn READY=1,
and every wait bounded by a deadline on a condition (never a sleep as synchronisation).

Binary paths come from ctest's ENVIRONMENT: KVPOOLD, KVPOOLCTL.
"""

import itertools
import json
import os
import queue
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
_counter = itertools.count(1)


def binary(env_name):
    path = os.environ.get(env_name)
    if not path or not os.access(path, os.X_OK):
        pytest.fail(f"${env_name} must name the built binary (ctest sets it); got {path!r}")
    return path


def wait_until(pred, timeout, what, detail=None):
    """Polls pred() until it is true; fails the test at the deadline, saying what was seen."""
    deadline = time.monotonic() + timeout
    while True:
        if pred():
            return
        if time.monotonic() >= deadline:
            seen = f"; seen: {detail()}" if detail else ""
            pytest.fail(f"timed out after {timeout} s waiting for {what}{seen}")
        time.sleep(0.002)  # a poll interval, not a synchronisation


def host_pool(name="g", blocks=64, page_size=4, inner_dim=16, dtype_bytes=2, kind=None):
    layout = {"num_layers": 2, "outer_dim": 2, "page_size": page_size, "inner_dim": inner_dim,
              "dtype_bytes": dtype_bytes, "alignment": 64}
    if kind:
        layout["kind"] = kind
    pool = {"name": name, "num_blocks": blocks, "layout": layout}
    # The same tests on pools of another hash scheme (ctest's python_*_dynamo_router).
    if os.environ.get("KVPOOL_TEST_HASH_SCHEME"):
        pool["hash_scheme"] = os.environ["KVPOOL_TEST_HASH_SCHEME"]
    return pool


class Daemon:
    """kvpoold on instance "py<pid>-<n>" in a temp runtime dir; stop() or the fixture ends it."""

    def __init__(self, pools=None, poll_us=20, supervise=False):
        # supervise: `kvpoold --supervise`, which keeps the segments across a kill -9 of
        # its child and starts the next one (kill_child()).
        self.supervise = supervise
        self.dir = tempfile.mkdtemp(prefix="kvpool-py-")
        self.instance = f"py{os.getpid()}-{next(_counter)}"
        self.runtime_dir = self.dir
        config = {"instance": self.instance, "runtime_dir": self.runtime_dir, "max_clients": 16,
                  "uid_share_percent": 100, "poll_us": poll_us, "log_level": "info",
                  "pools": pools or [host_pool()]}
        self.config_path = os.path.join(self.dir, "kvpoold.json")
        with open(self.config_path, "w") as f:
            json.dump(config, f)
        self.stderr_path = os.path.join(self.dir, "kvpoold.stderr")
        self.proc = None
        self.start()

    def start(self):
        notify_path = os.path.join(self.dir, "notify")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.bind(notify_path)
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("NOTIFY_SOCKET", "RUNTIME_DIRECTORY", "WATCHDOG_", "LISTEN_"))}
        env["NOTIFY_SOCKET"] = notify_path
        with open(self.stderr_path, "ab") as err:
            args = [binary("KVPOOLD"), "--config", self.config_path]
            self.proc = subprocess.Popen(args + (["--supervise"] if self.supervise else []),
                                         env=env, stdout=err, stderr=err)
        try:
            deadline = time.monotonic() + 10
            while True:
                left = deadline - time.monotonic()
                if left <= 0 or self.proc.poll() is not None:
                    pytest.fail(f"kvpoold did not send READY=1 (exit {self.proc.poll()}); "
                                f"stderr:\n{self.stderr_text()}")
                sock.settimeout(min(left, 0.1))  # re-checks whether kvpoold exited
                try:
                    msg = sock.recv(4096).decode()
                except socket.timeout:
                    continue
                if "READY=1" in msg.split("\n"):
                    return
        finally:
            sock.close()
            os.unlink(notify_path)

    def stderr_text(self):
        with open(self.stderr_path, errors="replace") as f:
            return f.read()

    def connect(self, **kw):
        import kvpool
        return kvpool.Client.connect(self.instance, runtime_dir=self.runtime_dir,
                                     connect_timeout=10.0, poll_us=20, **kw)

    def ctl(self, *args):
        out = subprocess.run([binary("KVPOOLCTL"), *args, "--instance", self.instance,
                              "--runtime-dir", self.runtime_dir, "--json"],
                             capture_output=True, text=True, timeout=30)
        if out.returncode != 0:
            pytest.fail(f"kvpoolctl {' '.join(args)} failed: {out.stderr}")
        return json.loads(out.stdout)

    def status(self):
        return self.ctl("status")

    def pool_status(self, name="g"):
        return next(p for p in self.status()["pools"] if p["name"] == name)

    def worker_env(self):
        env = dict(os.environ)
        env["KVPOOL_INSTANCE"] = self.instance
        env["KVPOOL_RUNTIME_DIR"] = self.runtime_dir
        return env

    def kill_child(self):
        """kill -9 of the supervised kvpoold (not the supervisor); returns its epoch."""
        st = self.status()
        os.kill(st["daemon_pid"], signal.SIGKILL)
        return st["epoch"]

    def kill(self, sig=signal.SIGKILL):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(timeout=30)

    def stop(self):
        self.kill(signal.SIGTERM)
        # A daemon killed by a test leaves its segments behind.
        for name in os.listdir("/dev/shm"):
            if name.startswith(f"kvpool.{self.instance}."):
                try:
                    os.unlink(os.path.join("/dev/shm", name))
                except FileNotFoundError:
                    pass
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def daemon():
    d = Daemon()
    yield d
    d.stop()


@pytest.fixture
def daemon_factory():
    started = []

    def make(**kw):
        d = Daemon(**kw)
        started.append(d)
        return d

    yield make
    for d in started:
        d.stop()


class Worker:
    """tests/python/worker.py as a child process, talking in lines of text over pipes. A
    reader thread queues its stdout, so every read is bounded by a timeout."""

    def __init__(self, daemon, *args):
        self.proc = subprocess.Popen([sys.executable, os.path.join(HERE, "worker.py"), *args],
                                     env=daemon.worker_env(), stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.lines = queue.Queue()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def stderr(self):
        self.proc.kill()
        return self.proc.stderr.read()

    def expect(self, prefix, timeout=30):
        """The worker's next line, which must start with prefix; returns the rest."""
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            pytest.fail(f"worker said nothing within {timeout} s; stderr: {self.stderr()}")
        if line is None or not line.startswith(prefix):
            pytest.fail(f"worker: expected {prefix!r}, got {line!r}; stderr: {self.stderr()}")
        return line[len(prefix):].strip()

    def send(self, line):
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def wait(self, timeout=30):
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"worker did not exit within {timeout} s; stderr: {self.stderr()}")

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            f.close()


@pytest.fixture
def workers():
    started = []

    def make(daemon, *args):
        w = Worker(daemon, *args)
        started.append(w)
        return w

    yield make
    for w in started:
        w.close()
