"""kvpool: a worker's connection to kvpoold, the host-local KV-cache block manager.

    import kvpool
    client = kvpool.Client.connect("default")
    pool = client.pool("g2")
    block_hashes, seq_hashes = kvpool.hash_tokens(tokens, pool.page_size, salt=0)
    with pool.match_sequence_hashes(seq_hashes) as hit:      # longest known prefix
        ...                                                   # numpy.asarray(hit[i]) reads it

Every call that waits for kvpoold releases the GIL. Errors raise kvpool.Error subclasses
(kvpool.NotEnoughBlocks, kvpool.DaemonGone, ...) with .code (a kvpool.ErrorCode) and the
C++ message. See libclient/python/README.md.
"""

import collections.abc as _abc

from ._kvpool import (  # noqa: F401
    __git_commit__,
    __version__,
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
    ResourceExhausted,
    Timeout,
    Unsupported,
    VersionMismatch,
    hash_tokens,
)

_abc.Sequence.register(ImmutableBlocks)  # isinstance(x, Sequence); len, [i], [a:b], iter

__all__ = [
    "BlockEmpty", "BlockFull", "Client", "ConfigError", "DaemonGone", "DeviceError",
    "Disconnected", "Error", "ErrorCode", "ImmutableBlock", "ImmutableBlocks",
    "IncompleteBlock", "Internal", "InvalidArgument", "InvalidHandle", "InvalidState",
    "IoError", "MutableBlock", "NotEnoughBlocks", "NotFound", "PermissionDenied", "Pool",
    "ProtocolError", "ResourceExhausted", "Timeout", "Unsupported", "VersionMismatch",
    "hash_tokens",
]
