"""Dynamo KVBM host-memory provider over kvpool: KVBM's G2 (pinned host) region is a run of
blocks of a kvpoold host pool, so kvpoold owns the memory (accounted, quota'd, reclaimed at
once when the engine dies) instead of each engine mapping its own.

Turn it on (docs/engines/kvbm.md)::

    DYN_KVBM_HOST_MEMORY_PROVIDER=kvpool.integrations.kvbm:create_provider
    KVPOOL_KVBM_POOL=g2 KVPOOL_INSTANCE=default

Written against Dynamo lib/bindings/kvbm/python/kvbm/sglang_integration/provider.py and
factory.py at ecd1df0d31437922a0deaaa7ee2bd87e34361ad2: the factory loads ``module:factory``,
calls it with no arguments, then ``provider.attach(HostRegionRequest(requested_bytes,
bytes_per_block, alignment=512, manager_namespace, tp_rank, dp_rank, attn_dp_rank,
attn_cp_rank), cuda_device)``; checks ``data_ptr() % 512 == 0`` and ``nbytes()`` a positive
multiple of bytes_per_block; calls ``activate()`` once its core is built, ``abort()`` when that
fails, ``close()`` at shutdown. Stdlib only (the provider protocol is).

The pool must be FullyContiguous with blocks of exactly bytes_per_block (no padding) so that a
run of consecutive blocks is one region. While kvpoold is down (or the pool cannot give a
contiguous run) the provider hands out private anonymous memory and says so in the log: the
engine runs, unshared.
"""

import logging
import mmap
import os

import kvpool

log = logging.getLogger("kvpool.integrations.kvbm")


class _PrivateRegion:
    """Anonymous memory: what KVBM gets when kvpoold cannot give it a region."""

    shared = False

    def __init__(self, nbytes):
        self._map = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        import ctypes
        self._ptr = ctypes.addressof(ctypes.c_char.from_buffer(self._map))
        self._nbytes = nbytes

    def data_ptr(self):
        return self._ptr

    def nbytes(self):
        return self._nbytes

    def activate(self):
        return None

    def abort(self):
        self.close()

    def close(self):
        if self._map is not None:
            self._ptr = 0
            try:
                self._map.close()
            except BufferError:  # a view still exported: the mapping goes with the process
                pass
            self._map = None


class KvpoolHostRegion:
    """Consecutive mutable blocks of a kvpoold host pool, held by this process."""

    shared = True

    def __init__(self, client, blocks, ptr, nbytes):
        self._client = client
        self._blocks = blocks
        self._ptr = ptr
        self._nbytes = nbytes
        self.active = False

    def data_ptr(self):
        return self._ptr

    def nbytes(self):
        return self._nbytes

    def activate(self):
        self.active = True

    def abort(self):
        self.close()

    def close(self):
        for b in self._blocks:  # back to kvpoold's free list
            b.release()
        self._blocks = []
        self._ptr = 0
        self._client = None


def _address(block):
    import ctypes
    view = memoryview(block).cast("B")
    return ctypes.addressof(ctypes.c_char.from_buffer(view)), view


class KvpoolHostMemoryProvider:
    def __init__(self, instance=None, pool=None, runtime_dir=None, connect_timeout=0.5):
        self.instance = instance or os.environ.get("KVPOOL_INSTANCE", "default")
        self.pool = pool or os.environ.get("KVPOOL_KVBM_POOL", "g2")
        self.runtime_dir = runtime_dir if runtime_dir is not None else \
            os.environ.get("KVPOOL_RUNTIME_DIR", "")
        self.connect_timeout = connect_timeout

    def attach(self, request, cuda_device):
        bpb = int(request.bytes_per_block)
        want = int(request.requested_bytes) // bpb
        try:
            return self._attach_pool(bpb, want, int(request.alignment))
        except (kvpool.Error, ValueError) as e:
            log.warning("kvpool: KVBM gets private host memory, unshared (%s)", e)
            return _PrivateRegion(max(want, 1) * bpb)

    def _attach_pool(self, bpb, want, alignment):
        client = kvpool.Client.connect(self.instance, runtime_dir=self.runtime_dir,
                                       connect_timeout=self.connect_timeout)
        pool = client.pool(self.pool)
        layout = pool.layout
        if pool.is_device or layout.get("kind") not in ("FullyContiguous", "fully_contiguous"):
            raise ValueError(f"pool '{self.pool}' is not a FullyContiguous host pool")
        n = min(want, int(layout["num_blocks"]))
        if n <= 0:
            raise ValueError(f"pool '{self.pool}' cannot hold one block of {bpb} bytes")
        blocks = pool.allocate_blocks(n)
        try:
            ptrs = [_address(b)[0] for b in blocks]
            if any(b.nbytes != bpb for b in blocks):
                raise ValueError(f"pool '{self.pool}' has blocks of {blocks[0].nbytes} bytes, "
                                 f"KVBM asks for {bpb}")
            order = sorted(range(n), key=lambda i: ptrs[i])
            base = ptrs[order[0]]
            if any(ptrs[order[i]] != base + i * bpb for i in range(n)):
                raise ValueError(f"the {n} blocks kvpoold gave are not one contiguous run "
                                 f"(pool '{self.pool}' is in use, or padded)")
            if base % alignment:
                raise ValueError(f"pool '{self.pool}' blocks are not {alignment}-byte aligned")
        except Exception:
            for b in blocks:
                b.release()
            raise
        log.info("kvpool: KVBM region of %d blocks of %d bytes from pool '%s'", n, bpb, self.pool)
        return KvpoolHostRegion(client, blocks, base, n * bpb)


def create_provider():
    """The zero-argument factory DYN_KVBM_HOST_MEMORY_PROVIDER names."""
    return KvpoolHostMemoryProvider()
