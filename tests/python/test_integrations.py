"""The engine backends (kvpool.integrations.*) driven as their engines drive them, against a
real kvpoold, with real shared-memory buffers standing in for each engine's host memory.

Each test makes the engine's calls in the engine's order with the engine's argument types, as
of the pinned sources each module's docstring cites:
- LMCache: lmcache/v1/distributed/l2_adapters/native_connector_l2_adapter.py
  @ 0b43a45563fe5c25dc80ac9f8be16d3f20d86b22 (NativeConnectorL2Adapter: string keys from
  _object_key_to_string, ctypes-backed byte memoryviews, select.poll on event_fd, then
  drain_completions -> (future_id, ok, error, bools)); native_plugin_l2_adapter.py
  @ 68c638a6a8e86d9ec0867ff51fe445b4b3e75503 (cls(**adapter_params), required methods).
- SGLang: python/sglang/srt/mem_cache/hicache_storage.py and storage/backend_factory.py
  @ 001067fffe33427bee0ed2f007fb7551a1d76b44 (cls(storage_config, kwargs),
  register_mem_pool_host, batch_exists -> int prefix, batch_get_v1 / batch_set_v1(keys,
  host_indices) -> [bool], keys from get_hash_str: chained SHA-256 hex); the host pool is a
  ctypes buffer with a page_first get_page_buffer_meta (K and V pointer per page), as SGLang's
  own third-party backend tests build it.
- vLLM: vllm/v1/kv_offload/tiering/base.py @ 041410b9b13a5e762e6bfce4a0ce39574def5919
  (SecondaryTierManager(offloading_spec, primary_kv_view, tier_type), lookup -> True/False/None,
  submit_store / submit_load(JobMetadata), get_finished -> [JobResult]); keys are block-hash
  bytes + 4-byte big-endian group index.
- Dynamo KVBM: lib/bindings/kvbm/python/kvbm/sglang_integration/{provider,factory}.py
  @ ecd1df0d31437922a0deaaa7ee2bd87e34361ad2 (zero-argument factory, attach(HostRegionRequest,
  cuda_device), the 512-byte and whole-block checks, activate / abort / close).
Where the engine itself is importable, test_real_engine_* run the same backends through the
engine's own base class and factory; here they are skipped, saying so.
"""

import ctypes
import dataclasses
import hashlib
import json
import os
import select
import signal
import subprocess
import sys
import time
from types import SimpleNamespace
from typing import Any, Collection, Optional

import numpy as np
import pytest

import kvpool
from kvpool.integrations import kvbm as kvbm_backend
from kvpool.integrations import lmcache as lmcache_backend
from kvpool.integrations import sglang as sglang_backend
from kvpool.integrations import vllm as vllm_backend

OBJ = 4096  # bytes of one K or V object of a page (SGLang), of one LMCache chunk, of a vLLM block


def byte_pool(name="kv", blocks=64, value=OBJ):
    block = kvpool.batch_store_block_bytes(448, value, 16)
    return {"name": name, "num_blocks": blocks,
            "layout": {"num_layers": 1, "outer_dim": 1, "page_size": 1, "inner_dim": block,
                       "dtype_bytes": 1, "alignment": 64}}


@pytest.fixture
def kv(daemon_factory):
    return daemon_factory(pools=[byte_pool()])


def fill(addr, n, seed):
    data = np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8).tobytes()
    ctypes.memmove(addr, data, n)
    return data


# ---- LMCache -------------------------------------------------------------------------------

def lmcache_key(model, kv_rank, group, chunk_hash, salt=None):
    """_object_key_to_string: model@kv_rank:08x@group:x@chunk_hash.hex()[@salt]."""
    base = f"{model}@{kv_rank:08x}@{group:x}@{chunk_hash.hex()}"
    return f"{base}@{salt}" if salt else base


def lmcache_views(n, size):
    """MemoryObj.byte_array: a memoryview of a ctypes c_ubyte array (itemsize 1)."""
    arrays = [(ctypes.c_ubyte * size)() for _ in range(n)]
    return arrays, [memoryview(a) for a in arrays]


def lmcache_wait(conn, fid, timeout=20):
    """The adapter's demux loop: poll(event_fd, 500 ms), drain_completions, route by id."""
    poller = select.poll()
    poller.register(conn.event_fd(), select.POLLIN)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not poller.poll(500):
            continue
        for (future_id, ok, error, bools) in conn.drain_completions():
            assert isinstance(future_id, int) and isinstance(ok, bool) and isinstance(error, str)
            if int(future_id) == fid:
                return ok, error, bools
    pytest.fail(f"no completion for future {fid} within {timeout} s")


def make_lmcache(kv, **extra):
    params = json.loads(json.dumps({"instance": kv.instance, "runtime_dir": kv.runtime_dir,
                                    "pool": "kv", **extra}))  # adapter_params come from JSON
    conn = lmcache_backend.KvpoolL2Connector(**params)
    for m in ("event_fd", "submit_batch_get", "submit_batch_set", "submit_batch_exists",
              "drain_completions", "close", "submit_batch_delete"):
        assert callable(getattr(conn, m, None)), m
    return conn


def test_lmcache_store_lookup_load_delete(kv):
    conn = make_lmcache(kv)
    keys = [lmcache_key("Qwen/Qwen3-8B", 0, 0, hashlib.sha256(bytes([i])).digest())
            for i in range(3)]
    src_arrays, src = lmcache_views(3, OBJ)
    datas = [fill(ctypes.addressof(a), OBJ, i) for i, a in enumerate(src_arrays)]
    ok, err, bools = lmcache_wait(conn, int(conn.submit_batch_set(keys, src)))
    assert ok and err == "" and bools == [True, True, True]
    ok, _, bools = lmcache_wait(conn, int(conn.submit_batch_exists(keys + [keys[0] + "@salt"])))
    assert ok and bools == [True, True, True, False]
    dst_arrays, dst = lmcache_views(3, OBJ)
    ok, _, bools = lmcache_wait(conn, int(conn.submit_batch_get(keys, dst)))
    assert ok and bools == [True, True, True]
    assert [bytes(a) for a in dst_arrays] == datas
    ok, _, bools = lmcache_wait(conn, int(conn.submit_batch_delete(keys[:1])))
    assert ok and bools == [True]
    _, _, bools = lmcache_wait(conn, int(conn.submit_batch_exists(keys)))
    assert bools == [False, True, True]
    conn.close()


def test_lmcache_without_kvpoold_misses_at_once(kv):
    conn = make_lmcache(kv)
    kv.kill(signal.SIGKILL)
    keys = [lmcache_key("m", 0, 0, b"\x01" * 16)]
    _, views = lmcache_views(1, OBJ)
    for submit in (lambda: conn.submit_batch_exists(keys),
                   lambda: conn.submit_batch_get(keys, views),
                   lambda: conn.submit_batch_set(keys, views)):
        ok, err, bools = lmcache_wait(conn, int(submit()))
        assert not ok and err and bools == [False]
    conn.close()
    # Never up at all: the constructor does not raise either.
    never = lmcache_backend.KvpoolL2Connector(instance="kvpool-test-nobody",
                                              runtime_dir=kv.runtime_dir)
    ok, _, bools = lmcache_wait(never, int(never.submit_batch_exists(keys)))
    assert not ok and bools == [False]
    never.close()


# ---- SGLang --------------------------------------------------------------------------------

def get_hash_str(token_ids, prior_hash=None):
    """SGLang's page key: SHA-256 over the prior page's digest and the tokens (u32 LE)."""
    h = hashlib.sha256()
    if prior_hash:
        h.update(bytes.fromhex(prior_hash))
    for t in token_ids:
        h.update(t.to_bytes(4, byteorder="little", signed=False))
    return h.hexdigest()


def page_keys(tokens, page_size, prior=None):
    keys = []
    for i in range(0, len(tokens), page_size):
        prior = get_hash_str(tokens[i:i + page_size], prior)
        keys.append(prior)
    return keys


class CtypesHostPool:
    """A page_first MHA host pool in a ctypes buffer: per page a K and a V object of
    element_size bytes, get_page_buffer_meta -> (pointers, element_size)."""

    layout = "page_first"

    def __init__(self, num_pages=16, page_size=4, element_size=OBJ):
        self.page_size = page_size
        self.element_size = element_size
        self._buffer = (ctypes.c_char * (num_pages * 2 * element_size))()
        self.base = ctypes.addressof(self._buffer)

    def get_page_buffer_meta(self, indices):
        ptrs = []
        for start in range(0, len(indices), self.page_size):
            page = int(indices[start]) // self.page_size
            k = self.base + page * 2 * self.element_size
            ptrs += [k, k + self.element_size]
        return ptrs, self.element_size

    def page(self, slot):
        off = slot * 2 * self.element_size
        return ctypes.string_at(self.base + off, 2 * self.element_size)

    def fill(self, slot, seed):
        return fill(self.base + slot * 2 * self.element_size, 2 * self.element_size, seed)


def host_indices(slots, page_size):
    """What HiCache passes: the token slots of whole pages (a torch tensor where torch is)."""
    idx = [s * page_size + j for s in slots for j in range(page_size)]
    try:
        import torch
        return torch.tensor(idx, dtype=torch.int64)
    except ImportError:
        return np.array(idx, dtype=np.int64)


@dataclasses.dataclass
class HiCacheStorageConfig:  # the fields of SGLang's dataclass at the pinned commit
    tp_rank: int
    tp_size: int
    pp_rank: int
    pp_size: int
    attn_cp_rank: int
    attn_cp_size: int
    is_mla_model: bool
    enable_storage_metrics: bool
    is_page_first_layout: bool
    model_name: Optional[str]
    dp_rank: int = 0
    dp_size: int = 1
    tp_lcm_size: Optional[int] = None
    should_split_heads: bool = False
    extra_config: Optional[dict] = None


def sglang_config(kv, **extra):
    return HiCacheStorageConfig(0, 1, 0, 1, 0, 1, False, False, True, "Qwen/Qwen3-8B",
                                extra_config={"backend_name": "kvpool",
                                              "module_path": "kvpool.integrations.sglang",
                                              "class_name": "KvpoolHiCacheStorage",
                                              "kvpool_instance": kv.instance,
                                              "kvpool_runtime_dir": kv.runtime_dir,
                                              "kvpool_pool": "kv", **extra})


def make_sglang(kv, **extra):
    cfg = sglang_config(kv, **extra)
    backend = sglang_backend.KvpoolHiCacheStorage(cfg, {})  # backend_class(storage_config, kwargs)
    return backend


def test_sglang_backup_then_prefetch(kv):
    page = 4
    writer = make_sglang(kv)
    host = CtypesHostPool(page_size=page)
    writer.register_mem_pool_host(host)
    tokens = list(range(1000, 1000 + 3 * page))
    keys = page_keys(tokens, page)
    datas = [host.fill(slot, seed) for slot, seed in zip([2, 5, 7], [11, 12, 13])]
    # Backup (write-through): pages not in storage yet are written.
    assert writer.batch_exists(keys) == 0
    assert writer.batch_set_v1(keys, host_indices([2, 5, 7], page)) == [True, True, True]

    # Another scheduler (its own host pool) prefetches: storage hit query, then the get.
    reader = make_sglang(kv)
    host2 = CtypesHostPool(page_size=page)
    reader.register_mem_pool_host(host2)
    unknown = get_hash_str([1, 2, 3, 4], keys[-1])
    assert reader.batch_exists(keys + [unknown]) == 3
    assert reader.batch_exists([unknown] + keys) == 0
    got = reader.batch_get_v1(keys, host_indices([0, 1, 3], page))
    assert got == [True, True, True]
    assert [host2.page(s) for s in (0, 1, 3)] == datas
    assert reader.batch_get_v1([unknown], host_indices([4], page)) == [False]
    # Another tp rank keys its own slice: no hit on rank 0's pages.
    other = sglang_backend.KvpoolHiCacheStorage(
        dataclasses.replace(sglang_config(kv), tp_rank=1, tp_size=2), {})
    assert other.batch_exists(keys) == 0


def test_sglang_without_kvpoold_returns_misses_never_none(kv):
    page = 4
    backend = make_sglang(kv)
    host = CtypesHostPool(page_size=page)
    backend.register_mem_pool_host(host)
    keys = page_keys(list(range(8)), page)
    assert backend.batch_set_v1(keys, host_indices([0, 1], page)) == [True, True]
    kv.kill(signal.SIGKILL)
    n = backend.batch_exists(keys)
    got = backend.batch_get_v1(keys, host_indices([2, 3], page))
    put = backend.batch_set_v1(keys, host_indices([2, 3], page))
    assert n == 0 and isinstance(n, int)
    assert got == [False, False] and put == [False, False]
    assert all(backend.batch_get_v1(keys, host_indices([2, 3], page)) == [False, False]
               for _ in range(50))  # later calls too: no None, no exception


# ---- vLLM ----------------------------------------------------------------------------------

@dataclasses.dataclass
class JobMetadata:  # vllm/v1/kv_offload/tiering/base.py @ the pinned commit
    job_id: int
    keys: Collection[bytes]
    block_ids: np.ndarray
    is_promotion: bool
    req_context: Any


def offload_key(block_hash: bytes, group: int) -> bytes:
    return block_hash + group.to_bytes(4, "big")


def vllm_finished(tier, job_id, timeout=20):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for r in tier.get_finished():
            if r.job_id == job_id:
                return r.success
        time.sleep(0.001)  # the scheduler's step cadence
    pytest.fail(f"job {job_id} did not finish within {timeout} s")


def vllm_lookup(tier, key, timeout=20):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r = tier.lookup(key, None)
        if r is not None:
            return r
        time.sleep(0.001)
    pytest.fail("lookup stayed None (retry) for 20 s")


def make_vllm(kv, blocks=8):
    primary = bytearray(blocks * OBJ)  # the CPU tier's KV cache, as one flat view
    tier = vllm_backend.KvpoolSecondaryTier(SimpleNamespace(), memoryview(primary), "kvpool",
                                            instance=kv.instance, runtime_dir=kv.runtime_dir,
                                            pool="kv", block_bytes=OBJ)
    return tier, primary


def test_vllm_cascade_store_then_promotion_load(kv):
    tier, primary = make_vllm(kv)
    keys = [offload_key(hashlib.sha256(bytes([i])).digest(), 0) for i in range(3)]
    for b in (1, 4, 6):
        primary[b * OBJ:(b + 1) * OBJ] = np.random.default_rng(b).integers(
            0, 256, OBJ, dtype=np.uint8).tobytes()
    stored = [bytes(primary[b * OBJ:(b + 1) * OBJ]) for b in (1, 4, 6)]
    tier.submit_store(JobMetadata(1, keys, np.array([1, 4, 6]), False, None))
    assert vllm_finished(tier, 1)
    assert [vllm_lookup(tier, k) for k in keys] == [True, True, True]
    assert vllm_lookup(tier, offload_key(keys[0][:32], 1)) is False  # another group
    # A second instance (its own CPU tier) promotes them into other slots.
    tier2, primary2 = make_vllm(kv)
    tier2.submit_load(JobMetadata(7, keys, np.array([0, 2, 3]), True, None))
    assert vllm_finished(tier2, 7)
    assert [bytes(primary2[b * OBJ:(b + 1) * OBJ]) for b in (0, 2, 3)] == stored
    tier2.submit_load(JobMetadata(8, [offload_key(b"\x00" * 32, 0)], np.array([5]), True, None))
    assert vllm_finished(tier2, 8) is False
    tier.shutdown()
    tier2.shutdown()


def test_vllm_without_kvpoold_lookups_miss_jobs_fail(kv):
    tier, _ = make_vllm(kv)
    key = offload_key(b"\x07" * 32, 0)
    kv.kill(signal.SIGKILL)
    tier.submit_load(JobMetadata(3, [key], np.array([0]), True, None))
    assert vllm_finished(tier, 3) is False
    assert vllm_lookup(tier, key) is False
    tier.shutdown()


# ---- Dynamo KVBM ---------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class HostRegionRequest:  # kvbm/sglang_integration/provider.py @ the pinned commit
    requested_bytes: int
    bytes_per_block: int
    alignment: int
    manager_namespace: bytes
    tp_rank: int
    dp_rank: Optional[int]
    attn_dp_rank: int
    attn_cp_rank: int


def g2_pool(blocks=16, bpb=OBJ):
    return {"name": "g2", "num_blocks": blocks,
            "layout": {"num_layers": 1, "outer_dim": 1, "page_size": 1, "inner_dim": bpb,
                       "dtype_bytes": 1, "alignment": 512}}


def kvbm_attach(monkeypatch, d, requested):
    monkeypatch.setenv("KVPOOL_INSTANCE", d.instance)
    monkeypatch.setenv("KVPOOL_RUNTIME_DIR", d.runtime_dir)
    monkeypatch.setenv("KVPOOL_KVBM_POOL", "g2")
    module, factory = "kvpool.integrations.kvbm:create_provider".rsplit(":", 1)
    provider = getattr(__import__(module, fromlist=[factory]), factory)()
    region = provider.attach(HostRegionRequest(requested, OBJ, 512, b"ns" * 16, 0, None, 0, 0),
                             0)
    ptr, nbytes = region.data_ptr(), region.nbytes()
    # The factory's own checks before it builds its core.
    assert ptr > 0 and ptr % 512 == 0 and nbytes >= OBJ and nbytes % OBJ == 0
    return region, ptr, nbytes


def test_kvbm_region_is_kvpoold_memory(daemon_factory, monkeypatch):
    d = daemon_factory(pools=[g2_pool()])
    region, ptr, nbytes = kvbm_attach(monkeypatch, d, 10 * OBJ + 100)
    assert region.shared and nbytes == 10 * OBJ
    region.activate()
    fill(ptr, nbytes, 3)  # KVBM writes its G2 blocks there
    assert d.pool_status("g2")["mutable_blocks"] == 10
    region.close()
    deadline = time.monotonic() + 20
    while d.pool_status("g2")["mutable_blocks"] != 0 and time.monotonic() < deadline:
        time.sleep(0.002)
    assert d.pool_status("g2")["mutable_blocks"] == 0


def test_kvbm_without_kvpoold_gets_private_memory(daemon_factory, monkeypatch):
    d = daemon_factory(pools=[g2_pool()])
    d.kill(signal.SIGKILL)
    region, ptr, nbytes = kvbm_attach(monkeypatch, d, 4 * OBJ)
    assert not region.shared and nbytes == 4 * OBJ
    region.activate()
    fill(ptr, nbytes, 4)
    region.close()


# ---- two engines of different kinds, one kvpoold -------------------------------------------

SGLANG_WRITER = r"""
import ctypes, json, sys
sys.path.insert(0, sys.argv[2])
import test_integrations as t
args = json.loads(sys.argv[1])
kv = type("KV", (), args)()
backend = t.make_sglang(kv, kvpool_namespace="shared")
host = t.CtypesHostPool(page_size=4)
backend.register_mem_pool_host(host)
data = host.fill(3, 99)
ok = backend.batch_set_v1([args["key"]], t.host_indices([3], 4))
print(json.dumps({"ok": ok, "k": data[:t.OBJ].hex(), "v": data[t.OBJ:].hex()}))
"""


def test_sglang_process_and_lmcache_process_share_blocks(kv):
    key = get_hash_str(list(range(4)))
    here = os.path.dirname(os.path.abspath(__file__))
    out = subprocess.run([sys.executable, "-c", SGLANG_WRITER,
                          json.dumps({"instance": kv.instance, "runtime_dir": kv.runtime_dir,
                                      "key": key}), here],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    wrote = json.loads(out.stdout)
    assert wrote["ok"] == [True]
    # This process is an LMCache server configured with the same namespace: the keys agree
    # (SGLang's object key: page hash, model and rank suffix, object index).
    conn = make_lmcache(kv, key_namespace="shared")
    keys = [f"{key}_Qwen-Qwen3-8B_0_1.0", f"{key}_Qwen-Qwen3-8B_0_1.1"]
    arrays, views = lmcache_views(2, OBJ)
    ok, _, bools = lmcache_wait(conn, int(conn.submit_batch_get(keys, views)))
    assert ok and bools == [True, True]
    assert bytes(arrays[0]).hex() == wrote["k"] and bytes(arrays[1]).hex() == wrote["v"]
    conn.close()


# ---- the engines' own classes, where installed ---------------------------------------------

def test_real_engine_sglang_factory(kv):
    pytest.importorskip("sglang.srt.mem_cache.storage.backend_factory",
                        reason="SGLang is not installed here: its factory path is not run")
    from sglang.srt.mem_cache.storage.backend_factory import StorageBackendFactory
    backend = StorageBackendFactory.create_backend("dynamic", sglang_config(kv), None)
    assert isinstance(backend, sglang_backend.KvpoolHiCacheStorage)


def test_real_engine_lmcache_plugin(kv):
    pytest.importorskip("lmcache.v1.distributed.l2_adapters.native_plugin_l2_adapter",
                        reason="LMCache is not installed here: its adapter is not run")
    from lmcache.v1.distributed.l2_adapters.native_plugin_l2_adapter import (
        NativePluginL2AdapterConfig, _create_native_plugin_l2_adapter)
    cfg = NativePluginL2AdapterConfig.from_dict({
        "module_path": "kvpool.integrations.lmcache", "class_name": "KvpoolL2Connector",
        "adapter_params": {"instance": kv.instance, "runtime_dir": kv.runtime_dir}})
    _create_native_plugin_l2_adapter(cfg).close()


def test_real_engine_vllm_tier(kv):
    pytest.importorskip("vllm.v1.kv_offload.tiering.base",
                        reason="vLLM is not installed here: its SecondaryTierManager is not run")
    from vllm.v1.kv_offload.tiering.base import SecondaryTierManager
    assert issubclass(vllm_backend.KvpoolSecondaryTier, SecondaryTierManager)


def test_real_engine_kvbm_provider(daemon_factory, monkeypatch):
    pytest.importorskip("kvbm.sglang_integration.provider",
                        reason="Dynamo KVBM is not installed here: its provider loader is not run")
    from kvbm.sglang_integration import provider as p
    monkeypatch.setenv("DYN_KVBM_HOST_MEMORY_PROVIDER", "kvpool.integrations.kvbm:create_provider")
    assert isinstance(p.get_host_memory_provider(), kvbm_backend.KvpoolHostMemoryProvider)
