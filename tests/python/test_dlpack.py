"""The pool dtype and DLPack: torch.from_dlpack / numpy.from_dlpack give zero-copy tensors of
the pool's type and the block's shape, over the very bytes another client matches."""

import gc
import os
import subprocess

import numpy as np
import pytest

import kvpool
from conftest import binary, host_pool

torch = pytest.importorskip("torch", reason="python3-torch (Debian) is needed for DLPack tests")


def typed_pool(name, dtype, inner_dim=8, kind=None, dtype_bytes=None):
    p = host_pool(name=name, blocks=8, page_size=4, inner_dim=inner_dim)
    del p["layout"]["dtype_bytes"]
    p["layout"]["dtype"] = dtype
    if dtype_bytes is not None:
        p["layout"]["dtype_bytes"] = dtype_bytes
    if kind:
        p["layout"]["kind"] = kind
    return p


def committed(pool, n=1, first=1):
    blocks = pool.allocate_blocks(n)
    parent = None
    for i, b in enumerate(blocks):
        b.init_sequence(0, parent)
        b.add_tokens(range(first + 4 * i, first + 4 * i + 4))
        b.commit()
        parent = b.sequence_hash
    return blocks


@pytest.fixture
def typed_daemon(daemon_factory):
    return daemon_factory(pools=[
        typed_pool("bf", "bf16"), typed_pool("h", "fp16", dtype_bytes=2), typed_pool("f", "fp32"),
        typed_pool("e4", "fp8_e4m3"), typed_pool("u", "u8"),
        typed_pool("ls", "bf16", kind="layer_separate"),
        host_pool(name="raw", blocks=8, inner_dim=8)])


def test_layout_reports_the_dtype(typed_daemon):
    client = typed_daemon.connect()
    want = {"bf": ("bf16", 2), "h": ("fp16", 2), "f": ("fp32", 4), "e4": ("fp8_e4m3", 1),
            "u": ("u8", 1), "ls": ("bf16", 2), "raw": (None, 2)}
    for name, (dtype, nbytes) in want.items():
        pool = client.pool(name)
        assert pool.dtype == dtype, name
        assert pool.layout["dtype"] == dtype and pool.layout["dtype_bytes"] == nbytes, name


@pytest.mark.parametrize("name,torch_dtype", [
    ("bf", torch.bfloat16), ("h", torch.float16), ("f", torch.float32), ("u", torch.uint8),
    ("e4", torch.uint8), ("raw", torch.int16)])
def test_torch_from_dlpack_is_typed_shaped_and_zero_copy(typed_daemon, name, torch_dtype):
    client = typed_daemon.connect()
    pool = client.pool(name)
    (b,) = committed(pool)
    assert b.__dlpack_device__() == (1, 0)  # kDLCPU
    t = torch.from_dlpack(b)
    assert tuple(t.shape) == pool.block_shape == (2, 2, 4, 8)
    assert t.dtype == torch_dtype  # raw: no dtype, dtype_bytes 2 -> int16 (torch has no uint16)
    assert t.data_ptr() == b.address(0, 0)  # zero-copy
    assert t.stride(3) == 1 and t.stride(2) == 8
    # Written through torch, read back by another client's match: the same bytes.
    t[1, 0].fill_(1)  # region (layer 1, outer 0)
    if t.dtype.is_floating_point:
        t[0, 1] = torch.arange(32, dtype=t.dtype).reshape(4, 8) / 4
    raw_before = bytes(memoryview(b).cast("B"))
    del t
    gc.collect()
    h = b.sequence_hash
    reg = pool.register_blocks([b])
    del reg
    other = typed_daemon.connect().pool(name)
    with other.match_sequence_hashes([h]) as hit:
        assert len(hit) == 1
        seen = torch.from_dlpack(hit[0])
        assert bytes(memoryview(hit[0]).cast("B")) == raw_before
        assert seen.dtype == torch.from_dlpack(hit[0]).dtype
        assert bool((seen[1, 0] == 1).all())
        if seen.dtype.is_floating_point:
            assert torch.equal(seen[0, 1].float(), torch.arange(32).float().reshape(4, 8) / 4)
        del seen
        gc.collect()


def test_bf16_values_round_trip_exactly(typed_daemon):
    pool = typed_daemon.connect().pool("bf")
    (b,) = committed(pool)
    src = torch.tensor([1.0, -2.5, 3.140625, 65280.0, 1e-3], dtype=torch.bfloat16)
    t = torch.from_dlpack(b)
    t.view(-1)[:5] = src
    # The bytes in shared memory are bfloat16: the high halves of the float32 values.
    words = np.frombuffer(bytes(memoryview(b).cast("B"))[:10], dtype="<u2")
    expect = (src.float().numpy().view(np.uint32) >> 16).astype(np.uint16)
    assert words.tolist() == expect.tolist()
    del t


def test_layer_separate_is_strided(typed_daemon):
    pool = typed_daemon.connect().pool("ls")
    (b,) = committed(pool)
    t = torch.from_dlpack(b)
    assert tuple(t.shape) == (2, 2, 4, 8) and not t.is_contiguous()
    assert t.data_ptr() == b.address(0, 0)
    assert t[1, 1].data_ptr() == b.address(1, 1)  # strides land on each region
    assert t[1, 0].data_ptr() == b.address(1, 0)
    del t


def test_numpy_from_dlpack_and_buffer_formats(typed_daemon):
    client = typed_daemon.connect()
    (f,) = committed(client.pool("f"))
    a = np.from_dlpack(f)
    assert a.dtype == np.float32 and a.shape == (2, 2, 4, 8)
    assert a.ctypes.data == f.address(0, 0)
    assert np.asarray(f).dtype == np.float32  # buffer protocol: format 'f'
    (h,) = committed(client.pool("h"))
    assert np.asarray(h).dtype == np.float16 and np.from_dlpack(h).dtype == np.float16
    (r,) = committed(client.pool("raw"))
    # No dtype: signed integers of dtype_bytes, the same through the buffer protocol and
    # DLPack (issue 27: the buffer said uint16, DLPack int16).
    assert np.asarray(r).dtype == np.from_dlpack(r).dtype == np.int16
    assert memoryview(r).format == "h"
    del a


def test_an_exported_tensor_holds_the_block(typed_daemon):
    pool = typed_daemon.connect().pool("bf")
    (b,) = committed(pool)
    t = torch.from_dlpack(b)
    with pytest.raises(BufferError):
        pool.register_blocks([b])  # a tensor still looks at it
    b.release()  # deferred: the tensor still reads the block
    assert t.data_ptr() != 0 and float(t.sum()) == float(t.sum())
    del t
    gc.collect()
    assert b.released
    # An unconsumed capsule frees itself.
    (c,) = committed(pool, first=100)
    cap = c.__dlpack__()
    del cap
    gc.collect()
    pool.register_blocks([c]).release()


def test_bad_dtype_config_is_refused(tmp_path):
    import json
    cfg = {"instance": "bad", "runtime_dir": str(tmp_path),
           "pools": [typed_pool("x", "fp16", dtype_bytes=4)]}
    path = tmp_path / "c.json"
    path.write_text(json.dumps(cfg))
    out = subprocess.run([binary("KVPOOLD"), "--config", str(path)], capture_output=True,
                         text=True, timeout=30)
    assert out.returncode != 0
    assert "pools[0].layout.dtype" in out.stderr and "2-byte" in out.stderr, out.stderr
    cfg["pools"] = [typed_pool("x", "fp64")]
    path.write_text(json.dumps(cfg))
    out = subprocess.run([binary("KVPOOLD"), "--config", str(path)], capture_output=True,
                         text=True, timeout=30)
    assert out.returncode != 0 and "fp8_e4m3" in out.stderr, out.stderr
    assert not os.path.exists(tmp_path / "bad.sock")


def test_a_registered_blocks_tensor_is_read_only_by_contract(typed_daemon):
    """The documented contract (docs/python.md): a write through torch to a registered
    block faults in the writer alone, every other reader keeps the bytes, and .clone() is
    the way to a writable copy."""
    pool = typed_daemon.connect().pool("f")
    (b,) = committed(pool)
    torch.from_dlpack(b).fill_(2.5)
    h = b.sequence_hash
    shared = pool.register_blocks([b])
    before = bytes(memoryview(shared[0]).cast("B"))
    writer = (
        "import sys, torch, kvpool\n"
        f"c = kvpool.Client.connect({typed_daemon.instance!r}, runtime_dir={typed_daemon.runtime_dir!r})\n"
        f"hit = c.pool('f').match_sequence_hashes([{h}])\n"
        "t = torch.from_dlpack(hit[0])\n"
        "print('writing', flush=True)\n"
        "t.fill_(7.0)\n"
        "print('wrote', flush=True)\n")
    r = subprocess.run([os.sys.executable, "-c", writer], capture_output=True, text=True,
                       timeout=60, env=dict(os.environ))
    assert r.returncode == -11 and "writing" in r.stdout and "wrote" not in r.stdout, r
    assert bytes(memoryview(shared[0]).cast("B")) == before  # nobody saw the write
    copy = torch.from_dlpack(shared[0]).clone()  # the safe way to edit cached KV
    copy.fill_(7.0)
    assert bool((copy == 7.0).all()) and bool((torch.from_dlpack(shared[0]) == 2.5).all())
    assert bytes(memoryview(shared[0]).cast("B")) == before
    del copy
    shared.release()
