"""What the example engine pays to recompute a prefix that a peer could send instead.

Times TinyDecoder.forward over BLOCKS x TOKENS tokens at a model size whose K/V per block
is the block kvpool_peer_bench moves (issue 31's comparison; docs/peers.md "Fetch or
recompute"): K/V bytes per block = layers x 2 (K, V) x tokens x d_model x 4 (fp32), so the
defaults (2 layers, 16 tokens, d_model 1024) give 256 KiB, the bench's 2 x 2 x 16 x 2048 x
2 bytes. Prints the median of --reps runs.

  python3 examples/torch_engine/bench_recompute.py [--blocks 64] [--tokens 16] [--d-model 1024]
                                                   [--layers 2] [--heads 8] [--reps 5] [--threads 1]
"""
import argparse
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model import TinyDecoder  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--blocks", type=int, default=64)
    ap.add_argument("--tokens", type=int, default=16, help="tokens per block")
    ap.add_argument("--d-model", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    n = args.blocks * args.tokens
    model = TinyDecoder(vocab=512, d_model=args.d_model, heads=args.heads, layers=args.layers,
                        max_positions=n, seed=0)
    tokens = [(i * 7919) % model.vocab for i in range(n)]
    model.forward(tokens[: min(n, 64)])  # first-call set-up out of the figure
    times = []
    for _ in range(args.reps):
        t0 = time.perf_counter()
        model.forward(tokens)
        times.append(time.perf_counter() - t0)
    kv_block = args.layers * 2 * args.tokens * args.d_model * 4
    print(f"recompute {args.blocks} blocks x {args.tokens} tokens ({n} tokens), {args.layers} layers, "
          f"d_model {args.d_model}, {args.threads} thread(s), torch {torch.__version__}: "
          f"median {1e3 * statistics.median(times):.1f} ms (min {1e3 * min(times):.1f}, "
          f"max {1e3 * max(times):.1f}); K/V {kv_block // 1024} KiB a block, "
          f"{args.blocks * kv_block / 2**20:.1f} MiB in all")


if __name__ == "__main__":
    main()
