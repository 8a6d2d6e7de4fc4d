"""KeyedStore: a kvpool.BatchStore an engine can call from any thread, come what may.

While kvpoold runs it forwards batches to a kvpool.BatchStore. While it does not (never
started, killed, restarting), every batch completes at once as a failure (all keys missing),
and a new connection is tried at most every ``retry_interval`` seconds: an attempt is one
connect to a Unix socket that fails at once when nobody listens. Nothing here raises on the
engine's thread for a kvpoold problem.

Completion ids are this object's own (a new BatchStore after a reconnect restarts its ids).
``event_fd()`` is one fixed eventfd for the object's life: it is dup2()ed onto each store's
eventfd, and the failures made here are posted on it too.
"""

import collections
import logging
import os
import threading
import time

import kvpool

log = logging.getLogger("kvpool.integrations")

# Codes that mean the connection is gone: drop the store and reconnect later.
_GONE = {int(kvpool.ErrorCode.DaemonGone), int(kvpool.ErrorCode.Disconnected),
         int(kvpool.ErrorCode.DaemonUnresponsive)}
_OK = 1  # kvpool KeyResult.kOk

Done = collections.namedtuple("Done", "id ok message results prefix value_sizes")


class KeyedStore:
    def __init__(self, instance="default", pool="kv", runtime_dir="", key_namespace=b"",
                 max_key_bytes=448, retry_interval=1.0, connect_timeout=0.5, priority=0):
        if isinstance(key_namespace, str):
            key_namespace = key_namespace.encode()
        self._args = dict(instance=instance, pool=pool, runtime_dir=runtime_dir,
                          key_namespace=key_namespace, max_key_bytes=max_key_bytes,
                          connect_timeout=connect_timeout, priority=priority)
        self._retry_interval = retry_interval
        self._lock = threading.RLock()
        self._efd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._client = None
        self._store = None
        self._retry_at = 0.0
        self._next_id = 0
        self._pending = {}  # store batch id -> (our id, key count)
        self._failed = []   # Done made here, not yet drained
        self._closed = False
        self._warned = False
        with self._lock:
            self._open_locked()

    # ---- connection ---------------------------------------------------------------------
    def _open_locked(self):
        a = self._args
        try:
            client = kvpool.Client.connect(a["instance"], runtime_dir=a["runtime_dir"],
                                           connect_timeout=a["connect_timeout"], reattach=False)
            store = kvpool.BatchStore(client, a["pool"], key_namespace=a["key_namespace"],
                                      max_key_bytes=a["max_key_bytes"], priority=a["priority"])
        except kvpool.Error as e:
            self._retry_at = time.monotonic() + self._retry_interval
            if not self._warned:
                log.warning("kvpool: no store (%s); every lookup is a miss until kvpoold "
                            "answers (retried every %.1f s)", e, self._retry_interval)
                self._warned = True
            return None
        os.dup2(store.event_fd(), self._efd)  # one fd for the engine, whatever store is current
        self._client, self._store = client, store
        if self._warned:
            log.warning("kvpool: connected to kvpoold instance '%s'", a["instance"])
            self._warned = False
        return store

    def _usable_locked(self):
        if self._closed:
            return None
        if self._store is None and time.monotonic() >= self._retry_at:
            self._open_locked()
        return self._store

    def _drop_locked(self, why):
        store, self._store, self._client = self._store, None, None
        self._retry_at = time.monotonic() + self._retry_interval
        if store is not None:
            log.warning("kvpool: store lost (%s); misses until kvpoold is back", why)
            for sid, n in self._pending.values():
                self._fail_locked(sid, n, why)
            self._pending.clear()
            store.close()

    def _fail_locked(self, sid, n, why):
        self._failed.append(Done(sid, False, why, [0] * n, 0, [0] * n))
        os.eventfd_write(self._efd, 1)

    # ---- batches ------------------------------------------------------------------------
    @property
    def connected(self):
        return self._store is not None

    def available(self):
        """Whether a store is open now (tries to reconnect when a retry is due)."""
        with self._lock:
            return self._usable_locked() is not None

    def event_fd(self):
        return self._efd

    def value_capacity(self):
        with self._lock:
            s = self._usable_locked()
            return s.value_capacity if s is not None else 0

    def submit(self, op, keys, buffers=None):
        """Queues a batch; returns its id. Never raises for a kvpoold problem."""
        with self._lock:
            self._next_id += 1
            sid = self._next_id
            store = self._usable_locked()
            if store is None:
                self._fail_locked(sid, len(keys), "kvpoold is not reachable")
                return sid
            try:
                bid = store.submit(op, keys, buffers)
            except kvpool.Error as e:
                if int(e.code) in _GONE or isinstance(e, kvpool.InvalidState):
                    self._drop_locked(str(e))
                self._fail_locked(sid, len(keys), str(e))
                return sid
            self._pending[bid] = (sid, len(keys))
            return sid

    def drain(self):
        """Every completion ready now (Done tuples); resets event_fd()."""
        with self._lock:
            out, self._failed = self._failed, []
            store = self._store
            if store is None:
                try:
                    os.eventfd_read(self._efd)
                except BlockingIOError:
                    pass
                return out
            gone = None
            for c in store.drain():
                sid, n = self._pending.pop(c.id, (None, 0))
                if sid is None:
                    continue
                out.append(Done(sid, c.ok, c.message, list(c.results), c.prefix,
                                list(c.value_sizes)))
                if c.code in _GONE:
                    gone = c.message
            if gone is not None:
                self._drop_locked(gone)
            return out

    def run(self, op, keys, buffers=None, timeout=30.0):
        """Submits and waits for this batch alone (for engines whose calls return results)."""
        with self._lock:
            store = self._usable_locked()
            if store is None:
                return Done(0, False, "kvpoold is not reachable", [0] * len(keys), 0,
                            [0] * len(keys))
            try:
                bid = store.submit(op, keys, buffers)
            except kvpool.Error as e:
                if int(e.code) in _GONE or isinstance(e, kvpool.InvalidState):
                    self._drop_locked(str(e))
                return Done(0, False, str(e), [0] * len(keys), 0, [0] * len(keys))
        try:
            c = store.wait(bid, timeout)
        except kvpool.Error as e:  # Timeout, or the store closed under us
            return Done(bid, False, str(e), [0] * len(keys), 0, [0] * len(keys))
        if c.code in _GONE:
            with self._lock:
                if self._store is store:
                    self._drop_locked(c.message)
        return Done(bid, c.ok, c.message, list(c.results), c.prefix, list(c.value_sizes))

    def stats(self):
        with self._lock:
            return self._store.stats() if self._store is not None else {}

    def close(self):
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._store is not None:
                self._store.close()
            self._store = self._client = None
            os.close(self._efd)
