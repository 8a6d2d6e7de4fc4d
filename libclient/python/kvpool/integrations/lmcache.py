"""LMCache multi-process L2 adapter over kvpool: the ``native_plugin`` connector client.

Turn it on (docs/engines/lmcache.md)::

    --l2-adapter '{"type": "native_plugin",
                   "module_path": "kvpool.integrations.lmcache",
                   "class_name": "KvpoolL2Connector",
                   "adapter_params": {"instance": "default", "pool": "kv"}}'

Written against LMCache's NativeConnectorL2Adapter contract (lmcache/v1/distributed/
l2_adapters/native_connector_l2_adapter.py at 0b43a45563fe5c25dc80ac9f8be16d3f20d86b22, and
native_plugin_l2_adapter.py at 68c638a6a8e86d9ec0867ff51fe445b4b3e75503): the adapter builds
the client with ``**adapter_params``, checks for event_fd / submit_batch_get / submit_batch_set /
submit_batch_exists / drain_completions / close (and the optional submit_batch_delete), submits
string keys ``model@kv_rank@group@chunk_hash[@salt]`` with byte memoryviews, polls event_fd from
its demux thread and takes ``(future_id, ok, error, per-key bools)`` from drain_completions.

While kvpoold is down every batch completes at once with ok False and every key False: lookups
miss, loads load nothing, stores report failure. Nothing raises into LMCache's threads.
"""

from ._store import KeyedStore

_OK = 1


class KvpoolL2Connector:
    """The native connector client LMCache's native_plugin adapter wraps."""

    def __init__(self, instance="default", pool="kv", runtime_dir="", key_namespace="lmcache",
                 max_key_bytes=448, retry_interval=1.0, priority=0):
        self._store = KeyedStore(instance=instance, pool=pool, runtime_dir=runtime_dir,
                                 key_namespace=key_namespace, max_key_bytes=max_key_bytes,
                                 retry_interval=retry_interval, priority=priority)

    def event_fd(self):
        return self._store.event_fd()

    def submit_batch_get(self, keys, memoryviews):
        """Copies each key's value into its memoryview (written in place); returns an id."""
        return self._store.submit("get", list(keys), list(memoryviews))

    def submit_batch_set(self, keys, memoryviews):
        return self._store.submit("set", list(keys), list(memoryviews))

    def submit_batch_exists(self, keys):
        return self._store.submit("exists", list(keys))

    def submit_batch_delete(self, keys):
        return self._store.submit("delete", list(keys))

    def drain_completions(self):
        """[(future_id, ok, error, [bool per key])] of every batch done since the last call."""
        out = []
        for d in self._store.drain():
            out.append((d.id, d.ok, "" if d.ok else d.message, [r == _OK for r in d.results]))
        return out

    def close(self):
        self._store.close()
