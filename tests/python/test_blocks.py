"""Blocks through the bindings: token API, memory views, release, the GIL."""

import asyncio
import ctypes
import gc
import json
import signal
import subprocess
import threading

import numpy as np
import pytest

import kvpool
from conftest import binary, host_pool, wait_until


PyBUF_SIMPLE, PyBUF_WRITABLE = 0, 1


def get_buffer(obj, flags):
    """PyObject_GetBuffer(obj, flags) and PyBuffer_Release: what a C consumer would ask."""
    view = ctypes.create_string_buffer(256)  # > sizeof(Py_buffer)
    ctypes.pythonapi.PyObject_GetBuffer(ctypes.py_object(obj), view, ctypes.c_int(flags))
    ctypes.pythonapi.PyBuffer_Release(view)


def filled(pool, n, salt=0, first_token=1):
    """n committed mutable blocks of one sequence."""
    blocks = pool.allocate_blocks(n)
    parent = None
    for i, b in enumerate(blocks):
        b.init_sequence(salt, parent)
        b.add_tokens([first_token + i * pool.page_size + k for k in range(pool.page_size)])
        b.commit()
        parent = b.sequence_hash
    return blocks


def test_allocate_fill_register_match(daemon):
    client = daemon.connect()
    assert client.pool_names == ["g"]
    pool = client.pool("g")
    assert (pool.name, pool.page_size, pool.storage, pool.is_device) == ("g", 4, "host", False)
    assert pool.layout["num_blocks"] == 64 and pool.layout["kind"] == "FullyContiguous"
    blocks = filled(pool, 3)
    assert [b.state for b in blocks] == ["Complete"] * 3
    assert blocks[0].tokens == [1, 2, 3, 4]
    assert blocks[1].parent_sequence_hash == blocks[0].sequence_hash
    hashes = [b.sequence_hash for b in blocks]
    shared = pool.register_blocks(blocks)
    assert len(shared) == 3 and shared.sequence_hashes == hashes
    assert all(b.released for b in blocks)  # consumed by register_blocks
    with pytest.raises(kvpool.InvalidState, match="registered"):
        blocks[0].sequence_hash
    hit = pool.match_sequence_hashes(hashes + [12345])
    assert hit.block_ids == shared.block_ids
    assert [b.sequence_hash for b in hit] == hashes
    assert hit[-1].sequence_hash == hashes[-1] and len(hit[1:]) == 2
    with pytest.raises(IndexError):
        hit[3]
    assert daemon.pool_status()["active_blocks"] == 3
    shared.release()
    hit.release()
    assert len(hit) == 0
    client.flush()
    wait_until(lambda: daemon.pool_status()["inactive_blocks"] == 3, 10, "references dropped",
               daemon.pool_status)
    # Matchable while inactive, from a NumPy array of hashes too.
    assert len(pool.match_sequence_hashes(np.array(hashes, dtype=np.uint64))) == 3


def test_host_block_buffer_is_shaped_by_the_layout(daemon):
    pool = daemon.connect().pool("g")
    (b,) = filled(pool, 1)
    assert not hasattr(b, "__cuda_array_interface__")  # host blocks: buffer protocol only
    m = memoryview(b)
    assert (m.shape, m.format, m.itemsize, m.readonly) == ((2, 2, 4, 16), "h", 2, False)
    assert b.shape == (2, 2, 4, 16) and b.nbytes == m.nbytes == 2 * 2 * 4 * 16 * 2
    arr = np.asarray(b)
    assert arr.dtype == np.int16 and arr.flags.writeable and arr.flags.c_contiguous
    arr[...] = np.arange(arr.size, dtype=np.int16).reshape(arr.shape)
    # Same memory: the view is the block, not a copy.
    assert arr.ctypes.data == b.address(0, 0)
    assert np.asarray(b)[1, 1, 3, 15] == arr.size - 1
    h = b.sequence_hash
    del arr, m
    (imm,) = pool.register_blocks([b])
    assert not hasattr(imm, "__cuda_array_interface__")
    ro = np.asarray(imm)
    assert not ro.flags.writeable
    assert ro[1, 1, 3, 15] == ro.size - 1
    with pytest.raises(TypeError):
        memoryview(imm)[0, 0, 0, 0] = 1  # read-only view
    with pytest.raises(BufferError, match="read-only"):
        get_buffer(imm, PyBUF_WRITABLE)
    get_buffer(imm, PyBUF_SIMPLE)  # read-only, flat bytes: fine
    (hit,) = pool.match_sequence_hashes([h])
    assert np.array_equal(np.asarray(hit), ro)


def test_layer_separate_blocks_are_strided(daemon_factory):
    d = daemon_factory(pools=[host_pool(blocks=8, kind="layer_separate")])
    pool = d.connect().pool("g")
    a, b = pool.allocate_blocks(2)
    arr_a, arr_b = np.asarray(a), np.asarray(b)
    assert arr_a.shape == (2, 2, 4, 16) and not arr_a.flags.c_contiguous
    arr_a[...] = 1
    arr_b[...] = 2
    assert (np.asarray(a) == 1).all() and (np.asarray(b) == 2).all()
    assert arr_a.ctypes.data + arr_a.strides[0] == a.address(1, 0)
    with pytest.raises(BufferError, match="not contiguous"):
        get_buffer(a, PyBUF_SIMPLE)  # no strides: would need contiguous memory
    assert bytes(a) == np.asarray(a).tobytes()  # (a copy goes through the strided buffer)


def test_views_keep_their_block_alive(daemon):
    client = daemon.connect()
    pool = client.pool("g")
    (b,) = pool.allocate_blocks(1)
    arr = np.asarray(b)
    del b
    gc.collect()
    arr[...] = 7  # still our block: the view holds it
    assert daemon.pool_status()["mutable_blocks"] == 1
    del arr
    client.flush()
    wait_until(lambda: daemon.pool_status()["mutable_blocks"] == 0, 10, "the block to go back",
               daemon.pool_status)


def test_release_with_views_waits_for_the_last_view(daemon):
    client = daemon.connect()
    pool = client.pool("g")
    (b,) = pool.allocate_blocks(1)
    view = memoryview(b)
    b.release()
    assert b.released
    with pytest.raises(kvpool.InvalidState):
        b.block_id
    client.flush()
    assert daemon.pool_status()["mutable_blocks"] == 1
    view.release()
    client.flush()
    wait_until(lambda: daemon.pool_status()["mutable_blocks"] == 0, 10, "the block to go back",
               daemon.pool_status)


def test_register_refuses_a_block_with_live_views(daemon):
    pool = daemon.connect().pool("g")
    blocks = filled(pool, 2)
    arr = np.asarray(blocks[1])
    with pytest.raises(BufferError, match="exported view"):
        pool.register_blocks(blocks)
    assert not blocks[0].released  # nothing was consumed
    del arr
    assert len(pool.register_blocks(blocks)) == 2
    with pytest.raises(kvpool.InvalidArgument, match="twice"):
        more = filled(pool, 1, first_token=500)
        pool.register_blocks(more + more)


def test_context_managers_release_deterministically(daemon):
    client = daemon.connect()
    pool = client.pool("g")
    with pool.allocate_blocks(1)[0] as b:
        assert b.block_id >= 0
    assert b.released
    (blk,) = filled(pool, 1)
    h = blk.sequence_hash
    with pool.register_blocks([blk]) as shared:
        assert daemon.pool_status()["active_blocks"] == 1
    assert len(shared) == 0
    with pool.match_sequence_hashes([h])[0] as one:
        assert one.sequence_hash == h
    assert one.released
    client.flush()
    wait_until(lambda: daemon.pool_status()["active_blocks"] == 0, 10, "references dropped",
               daemon.pool_status)


def test_gil_is_released_while_waiting_for_the_daemon(daemon):
    pool = daemon.connect().pool("g")
    daemon.proc.send_signal(signal.SIGSTOP)  # requests now wait for an answer
    try:
        result = []
        t = threading.Thread(target=lambda: result.append(len(pool.allocate_blocks(1))))
        t.start()
        wait_until(lambda: t.is_alive(), 5, "the thread to start")
        # This thread runs Python while the other one waits inside allocate_blocks.
        n = sum(1 for _ in range(100000))
        assert n == 100000 and t.is_alive() and not result
    finally:
        daemon.proc.send_signal(signal.SIGCONT)
    t.join(timeout=30)
    assert result == [1]


def ring_stored_events(daemon):
    """The Stored records of kvpoold's event ring, as `kvpoolctl events --json` prints them."""
    out = subprocess.run([binary("KVPOOLCTL"), "events", "--all", "--json", "--instance",
                          daemon.instance, "--runtime-dir", daemon.runtime_dir],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    events = [json.loads(line) for line in out.stdout.splitlines() if line]
    return [e for e in events if e.get("type") == "stored"]


def test_register_send_tokens_puts_the_token_ids_into_the_events(daemon):
    client = daemon.connect()
    pool = client.pool("g")
    with_tokens = filled(pool, 2, first_token=4_000_000_000)  # ids above 2**31 too
    sent = [t for b in with_tokens for t in b.tokens]
    shared = pool.register_blocks(with_tokens, send_tokens=True)
    plain = pool.register_blocks(filled(pool, 1, first_token=500))  # the default: no tokens
    later = asyncio.run(pool.register_blocks_async(filled(pool, 1, first_token=900),
                                                   send_tokens=True))
    stored = ring_stored_events(daemon)
    assert [e["sequence_hash"] for e in stored] == (
        shared.sequence_hashes + plain.sequence_hashes + later.sequence_hashes)
    assert stored[0]["token_ids"] + stored[1]["token_ids"] == sent
    assert stored[2]["token_ids"] == []
    assert stored[3]["token_ids"] == [900, 901, 902, 903]
    for blocks in (shared, plain, later):
        blocks.release()
