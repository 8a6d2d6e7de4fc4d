"""The torch engine against a real kvpoold, with engine processes.

- A second engine process reuses the prefix a first one computed: it runs only the tokens
  after the shared prefix through the model, and its logits equal a full recompute without
  any cache (torch.allclose at rtol 1e-5, atol 1e-6; with one thread the CPU kernels give
  bit-identical results here, but other BLAS builds may pick other kernels for the shorter
  matrices of the cached path, so exact equality is not asserted).
- An engine killed with SIGKILL, holding registered blocks and half-written mutable ones: the
  daemon reclaims them (kvpoolctl), the half-written blocks never become matchable, and the
  surviving engine's answers stay equal to a full recompute.
"""

import json
import os
import queue
import signal
import subprocess
import sys
import threading

import pytest
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from model import TinyDecoder  # noqa: E402

PAGE = 16
LAYERS, D_MODEL, HEADS = 2, 64, 4


def kv_pool(blocks=128):
    return {"name": "kv", "num_blocks": blocks,
            "layout": {"num_layers": LAYERS, "outer_dim": 2, "page_size": PAGE,
                       "inner_dim": D_MODEL, "dtype_bytes": 4, "alignment": 64}}


class EngineProcess:
    """engine.py as a child process: JSON lines in, JSON lines out, every read bounded."""

    def __init__(self, daemon, *extra):
        self.proc = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "engine.py"), "--instance", daemon.instance,
             "--runtime-dir", daemon.runtime_dir, "--pool", "kv", "--layers", str(LAYERS),
             "--d-model", str(D_MODEL), "--heads", str(HEADS), *extra],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.lines = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.pid = self.answer()["ready"]

    def _read(self):
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def answer(self, timeout=60):
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            self.proc.kill()
            pytest.fail(f"engine said nothing within {timeout} s; stderr: {self.proc.stderr.read()}")
        if line is None:
            pytest.fail(f"engine exited ({self.proc.wait()}); stderr: {self.proc.stderr.read()}")
        return json.loads(line)

    def ask(self, **req):
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        return self.answer()

    def serve(self, tokens, hold=False):
        r = self.ask(op="serve", tokens=tokens, hold=hold)
        r["logits"] = torch.tensor(r["logits"], dtype=torch.float32)
        return r

    def close(self):
        if self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(timeout=30)


def reference(tokens):
    """Logits of every position, recomputed from scratch with no cache at all."""
    torch.set_num_threads(1)
    logits, _ = TinyDecoder(d_model=D_MODEL, heads=HEADS, layers=LAYERS, seed=0).forward(tokens)
    return logits


def prompt(prefix_seed, prefix_blocks, suffix_seed, suffix_tokens):
    g = torch.Generator().manual_seed(prefix_seed)
    pre = torch.randint(0, 512, (prefix_blocks * PAGE,), generator=g).tolist()
    g = torch.Generator().manual_seed(10_000 + suffix_seed)
    return pre + torch.randint(0, 512, (suffix_tokens,), generator=g).tolist()


def assert_logits_equal(got, tokens, reused):
    want = reference(tokens)[reused:]
    assert got.shape == want.shape
    assert torch.allclose(got, want, rtol=1e-5, atol=1e-6), f"max |diff| {(got - want).abs().max().item()}"


def test_second_engine_reuses_prefix_and_matches_full_recompute(daemon_factory):
    d = daemon_factory(pools=[kv_pool()])
    a, b = EngineProcess(d), EngineProcess(d)
    try:
        p1 = prompt(1, 5, 1, 21)  # 5 shared blocks + 21 tokens of its own (1 more full block)
        r1 = a.serve(p1)
        assert (r1["reused"], r1["computed"], r1["stored"]) == (0, len(p1), 6)
        assert_logits_equal(r1["logits"], p1, 0)

        p2 = prompt(1, 5, 2, 30)  # the same 5 blocks, then something else
        r2 = b.serve(p2)
        assert r2["reused"] == 5 * PAGE, "the second engine did not reuse the shared prefix"
        assert r2["computed"] == len(p2) - 5 * PAGE
        assert r2["tokens_computed_total"] == len(p2) - 5 * PAGE  # the model never saw the prefix
        assert r2["stored"] == 1
        assert_logits_equal(r2["logits"], p2, 5 * PAGE)

        # Whole prompt cached: only the last token is recomputed (its logits are the answer).
        r3 = a.serve(p2[: 6 * PAGE])
        assert (r3["reused"], r3["computed"]) == (5 * PAGE, PAGE)
        assert_logits_equal(r3["logits"], p2[: 6 * PAGE], 5 * PAGE)
        r4 = b.serve(p2[: 6 * PAGE] + [7])
        assert (r4["reused"], r4["computed"]) == (6 * PAGE, 1)
        assert_logits_equal(r4["logits"], p2[: 6 * PAGE] + [7], 6 * PAGE)
    finally:
        a.close()
        b.close()
    pool = d.pool_status("kv")
    assert pool["active_blocks"] == 0 and pool["mutable_blocks"] == 0


def test_killed_engine_is_reclaimed_and_survivor_stays_right(daemon_factory):
    d = daemon_factory(pools=[kv_pool()])
    victim, survivor = EngineProcess(d), EngineProcess(d)
    try:
        shared = prompt(3, 4, 3, 8)
        r = victim.serve(shared, hold=True)  # registered, still referenced ("decoding")
        assert r["stored"] == 4
        stalled = prompt(4, 3, 4, 0)
        assert victim.ask(op="prefill_and_stall", tokens=stalled)["allocated"] == 3
        pool = d.pool_status("kv")
        assert pool["active_blocks"] == 4 and pool["mutable_blocks"] == 3

        victim.proc.send_signal(signal.SIGKILL)
        victim.proc.wait(timeout=30)
        kvpool_py_conftest = sys.modules["kvpool_py_conftest"]
        kvpool_py_conftest.wait_until(
            lambda: d.status()["reclaimed_clients"] >= 1, 10, "kvpoold to reclaim the killed engine",
            detail=lambda: d.status())
        pool = d.pool_status("kv")
        assert pool["active_blocks"] == 0 and pool["mutable_blocks"] == 0, pool
        assert d.status()["reclaimed_blocks"] == 7
        assert victim.pid not in [c["pid"] for c in d.ctl("clients")["clients"]]

        # Its registered prefix is still cached and right; its half-written blocks never were.
        p = prompt(3, 4, 5, 10)
        r = survivor.serve(p)
        assert r["reused"] == 4 * PAGE
        assert_logits_equal(r["logits"], p, 4 * PAGE)
        r = survivor.serve(stalled + [1, 2, 3])
        assert r["reused"] == 0
        assert_logits_equal(r["logits"], stalled + [1, 2, 3], 0)
    finally:
        survivor.close()
        if victim.proc.poll() is None:
            victim.proc.kill()
    pool = d.pool_status("kv")
    assert pool["active_blocks"] == 0 and pool["mutable_blocks"] == 0


def byte_pool(blocks=64):
    import kvpool
    value = LAYERS * 2 * PAGE * D_MODEL * 4
    return {"name": "kv", "num_blocks": blocks,
            "layout": {"num_layers": 1, "outer_dim": 1, "page_size": 1,
                       "inner_dim": kvpool.batch_store_block_bytes(448, value),
                       "dtype_bytes": 1, "alignment": 64}}


def test_batch_store_mode_reuses_prefix_with_exact_logits(daemon_factory):
    """The engine over kvpool.BatchStore (opaque keys, K/V copied in and out): a second
    engine process reuses the first one's prefix and its logits equal a full recompute."""
    d = daemon_factory(pools=[byte_pool()])
    a, b = EngineProcess(d, "--batch-store"), EngineProcess(d, "--batch-store")
    try:
        p1 = prompt(1, 5, 1, 21)
        r1 = a.serve(p1)
        assert (r1["reused"], r1["computed"], r1["stored"]) == (0, len(p1), 6)
        assert_logits_equal(r1["logits"], p1, 0)
        p2 = prompt(1, 5, 2, 30)
        r2 = b.serve(p2)
        assert r2["reused"] == 5 * PAGE and r2["tokens_computed_total"] == len(p2) - 5 * PAGE
        assert r2["stored"] == 1
        assert_logits_equal(r2["logits"], p2, 5 * PAGE)
        r3 = a.serve(p2[: 6 * PAGE] + [7])
        assert (r3["reused"], r3["computed"]) == (6 * PAGE, 1)
        assert_logits_equal(r3["logits"], p2[: 6 * PAGE] + [7], 6 * PAGE)
    finally:
        a.close()
        b.close()
