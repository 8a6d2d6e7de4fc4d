"""SGLang HiCache storage backend over kvpool (the L3 of HiCache, shared by every process on
the host through kvpoold).

Turn it on (docs/engines/sglang.md)::

    --enable-hierarchical-cache --hicache-storage-backend dynamic \
    --hicache-storage-backend-extra-config '{"backend_name": "kvpool",
        "module_path": "kvpool.integrations.sglang", "class_name": "KvpoolHiCacheStorage",
        "kvpool_instance": "default", "kvpool_pool": "kv"}'

Written against SGLang python/sglang/srt/mem_cache/hicache_storage.py (HiCacheStorage,
HiCacheStorageConfig, STORAGE_BATCH_SIZE = 128) and storage/backend_factory.py (dynamic
backends are built as ``cls(storage_config, kwargs)``), both at
001067fffe33427bee0ed2f007fb7551a1d76b44. The zero-copy v1 path is served: batch_exists (the
length of the stored prefix of pages), batch_get_v1 / batch_set_v1 (pages at the raw pointers
of ``mem_pool_host.get_page_buffer_meta(host_indices)``, one kvpool key per pointer).

A v1 method never returns None and never raises: HiCache's prefetch and backup threads index
or ``all()`` the result, and one TypeError kills the thread for the life of the process. While
kvpoold is down, batch_exists is 0 and every get/set is False.
"""

import logging

from ._store import KeyedStore

log = logging.getLogger("kvpool.integrations.sglang")

try:  # the real base class where SGLang is installed (its factory checks issubclass)
    from sglang.srt.mem_cache.hicache_storage import HiCacheStorage as _Base
except Exception:  # noqa: BLE001 - SGLang absent or broken: a plain object works as well
    _Base = object

_OK = 1


def _sizes(sizes, n):
    if isinstance(sizes, int):
        return [sizes] * n
    return [int(s) for s in sizes]


class KvpoolHiCacheStorage(_Base):
    def __init__(self, storage_config, kwargs=None):
        extra = dict(getattr(storage_config, "extra_config", None) or {})
        model = (getattr(storage_config, "model_name", None) or "").replace("/", "-")
        self._mla = bool(getattr(storage_config, "is_mla_model", False))
        # Ranks hold different slices of a page unless MLA (the same slice everywhere).
        suffix = f"_{model}"
        if not self._mla:
            suffix += f"_{storage_config.tp_rank}_{storage_config.tp_size}"
        if getattr(storage_config, "pp_size", 1) > 1:
            suffix += f"_{storage_config.pp_size}_{storage_config.pp_rank}"
        if getattr(storage_config, "attn_cp_size", 1) > 1:
            suffix += f"_cp{storage_config.attn_cp_rank}_{storage_config.attn_cp_size}"
        self._suffix = suffix
        self._objects = 1 if self._mla else 2  # pointers per page; learnt from the host pool
        self._timeout = float(extra.get("kvpool_timeout", 30.0))
        self._store = KeyedStore(instance=extra.get("kvpool_instance", "default"),
                                 pool=extra.get("kvpool_pool", "kv"),
                                 runtime_dir=extra.get("kvpool_runtime_dir", ""),
                                 key_namespace=extra.get("kvpool_namespace", "sglang"),
                                 retry_interval=float(extra.get("kvpool_retry_interval", 1.0)))
        self.mem_pool_host = None

    def register_mem_pool_host(self, mem_pool_host):
        self.mem_pool_host = mem_pool_host

    def _keys(self, keys, objects):
        if objects == 1:
            return [k + self._suffix for k in keys]
        return [f"{k}{self._suffix}.{j}" for k in keys for j in range(objects)]

    # ---- the v1 zero-copy path -----------------------------------------------------------
    def batch_exists(self, keys, extra_info=None):
        try:
            if not keys:
                return 0
            d = self._store.run("exists_prefix", self._keys(keys, self._objects),
                                timeout=self._timeout)
            return d.prefix // self._objects if d.ok else 0
        except Exception:  # noqa: BLE001 - a miss, never a dead prefetch thread
            log.exception("kvpool: batch_exists failed; reporting a miss")
            return 0

    def _transfer(self, op, keys, host_indices):
        n = len(keys)
        if n == 0:
            return []
        ptrs, sizes = self.mem_pool_host.get_page_buffer_meta(host_indices)
        if len(ptrs) % n:
            log.error("kvpool: %d buffers for %d pages", len(ptrs), n)
            return [False] * n
        objects = len(ptrs) // n
        self._objects = objects
        sizes = _sizes(sizes, len(ptrs))
        buffers = [(int(p), s) for p, s in zip(ptrs, sizes)]
        d = self._store.run(op, self._keys(keys, objects), buffers, timeout=self._timeout)
        res = d.results
        if op == "get":  # a page is loaded when every one of its objects came back whole
            ok = [res[i] == _OK and d.value_sizes[i] == sizes[i] for i in range(len(res))]
        else:
            ok = [r == _OK for r in res]
        return [all(ok[p * objects:(p + 1) * objects]) for p in range(n)]

    def batch_get_v1(self, keys, host_indices, extra_info=None):
        try:
            return self._transfer("get", keys, host_indices)
        except Exception:  # noqa: BLE001
            log.exception("kvpool: batch_get_v1 failed; reporting misses")
            return [False] * len(keys)

    def batch_set_v1(self, keys, host_indices, extra_info=None):
        try:
            return self._transfer("set", keys, host_indices)
        except Exception:  # noqa: BLE001
            log.exception("kvpool: batch_set_v1 failed; reporting failures")
            return [False] * len(keys)

    # ---- the abstract non-zero-copy methods: not served (the v1 path is) ----------------
    def get(self, key, target_location=None, target_sizes=None):
        return None

    def batch_get(self, keys, target_locations=None, target_sizes=None):
        return [None] * len(keys)

    def set(self, key, value=None, target_location=None, target_sizes=None):
        return False

    def batch_set(self, keys, values=None, target_locations=None, target_sizes=None):
        return False

    def exists(self, key):
        return self.batch_exists([key]) == 1

    def clear(self):
        return None

    def get_stats(self):
        return self._store.stats() or None

    def close(self):
        self._store.close()
