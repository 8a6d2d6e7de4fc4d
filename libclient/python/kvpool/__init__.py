"""kvpool: a worker's connection to kvpoold, the host-local KV-cache block manager.

    import kvpool
    client = kvpool.Client.connect("default")
    pool = client.pool("g2")
    block_hashes, seq_hashes = pool.hash_tokens(tokens, salt=0)  # as the pool hashes
    with pool.match_sequence_hashes(seq_hashes) as hit:      # longest known prefix
        ...                                                   # numpy.asarray(hit[i]) reads it

Every call that waits for kvpoold releases the GIL. Errors raise kvpool.Error subclasses
(kvpool.NotEnoughBlocks, kvpool.DaemonGone, ...) with .code (a kvpool.ErrorCode) and the
C++ message. See docs/python.md.
"""

import asyncio as _asyncio
import collections.abc as _abc
import concurrent.futures as _futures
import threading as _threading

from ._kvpool import (  # noqa: F401
    __git_commit__,
    __version__,
    BatchCompletion,
    BatchStore,
    batch_store_block_bytes,
    BlockEmpty,
    BlockFull,
    Client,
    ConfigError,
    DaemonGone,
    DeviceError,
    Disconnected,
    Error,
    ErrorCode,
    ImmutableBlock,
    ImmutableBlocks,
    IncompleteBlock,
    Internal,
    InvalidArgument,
    InvalidHandle,
    InvalidState,
    IoError,
    MutableBlock,
    NotEnoughBlocks,
    NotFound,
    PermissionDenied,
    Pool,
    ProtocolError,
    QuotaExceeded,
    DaemonUnresponsive,
    ChecksumMismatch,
    ResourceExhausted,
    Timeout,
    Unsupported,
    VersionMismatch,
    hash_tokens,
)

_abc.Sequence.register(ImmutableBlocks)  # isinstance(x, Sequence); len, [i], [a:b], iter

# ---- asyncio ---------------------------------------------------------------------------------
# Each *_async call sends its request to kvpoold at once (the client's async path: requests
# pipeline), and returns an awaitable whose answer is collected on a waiter thread, with the
# GIL released, so the event loop never waits for kvpoold. Waiter threads are shared by all
# clients of the process and started on first use.
_waiters = None
_waiters_lock = _threading.Lock()


def _waiter_pool():
    global _waiters
    with _waiters_lock:
        if _waiters is None:
            _waiters = _futures.ThreadPoolExecutor(max_workers=8, thread_name_prefix="kvpool-wait")
        return _waiters


async def _collect(pending):
    return await _asyncio.get_running_loop().run_in_executor(_waiter_pool(), pending.wait)


def _allocate_blocks_async(self, count):
    """Sends an allocate of `count` blocks now; await the result: a list of MutableBlock."""
    return _collect(self._allocate_blocks_send(count))


def _register_blocks_async(self, blocks, send_tokens=False):
    """Sends a register now (consuming the blocks, as register_blocks); await ImmutableBlocks."""
    return _collect(self._register_blocks_send(blocks, send_tokens))


def _match_sequence_hashes_async(self, hashes, peers=False, deadline_ms=500, holder="",
                                 onboard=False):
    """Sends a match now; await the longest known prefix as ImmutableBlocks (peers=True:
    continued from another host; onboard=True: from the pool's disk tier; as
    match_sequence_hashes)."""
    return _collect(self._match_sequence_hashes_send(hashes, peers, deadline_ms, holder, onboard))


Pool.allocate_blocks_async = _allocate_blocks_async
Pool.register_blocks_async = _register_blocks_async
Pool.match_sequence_hashes_async = _match_sequence_hashes_async

__all__ = [
    "BlockEmpty", "BlockFull", "Client", "ConfigError", "DaemonGone", "DeviceError",
    "Disconnected", "Error", "ErrorCode", "ImmutableBlock", "ImmutableBlocks",
    "IncompleteBlock", "Internal", "InvalidArgument", "InvalidHandle", "InvalidState",
    "IoError", "MutableBlock", "NotEnoughBlocks", "NotFound", "PermissionDenied", "Pool",
    "ProtocolError", "QuotaExceeded", "DaemonUnresponsive", "ChecksumMismatch",
    "ResourceExhausted", "Timeout", "Unsupported", "VersionMismatch",
    "hash_tokens", "BatchStore", "BatchCompletion", "batch_store_block_bytes",
]
