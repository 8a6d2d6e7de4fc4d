"""vLLM secondary offloading tier over kvpool: blocks of vLLM's CPU (primary) tier are stored
in kvpoold's pool, shared with every vLLM instance on the host.

Turn it on (docs/engines/vllm.md): register the tier from a plugin and name it in the
offloading connector's secondary tiers::

    from vllm.v1.kv_offload.tiering.factory import SecondaryTierFactory
    SecondaryTierFactory.register_tier("kvpool", "kvpool.integrations.vllm", "KvpoolSecondaryTier")

    kv_connector_extra_config: {"secondary_tiers": [{"type": "kvpool", "instance": "default",
                                                     "pool": "kv", "block_bytes": <bytes>}]}

Written against vllm/v1/kv_offload/tiering/base.py at
041410b9b13a5e762e6bfce4a0ce39574def5919 (SecondaryTierManager(offloading_spec,
primary_kv_view, tier_type); lookup(key, req_context) -> True / False / None (retry);
submit_store / submit_load(JobMetadata(job_id, keys, block_ids, is_promotion, req_context));
get_finished() -> [JobResult(job_id, success)]). Keys are vLLM's offload keys (block-hash bytes
and a 4-byte big-endian group index) passed through as bytes. Block i of the primary tier is
``primary_kv_view[i * block_bytes : (i + 1) * block_bytes]`` (how vLLM's file-system tier
addresses it).

Every method returns at once: lookup submits an exists batch and answers None (retry) until its
completion is in; copies run on the batch store's worker thread. While kvpoold is down lookups
are False and jobs finish with success False.
"""

import collections
import logging

from ._store import KeyedStore

log = logging.getLogger("kvpool.integrations.vllm")

try:
    from vllm.v1.kv_offload.tiering.base import JobResult as _JobResult
    from vllm.v1.kv_offload.tiering.base import SecondaryTierManager as _Base
except Exception:  # noqa: BLE001 - vLLM absent: duck-typed
    _Base = object
    _JobResult = collections.namedtuple("JobResult", "job_id success")

_OK = 1


class KvpoolSecondaryTier(_Base):
    def __init__(self, offloading_spec, primary_kv_view, tier_type="kvpool", instance="default",
                 pool="kv", runtime_dir="", block_bytes=None, key_namespace="vllm",
                 retry_interval=1.0, **_ignored):
        if _Base is not object:
            super().__init__(offloading_spec, primary_kv_view, tier_type)
        self._offloading_spec = offloading_spec
        self._primary_kv_view = primary_kv_view
        self.tier_type = tier_type
        view = memoryview(primary_kv_view).cast("B")
        if block_bytes is None:
            block_bytes = getattr(offloading_spec, "block_size_bytes", None)
        if not block_bytes or len(view) % int(block_bytes):
            raise ValueError(f"kvpool tier: block_bytes {block_bytes} does not divide the "
                             f"primary tier's {len(view)} bytes (set it in the tier config)")
        self._view = view
        self._block_bytes = int(block_bytes)
        self._store = KeyedStore(instance=instance, pool=pool, runtime_dir=runtime_dir,
                                 key_namespace=key_namespace, retry_interval=retry_interval)
        self._lookups = {}      # key -> batch id in flight
        self._known = {}        # key -> True/False answered, taken by the next lookup
        self._jobs = {}         # batch id -> job id
        self._finished = []

    def _block(self, block_id):
        off = int(block_id) * self._block_bytes
        return self._view[off:off + self._block_bytes]

    def _poll(self):
        for d in self._store.drain():
            job = self._jobs.pop(d.id, None)
            if job is not None:
                self._finished.append(_JobResult(job_id=job, success=d.ok and all(
                    r == _OK for r in d.results)))
                continue
            for key, bid in list(self._lookups.items()):
                if bid == d.id:
                    del self._lookups[key]
                    self._known[key] = d.ok and d.results[0] == _OK

    def lookup(self, key, req_context=None):
        key = bytes(key)
        self._poll()
        if key in self._known:
            return self._known.pop(key)
        if key not in self._lookups:
            if not self._store.available():
                return False  # kvpoold down: a miss now, not a retry forever
            self._lookups[key] = self._store.submit("exists", [key])
        return None

    def _submit(self, op, job_metadata):
        keys = [bytes(k) for k in job_metadata.keys]
        buffers = [self._block(b) for b in job_metadata.block_ids]
        self._jobs[self._store.submit(op, keys, buffers)] = job_metadata.job_id

    def submit_store(self, job_metadata):
        self._submit("set", job_metadata)

    def submit_load(self, job_metadata):
        self._submit("get", job_metadata)

    def get_finished(self):
        self._poll()
        out, self._finished = self._finished, []
        return out

    # Names other vLLM revisions of the interface use.
    get_finished_jobs = get_finished

    def touch(self, keys, req_context=None):
        return None

    def request_finished(self, req_context=None):
        return None

    def shutdown(self):
        self._store.close()
