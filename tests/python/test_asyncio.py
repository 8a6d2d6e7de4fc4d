"""asyncio: await pool.*_async(...) on the client's async path, never blocking the event loop.
The strongest check: kvpoold is stopped (SIGSTOP) while a match is awaited; the loop keeps
running other coroutines, and the match completes once kvpoold runs again."""

import asyncio
import signal
import time

import pytest

import kvpool
from conftest import wait_until


def chain(pool, n, first=1):
    blocks = pool.allocate_blocks(n)
    parent = None
    for i, b in enumerate(blocks):
        b.init_sequence(0, parent)
        b.add_tokens(range(first + 4 * i, first + 4 * i + 4))
        b.commit()
        parent = b.sequence_hash
    return blocks


def test_async_allocate_register_match(daemon):
    pool = daemon.connect().pool("g")

    async def main():
        blocks = await pool.allocate_blocks_async(3)
        assert len(blocks) == 3 and all(isinstance(b, kvpool.MutableBlock) for b in blocks)
        parent = None
        for i, b in enumerate(blocks):
            b.init_sequence(0, parent)
            b.add_tokens(range(10 + 4 * i, 14 + 4 * i))
            b.commit()
            parent = b.sequence_hash
        hashes = [b.sequence_hash for b in blocks]
        reg = await pool.register_blocks_async(blocks)
        assert reg.sequence_hashes == hashes
        assert all(b.released for b in blocks)  # consumed, as register_blocks
        # Many matches in flight at once, gathered.
        hits = await asyncio.gather(*[pool.match_sequence_hashes_async(hashes + [7])
                                      for _ in range(20)])
        assert all(h.sequence_hashes == hashes for h in hits)
        for h in hits:
            h.release()
        reg.release()
        with pytest.raises(kvpool.NotEnoughBlocks):
            await pool.allocate_blocks_async(1000)

    asyncio.run(main())


def test_the_loop_runs_while_kvpoold_is_stopped(daemon):
    pool = daemon.connect().pool("g")
    blocks = chain(pool, 2)
    hashes = [b.sequence_hash for b in blocks]
    pool.register_blocks(blocks).release()

    async def main():
        ticks = 0
        stop = asyncio.Event()

        async def ticker():
            nonlocal ticks
            while not stop.is_set():
                ticks += 1
                await asyncio.sleep(0.001)

        t = asyncio.create_task(ticker())
        daemon.proc.send_signal(signal.SIGSTOP)
        try:
            match = asyncio.ensure_future(pool.match_sequence_hashes_async(hashes))
            start = ticks
            # The loop keeps turning while kvpoold cannot answer (a blocked loop would not tick).
            deadline = time.monotonic() + 10
            while ticks < start + 20:
                assert time.monotonic() < deadline, "the event loop stopped turning"
                await asyncio.sleep(0.001)
            assert not match.done()
        finally:
            daemon.proc.send_signal(signal.SIGCONT)
        hit = await asyncio.wait_for(match, 10)
        assert hit.sequence_hashes == hashes
        hit.release()
        stop.set()
        await t

    asyncio.run(main())


def test_errors_and_cancellation(daemon):
    pool = daemon.connect().pool("g")

    async def main():
        # A cancelled await does not lose the blocks: the answer is dropped, and released.
        task = asyncio.ensure_future(pool.allocate_blocks_async(4))
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        with pytest.raises(TypeError):
            await pool.match_sequence_hashes_async(["not a hash"])

    asyncio.run(main())
    # The cancelled allocate's blocks come back (its answer was collected and dropped).
    wait_until(lambda: daemon.pool_status()["free_blocks"] == 64, 10, "all blocks free",
               lambda: daemon.pool_status())
