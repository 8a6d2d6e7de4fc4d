"""A worker in Python with torch: the pool's blocks as typed, zero-copy tensors (DLPack)."""
import asyncio
import sys

import torch

import kvpool


async def main(instance="default", runtime_dir=""):
    pool = kvpool.Client.connect(instance, runtime_dir=runtime_dir).pool("g2")
    page = pool.page_size
    tokens = list(range(1000, 1000 + 4 * page))                       # the prompt
    _, hashes = pool.hash_tokens(tokens, salt=0)                      # as the pool hashes
    hit = await pool.match_sequence_hashes_async(hashes)              # the loop keeps running
    cached = [torch.from_dlpack(b) for b in hit]      # read-only: writing faults; .clone() to edit
    fresh = await pool.allocate_blocks_async(len(hashes) - len(hit))
    parent = hit[-1].sequence_hash if hit else None
    for i, b in enumerate(fresh, start=len(hit)):
        b.init_sequence(0, parent)
        b.add_tokens(tokens[i * page:(i + 1) * page])
        b.commit()
        kv = torch.from_dlpack(b)             # (layers, outer, page, inner), the pool's dtype
        kv.copy_(torch.full(kv.shape, float(i), dtype=kv.dtype))  # write this block's KV
        parent = b.sequence_hash
        del kv                                # views hold the block: drop them to register
    shared = await pool.register_blocks_async(fresh)                  # now others match them
    print(f"matched {len(hit)} of {len(hashes)} blocks ({cached[0].dtype if cached else pool.dtype}),"
          f" registered {len(shared)}")


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:]))
