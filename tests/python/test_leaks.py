"""No Python reference or memory leak over many allocate/release and match cycles."""

import gc
import sys
import tracemalloc

import kvpool
from conftest import wait_until


def cycle(pool, hashes):
    for b in pool.allocate_blocks(4):
        b.release()
    with pool.allocate_blocks(1)[0] as b:
        b.init_sequence(0)
    hit = pool.match_sequence_hashes(hashes)
    assert len(hit) == len(hashes)
    for blk in hit:
        blk.sequence_hash
    del hit


def test_no_leak_over_10k_cycles(daemon):
    client = daemon.connect()
    pool = client.pool("g")
    blocks = pool.allocate_blocks(4)
    parent = None
    for i, b in enumerate(blocks):
        b.init_sequence(0, parent)
        b.add_tokens([i] * pool.page_size)
        b.commit()
        parent = b.sequence_hash
    hashes = pool.register_blocks(blocks).sequence_hashes  # released at once: inactive

    for _ in range(200):  # warm up caches and free lists
        cycle(pool, hashes)
    gc.collect()
    refs = (sys.getrefcount(pool), sys.getrefcount(client), sys.getrefcount(hashes),
            sys.getrefcount(kvpool.MutableBlock), sys.getrefcount(kvpool.ImmutableBlocks))
    objects = len(gc.get_objects())
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    for _ in range(10_000):
        cycle(pool, hashes)
    gc.collect()
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    grown = sum(s.size_diff for s in after.compare_to(before, "filename"))
    del before, after  # (their traces are objects too)
    gc.collect()
    assert grown < 64 * 1024, f"Python memory grew by {grown} bytes over 10k cycles"
    # A leaked block or result per cycle would be 10k objects.
    assert abs(len(gc.get_objects()) - objects) < 100
    assert refs == (sys.getrefcount(pool), sys.getrefcount(client), sys.getrefcount(hashes),
                    sys.getrefcount(kvpool.MutableBlock), sys.getrefcount(kvpool.ImmutableBlocks))
    # And nothing leaked on the daemon's side: every block is free or inactive again.
    client.flush()
    wait_until(lambda: daemon.pool_status()["mutable_blocks"] == 0
               and daemon.pool_status()["active_blocks"] == 0, 10, "every block back",
               daemon.pool_status)
