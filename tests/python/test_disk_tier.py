"""The disk tier through the bindings (docs/disk-tier.md): onboard=True continues a match
from the pool's slot file past host memory, after a restart that emptied host memory."""

import asyncio
import os
import shutil
import signal
import struct
import tempfile

import numpy as np
import pytest

from conftest import host_pool, wait_until

SLOT_MAGIC = 0x31544F4C53505654  # "TVPSLOT1" (daemon/disk/slot_format.hpp)
SECTOR = 4096


def disk_pool(path):
    pool = host_pool(page_size=128)  # 128 x 16 x 2 bytes: 4 KiB regions, O_DIRECT-able
    pool["disk"] = {"path": path, "num_blocks": 64}
    return pool


def hashes_on_disk(path):
    """Sequence hashes whose slot header is written (the daemon verifies the rest on read)."""
    found = set()
    try:
        with open(path, "rb") as f:
            _magic, _version, _scheme, slot_bytes, num_slots = struct.unpack(
                "<QIIQQ", f.read(32))
            for s in range(num_slots):
                f.seek(SECTOR + s * slot_bytes)
                magic, _gen, slot, seq = struct.unpack("<QQQQ", f.read(32))
                if magic == SLOT_MAGIC and slot == s:
                    found.add(seq)
    except (OSError, struct.error):
        pass
    return found


@pytest.fixture
def disk_dir():
    d = tempfile.mkdtemp(prefix="kvpool-py-disk-", dir="/var/tmp")  # not a tmpfs
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_onboard_reads_back_what_the_previous_daemon_wrote(daemon_factory, disk_dir):
    path = os.path.join(disk_dir, "g.slots")
    d = daemon_factory(pools=[disk_pool(path)])
    pool = d.connect().pool("g")
    blocks = pool.allocate_blocks(3)
    parent = None
    expected = []
    for i, b in enumerate(blocks):
        b.init_sequence(5, parent)
        b.add_tokens([1000 + i * pool.page_size + k for k in range(pool.page_size)])
        b.commit()
        parent = b.sequence_hash
        arr = np.asarray(b)
        arr[...] = (np.arange(arr.size, dtype=np.int64) * (i + 3) % 30000).astype(
            np.int16).reshape(arr.shape)
        expected.append(arr.copy())
        del arr
    hashes = [b.sequence_hash for b in blocks]
    pool.register_blocks(blocks).release()
    wait_until(lambda: set(hashes) <= hashes_on_disk(path), 20, "the blocks in the slot file",
               d.stderr_text)

    d.kill(signal.SIGTERM)  # without --keep-cache: the next start has empty host memory
    d.start()
    pool = d.connect().pool("g")
    assert len(pool.match_sequence_hashes(hashes)) == 0  # a plain match never reads the disk
    hit = pool.match_sequence_hashes(hashes + [12345], onboard=True)
    assert hit.sequence_hashes == hashes
    for block, want in zip(hit, expected):
        assert np.array_equal(np.asarray(block), want)
    hit.release()

    async def onboard_async():
        return await pool.match_sequence_hashes_async(hashes, onboard=True)

    assert asyncio.run(onboard_async()).sequence_hashes == hashes


def test_peer_match_reads_the_disk_tier_first(daemon_factory, disk_dir):
    """peers=True (with onboard=True or not) looks at this host's disk tier before any peer,
    as C++'s match with PeerFetchOptions does; without kvpool-peer on the host that is all."""
    path = os.path.join(disk_dir, "g.slots")
    d = daemon_factory(pools=[disk_pool(path)])
    pool = d.connect().pool("g")
    blocks = pool.allocate_blocks(2)
    parent = None
    for i, b in enumerate(blocks):
        b.init_sequence(6, parent)
        b.add_tokens([2000 + i * pool.page_size + k for k in range(pool.page_size)])
        b.commit()
        parent = b.sequence_hash
        arr = np.asarray(b)
        arr[...] = i + 7
        del arr
    hashes = [b.sequence_hash for b in blocks]
    pool.register_blocks(blocks).release()
    wait_until(lambda: set(hashes) <= hashes_on_disk(path), 20, "the blocks in the slot file",
               d.stderr_text)

    for onboard in (True, False):
        d.kill(signal.SIGTERM)  # the next start has empty host memory; the slots stay
        d.start()
        pool = d.connect().pool("g")
        assert len(pool.match_sequence_hashes(hashes)) == 0
        hit = pool.match_sequence_hashes(hashes + [999], peers=True, onboard=onboard,
                                         deadline_ms=200)
        assert hit.sequence_hashes == hashes
        for i, block in enumerate(hit):
            assert (np.asarray(block) == i + 7).all()
        hit.release()

    async def peer_async():
        return await pool.match_sequence_hashes_async(hashes, peers=True, onboard=True)

    assert asyncio.run(peer_async()).sequence_hashes == hashes
