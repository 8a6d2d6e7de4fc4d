"""An inference engine whose KV cache lives in kvpool.

For each prompt: hash the tokens with kvpool's hashing (Dynamo-compatible sequence hashes),
match the longest cached prefix, take that prefix's K/V for every layer straight from the
matched blocks (zero-copy NumPy/torch views of the daemon's shared memory), compute only
the remaining tokens, write their K/V into newly allocated blocks and register them, so the
next engine process that sees the prefix skips it too.

Pool layout the engine needs: num_layers = model layers, outer_dim = 2 (K, V), inner_dim =
d_model, dtype_bytes = 4 (fp32); page_size is the block size in tokens.

With --batch-store the engine keeps its KV through kvpool.BatchStore instead (opaque keys,
copies: docs/batch-store.md): a block's key is its 8-byte sequence hash, its value the block's
K/V as float32 [layers, 2, page, d_model]; the prefix is found with exists_prefix, copied out
with get, and new blocks are copied in with set. The pool is then a byte pool whose blocks hold
that value (inner_dim = kvpool.batch_store_block_bytes(448, value_bytes)).

Run as a server (what the tests do): one JSON request per stdin line, one answer per line.
    python3 engine.py --instance I --runtime-dir D --pool kv [--batch-store]
    {"op": "serve", "tokens": [...], "hold": false}  -> {"reused": .., "computed": .., "stored": .., "logits": [[..]..]}
    {"op": "prefill_and_stall", "tokens": [...]}      -> allocates and half-fills blocks, answers, then waits (to be killed)
    {"op": "release"}                                  -> drops what "hold" kept
"""

import argparse
import json
import os
import sys
import warnings

import numpy as np
import torch

import kvpool

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model import TinyDecoder  # noqa: E402


def kv_view(block):
    """A block's memory as a float32 tensor [layers, 2, page, d_model], no copy.

    Immutable blocks are read-only views; torch warns that it cannot mark a tensor
    read-only, and the engine never writes through them."""
    arr = np.asarray(block).view(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return torch.from_numpy(arr)


class Engine:
    def __init__(self, pool, model, salt=0):
        layout = pool.layout
        self.page = pool.page_size
        want = (model.layers, 2, model.d, 4)
        have = tuple(layout[k] for k in ("num_layers", "outer_dim", "inner_dim", "dtype_bytes"))
        if have != want:
            raise ValueError(f"pool '{pool.name}' has (layers, outer, inner, dtype_bytes) = {have}; "
                             f"this model needs {want}")
        self.pool, self.model, self.salt = pool, model, salt
        self.held = []            # blocks of requests still "decoding" (hold=True)
        self.tokens_computed = 0  # positions that went through the model, all requests

    def serve(self, tokens, hold=False):
        """Logits of the positions it had to compute, and what it reused / stored."""
        page, n = self.page, len(tokens)
        _, seq_hashes = self.pool.hash_tokens(tokens, self.salt)  # the pool's scheme
        hit = self.pool.match_sequence_hashes(seq_hashes)
        # At least the last token is computed: its logits are the answer.
        use = min(len(hit), (n - 1) // page)
        past = None
        if use:
            views = [kv_view(b) for b in list(hit)[:use]]
            # Per layer, the prefix's K and V: the views are the daemon's memory; cat
            # gathers them for the attention kernel (what a paged-attention kernel reads).
            past = [(torch.cat([v[layer, 0] for v in views]), torch.cat([v[layer, 1] for v in views]))
                    for layer in range(self.model.layers)]
            del views
        start = use * page
        logits, new_kv = self.model.forward(tokens[start:], start, past)
        self.tokens_computed += n - start
        stored = self._store(tokens, seq_hashes, len(hit), start, new_kv)
        n_stored = len(stored) if stored is not None else 0
        keep = [hit] + ([stored] if stored is not None else [])
        if hold:
            self.held.extend(keep)
        else:
            for b in keep:
                b.release()
        return {"reused": start, "computed": n - start,
                "stored": n_stored, "logits": logits}

    def _store(self, tokens, seq_hashes, cached, start, new_kv):
        """Writes K/V of the full blocks not cached yet into new blocks and registers them."""
        page, todo = self.page, len(seq_hashes) - cached
        if todo <= 0:
            return None
        try:
            fresh = self.pool.allocate_blocks(todo)
        except kvpool.NotEnoughBlocks:
            return None  # every block is held by running requests: serve uncached
        for i, b in enumerate(fresh, start=cached):
            b.init_sequence(self.salt, seq_hashes[i - 1] if i else None)
            b.add_tokens(tokens[i * page:(i + 1) * page])
            b.commit()
            dst = kv_view(b)
            lo, hi = i * page - start, (i + 1) * page - start
            for layer, (k, v) in enumerate(new_kv):
                dst[layer, 0].copy_(k[lo:hi])
                dst[layer, 1].copy_(v[lo:hi])
            del dst  # no view of a block may outlive the block's handing over to register
        return self.pool.register_blocks(fresh)

    def prefill_and_stall(self, tokens):
        """Allocates blocks for the prompt and writes half of them, as an engine killed in the
        middle of a prefill would have; returns them (never registered)."""
        n_blocks = len(tokens) // self.page
        fresh = self.pool.allocate_blocks(n_blocks)
        for b in fresh[: max(1, n_blocks // 2)]:
            kv_view(b).fill_(123.0)
        return fresh

    def release(self):
        for b in self.held:
            b.release()
        self.held = []


class BatchStoreEngine:
    """The same engine over kvpool.BatchStore: K/V copied in and out by key."""

    def __init__(self, client, pool_name, model, salt=0, page=16):
        self.store = kvpool.BatchStore(client, pool_name)
        self.model, self.salt, self.page = model, salt, page
        self.value_shape = (model.layers, 2, page, model.d)
        nbytes = int(np.prod(self.value_shape)) * 4
        if self.store.value_capacity < nbytes:
            raise ValueError(f"pool '{pool_name}' holds values of {self.store.value_capacity} "
                             f"bytes; a block of this model needs {nbytes}")
        self.tokens_computed = 0

    def _run(self, op, keys, buffers=None):
        done = self.store.wait(self.store.submit(op, keys, buffers))
        if not done.ok:
            raise RuntimeError(f"batch store {op}: {done.message}")
        return done

    def serve(self, tokens, hold=False):
        page, n = self.page, len(tokens)
        _, seq_hashes = kvpool.hash_tokens(tokens, page, self.salt)
        keys = [h.to_bytes(8, "little") for h in seq_hashes]
        hit = self._run("exists_prefix", keys).prefix if keys else 0
        use = min(hit, (n - 1) // page)
        past = None
        if use:
            blocks = [torch.empty(self.value_shape, dtype=torch.float32) for _ in range(use)]
            got = self._run("get", keys[:use], [b.numpy() for b in blocks])
            # Evicted between the two calls: use the prefix that came back.
            use = got.hits.index(False) if False in got.hits else use
            blocks = blocks[:use]
        if use:
            past = [(torch.cat([b[layer, 0] for b in blocks]), torch.cat([b[layer, 1] for b in blocks]))
                    for layer in range(self.model.layers)]
        start = use * page
        logits, new_kv = self.model.forward(tokens[start:], start, past)
        self.tokens_computed += n - start
        todo = range(hit, len(seq_hashes))
        values = []
        for i in todo:
            lo, hi = i * page - start, (i + 1) * page - start
            values.append(torch.stack([torch.stack([k[lo:hi], v[lo:hi]]) for k, v in new_kv])
                          .contiguous().numpy())
        stored = sum(self._run("set", [keys[i] for i in todo], values).hits) if values else 0
        return {"reused": start, "computed": n - start, "stored": stored, "logits": logits}

    def release(self):
        return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--instance", default=os.environ.get("KVPOOL_INSTANCE", "default"))
    ap.add_argument("--runtime-dir", default=os.environ.get("KVPOOL_RUNTIME_DIR", ""))
    ap.add_argument("--pool", default="kv")
    ap.add_argument("--seed", type=int, default=0, help="model weights")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--d-model", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--page", type=int, default=16, help="tokens per block (--batch-store)")
    ap.add_argument("--batch-store", action="store_true",
                    help="keep K/V through kvpool.BatchStore (opaque keys, copies)")
    args = ap.parse_args()
    torch.set_num_threads(1)  # deterministic kernels: cached and recomputed logits agree bit for bit
    model = TinyDecoder(d_model=args.d_model, heads=args.heads, layers=args.layers, seed=args.seed)
    client = kvpool.Client.connect(args.instance, runtime_dir=args.runtime_dir, connect_timeout=10.0)
    if args.batch_store:
        engine = BatchStoreEngine(client, args.pool, model, page=args.page)
    else:
        engine = Engine(client.pool(args.pool), model)
    stalled = None
    print(json.dumps({"ready": os.getpid()}), flush=True)
    for line in sys.stdin:
        req = json.loads(line)
        op = req["op"]
        if op == "serve":
            r = engine.serve(req["tokens"], hold=req.get("hold", False))
            r["logits"] = r["logits"].tolist()
            r["tokens_computed_total"] = engine.tokens_computed
            print(json.dumps(r), flush=True)
        elif op == "prefill_and_stall":
            stalled = engine.prefill_and_stall(req["tokens"])
            print(json.dumps({"allocated": len(stalled)}), flush=True)
        elif op == "release":
            engine.release()
            client.flush()
            print(json.dumps({"released": True}), flush=True)
        else:
            print(json.dumps({"error": f"unknown op {op!r}"}), flush=True)


if __name__ == "__main__":
    main()
