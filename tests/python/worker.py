"""A Python worker process for the binding tests (driven by conftest.Worker).

    worker.py write T...   fill blocks for tokens T (page 4, salt 7) with a known pattern,
                           register them, print "registered H,H,..", hold them until "exit"
    worker.py read T...    match the prefix of T, check every byte with NumPy, print
                           "matched N" (or "mismatch ...", exit 1)
    worker.py hold         allocate 5 blocks, register 3 more, print "ready", hold until killed
Daemon: $KVPOOL_INSTANCE in $KVPOOL_RUNTIME_DIR.
"""

import os
import sys

import numpy as np

import kvpool

SALT = 7


def pattern(seq_hash, shape):
    n = int(np.prod(shape))
    vals = (np.arange(n, dtype=np.uint64) * np.uint64(31) + np.uint64(seq_hash % 65521)) % np.uint64(65521)
    return vals.astype(np.uint16).reshape(shape)


def main():
    mode, tokens = sys.argv[1], [int(t) for t in sys.argv[2:]]
    client = kvpool.Client.connect(os.environ["KVPOOL_INSTANCE"],
                                   runtime_dir=os.environ["KVPOOL_RUNTIME_DIR"], connect_timeout=10)
    pool = client.pool("g")
    if mode == "write":
        _, seq = pool.hash_tokens(tokens, SALT)
        page = pool.page_size
        blocks = pool.allocate_blocks(len(seq))
        parent = None
        for i, b in enumerate(blocks):
            b.init_sequence(SALT, parent)
            b.add_tokens(tokens[i * page:(i + 1) * page])
            b.commit()
            assert b.sequence_hash == seq[i]
            np.asarray(b).view(np.uint16)[...] = pattern(b.sequence_hash, b.shape)  # goes at once
            parent = b.sequence_hash
        shared = pool.register_blocks(blocks)
        print("registered " + ",".join(str(h) for h in shared.sequence_hashes), flush=True)
        sys.stdin.readline()  # "exit"
        shared.release()
    elif mode == "read":
        _, seq = pool.hash_tokens(tokens, SALT)
        with pool.match_sequence_hashes(np.array(seq, dtype=np.uint64)) as hit:
            for b in hit:
                arr = np.asarray(b)
                if arr.flags.writeable or not np.array_equal(arr.view(np.uint16),
                                                             pattern(b.sequence_hash, b.shape)):
                    print(f"mismatch in block {b.block_id}", flush=True)
                    return 1
            print(f"matched {len(hit)}", flush=True)
    elif mode == "hold":
        mutable = pool.allocate_blocks(5)
        fresh = pool.allocate_blocks(3)
        for i, b in enumerate(fresh):
            b.init_sequence(SALT)
            b.add_tokens([9000 + i] * pool.page_size)
            b.commit()
        shared = pool.register_blocks(fresh)
        print(f"ready {len(mutable)} {len(shared)}", flush=True)
        sys.stdin.readline()  # never comes: the test kills us
    return 0


if __name__ == "__main__":
    sys.exit(main())
