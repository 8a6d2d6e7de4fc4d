"""Time to first token with and without kvpool, over a slice of the Mooncake trace.

Each trace block id becomes PAGE tokens derived from the id (same id, same tokens: the
trace's prefix chains become real shared prefixes), so prompts are the trace's scaled down
(512 -> PAGE tokens per block) to run in seconds on a CPU. The trace's reuse is mostly
between turns of a conversation minutes apart, so the engine first serves the WARMUP
requests before the measured ones (through kvpool, unmeasured: a server that has been up a
while), then the measured requests one after another in trace order:
  with kvpool:    match the cached prefix, load its K/V from the blocks, compute the rest, store
  without:        compute the whole prompt
TTFT is the time of that step for the prompt (the first token's logits are its last row).
Every request's logits are checked equal between the two (torch.allclose, rtol 1e-5, atol
1e-6: a wrong block would show).

    python3 bench_ttft.py [--warmup 600] [--requests 100] [--json out.json]
KVPOOLD (env or --kvpoold) names the kvpoold binary; PYTHONPATH must reach the kvpool module.
"""

import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import torch

import kvpool

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from engine import Engine  # noqa: E402
from model import TinyDecoder  # noqa: E402

TRACE = os.path.join(HERE, "..", "..", "tools", "replay", "traces", "conversation_trace.jsonl.gz")


def block_tokens(block_id, page, vocab):
    return [(block_id * 1_000_003 + i * 7919 + (block_id >> 7)) % vocab for i in range(page)]


class PrivateDaemon:
    def __init__(self, kvpoold, pool):
        self.dir = tempfile.mkdtemp(prefix="kvpool-ttft-")
        self.instance = f"ttft{os.getpid()}"
        cfg = os.path.join(self.dir, "kvpoold.json")
        with open(cfg, "w") as f:
            json.dump({"instance": self.instance, "runtime_dir": self.dir, "log_level": "warn",
                       "pools": [pool]}, f)
        self.log = open(os.path.join(self.dir, "kvpoold.log"), "w")
        self.proc = subprocess.Popen([kvpoold, "--config", cfg], stdout=self.log, stderr=self.log)

    def connect(self):
        deadline = time.monotonic() + 20
        while True:
            try:
                return kvpool.Client.connect(self.instance, runtime_dir=self.dir, connect_timeout=1.0)
            except kvpool.Error:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"kvpoold did not start: {open(self.log.name).read()}")
                time.sleep(0.02)  # poll interval while it starts

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)
        shutil.rmtree(self.dir, ignore_errors=True)


def pct(values, p):
    s = sorted(values)
    return s[min(len(s) - 1, int(p * len(s)))] if s else 0.0


def main():
    ap = argparse.ArgumentParser(description="TTFT with and without kvpool over a trace slice")
    ap.add_argument("--trace", default=TRACE)
    ap.add_argument("--warmup", type=int, default=600, help="trace requests served before measuring")
    ap.add_argument("--requests", type=int, default=100, help="trace requests measured")
    ap.add_argument("--page", type=int, default=8, help="tokens per trace block (scaled from 512)")
    ap.add_argument("--blocks", type=int, default=8192, help="pool capacity")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--d-model", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kvpoold", default=os.environ.get("KVPOOLD", "kvpoold"))
    ap.add_argument("--json", help="write the per-request figures here")
    args = ap.parse_args()
    torch.set_num_threads(1)

    with gzip.open(args.trace, "rt") if args.trace.endswith(".gz") else open(args.trace) as f:
        lines = [line for _, line in zip(range(args.warmup + args.requests), f)]
    warm = [json.loads(line) for line in lines[:args.warmup]]
    reqs = [json.loads(line) for line in lines[args.warmup:]]
    model = TinyDecoder(d_model=args.d_model, heads=args.heads, layers=args.layers, seed=0)
    pool_cfg = {"name": "kv", "num_blocks": args.blocks,
                "layout": {"num_layers": args.layers, "outer_dim": 2, "page_size": args.page,
                           "inner_dim": args.d_model, "dtype_bytes": 4, "alignment": 64}}
    daemon = PrivateDaemon(args.kvpoold, pool_cfg)
    try:
        client = daemon.connect()
        engine = Engine(client.pool("kv"), model)
        tokens_of = lambda r: [t for b in r["hash_ids"] for t in block_tokens(b, args.page, model.vocab)]  # noqa: E731
        for r in warm:
            engine.serve(tokens_of(r))
        with_kv, without, reused, total = [], [], 0, 0
        for r in reqs:
            tokens = tokens_of(r)
            t0 = time.perf_counter()
            got = engine.serve(tokens)
            t1 = time.perf_counter()
            full, _ = model.forward(tokens)
            t2 = time.perf_counter()
            if not torch.allclose(got["logits"][-1], full[-1], rtol=1e-5, atol=1e-6):
                raise SystemExit(f"request {r['timestamp']}: logits with kvpool differ from a full recompute "
                                 f"(max |diff| {(got['logits'][-1] - full[-1]).abs().max().item()})")
            with_kv.append(t1 - t0)
            without.append(t2 - t1)
            reused += got["reused"]
            total += len(tokens)
        del engine
        client.flush()
    finally:
        daemon.stop()
    ms = lambda v: 1000 * v  # noqa: E731
    print(f"TTFT over {len(reqs)} requests of the trace (after {len(warm)} unmeasured), {args.page} tokens per "
          f"trace block, model {args.layers} layers x d {args.d_model}, 1 thread, pool {args.blocks} blocks")
    print(f"prompt tokens reused from kvpool: {reused} of {total} ({100 * reused / max(total, 1):.1f}%)")
    for name, v in (("without kvpool", without), ("with kvpool", with_kv)):
        print(f"{name:15s} mean {ms(sum(v) / len(v)):7.2f} ms  p50 {ms(pct(v, 0.5)):7.2f} ms  "
              f"p90 {ms(pct(v, 0.9)):7.2f} ms  total {sum(v):6.2f} s")
    print(f"speed-up of total prefill time: x{sum(without) / max(sum(with_kv), 1e-9):.2f}; "
          f"logits equal to a full recompute on every request")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"with_kvpool_s": with_kv, "without_kvpool_s": without, "reused_tokens": reused,
                       "prompt_tokens": total, "requests": len(reqs), "warmup": len(warm),
                       "page": args.page}, f)


if __name__ == "__main__":
    main()
