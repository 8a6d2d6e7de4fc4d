#!/usr/bin/env python3
"""match-64 round trip from Python beside the C++ client's, against one kvpoold.

Starts kvpoold (a host pool of 1024 blocks, page 16, the default spin), registers 64 blocks
of one sequence, then alternates rounds in this one process: the C++ client timed in C++
(kvpool_match_bench, a test-only extension with its own connection), Python through the
bindings with the hashes as a list of ints, and as a NumPy uint64 array. Each match returns
64 blocks and drops them (64 references released). Prints, per variant, the median and the
best round (the best is what survives a busy machine), and the binding's overhead per call
(Python - C++).

    KVPOOLD=... KVPOOLCTL=... KVPOOL_MATCH_BENCH_DIR=<build>/tests/python \\
        PYTHONPATH=<build>/libclient/python bench_match.py [--rounds 7] [--calls 20000]
"""

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402

sys.path.insert(0, os.environ.get("KVPOOL_MATCH_BENCH_DIR", "."))
import kvpool_match_bench  # noqa: E402

import kvpool  # noqa: E402
from conftest import Daemon, host_pool  # noqa: E402

BATCH = 64


def python_round(pool, hashes, calls):
    match = pool.match_sequence_hashes
    for _ in range(200):
        match(hashes)
    t0 = time.perf_counter_ns()
    for _ in range(calls):
        match(hashes)
    return (time.perf_counter_ns() - t0) / calls


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--calls", type=int, default=5000)
    a = ap.parse_args()
    d = Daemon(pools=[host_pool(blocks=1024, page_size=16)], poll_us=50)
    try:
        client = kvpool.Client.connect(d.instance, runtime_dir=d.runtime_dir)
        pool = client.pool("g")
        blocks = pool.allocate_blocks(BATCH)
        parent = None
        for i, b in enumerate(blocks):
            b.init_sequence(0, parent)
            b.add_tokens(range(i * 16, i * 16 + 16))
            b.commit()
            parent = b.sequence_hash
        hashes = pool.register_blocks(blocks).sequence_hashes  # dropped at once: inactive
        assert len(pool.match_sequence_hashes(hashes)) == BATCH
        arr = np.array(hashes, dtype=np.uint64)
        cpp, py_list, py_np = [], [], []
        for r in range(a.rounds):
            cpp.append(kvpool_match_bench.match_loop(d.instance, d.runtime_dir, "g", hashes, a.calls))
            py_list.append(python_round(pool, hashes, a.calls))
            py_np.append(python_round(pool, arr, a.calls))
            print(f"round {r + 1}: C++ {cpp[-1] / 1000:.2f} us, Python (list) {py_list[-1] / 1000:.2f} us, "
                  f"Python (NumPy) {py_np[-1] / 1000:.2f} us", flush=True)
        print(f"match-{BATCH} round trip, {a.rounds} rounds x {a.calls} calls (median / best round):")
        for name, f in (("median", statistics.median), ("best", min)):
            c, pl, pn = f(cpp), f(py_list), f(py_np)
            print(f"  {name:6s} C++ {c / 1000:6.2f} us | Python list {pl / 1000:6.2f} us "
                  f"(binding {(pl - c) / 1000:+.2f} us) | Python NumPy {pn / 1000:6.2f} us "
                  f"(binding {(pn - c) / 1000:+.2f} us)")
    finally:
        d.stop()


if __name__ == "__main__":
    main()
