"""kvpool.BatchStore against a real kvpoold: opaque keys set, found, copied out exactly into
buffers of every kind the bindings take, removed; the eventfd; a forced index collision is a
miss; a dead daemon completes batches with an error code, never a hang."""

import select
import signal

import numpy as np
import pytest

import kvpool

VALUE = 8192


def byte_pool(name="kv", blocks=16, value=VALUE, namespace=16):
    block = kvpool.batch_store_block_bytes(448, value, namespace)
    return {"name": name, "num_blocks": blocks,
            "layout": {"num_layers": 1, "outer_dim": 1, "page_size": 1, "inner_dim": block,
                       "dtype_bytes": 1, "alignment": 64}}


@pytest.fixture
def kv(daemon_factory):
    return daemon_factory(pools=[byte_pool()])


def pattern(seed, n=VALUE):
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8)


def test_set_exists_get_delete(kv):
    s = kvpool.BatchStore(kv.connect(), "kv")
    assert s.value_capacity >= VALUE
    vals = [pattern(i) for i in range(3)]
    keys = [b"vllm-hash-0\x00\x00\x00\x01", "sglang-key-1", b"k2"]
    done = s.wait(s.submit("set", keys, [v for v in vals]))
    assert done.ok and done.hits == [True, True, True]
    assert s.wait(s.submit("exists", keys + [b"nope"])).hits == [True, True, True, False]
    assert s.wait(s.submit("exists_prefix", [keys[0], b"nope", keys[1]])).prefix == 1
    outs = [np.zeros(VALUE, np.uint8) for _ in range(3)]
    raw = bytearray(VALUE)
    done = s.wait(s.submit("get", keys[:2] + [b"nope", keys[2]], outs[:2] + [raw, outs[2]]))
    assert done.results == [1, 1, 0, 1]
    assert done.value_sizes == [VALUE, VALUE, 0, VALUE]
    for o, v in zip(outs, vals):
        assert np.array_equal(o, v)
    # (address, size) buffers: memory the caller owns (SGLang hands out raw pointers).
    target = np.zeros(VALUE, np.uint8)
    done = s.wait(s.submit("get", [keys[1]], [(target.ctypes.data, target.nbytes)]))
    assert done.hits == [True] and np.array_equal(target, vals[1])
    assert s.wait(s.submit("delete", [keys[1]])).hits == [True]
    assert s.wait(s.submit("exists", keys)).hits == [True, False, True]
    with pytest.raises(kvpool.InvalidArgument):
        s.submit("get", keys)  # no buffers
    with pytest.raises(BufferError):
        s.submit("get", [keys[0]], [b"immutable bytes"])  # get needs writable buffers
    st = s.stats()
    assert st["bytes_in"] == 3 * VALUE and st["hits"] >= 8


def test_event_fd_and_drain(kv):
    s = kvpool.BatchStore(kv.connect(), "kv")
    ids = [s.submit("exists", [b"a", b"b"]) for _ in range(4)]
    got = []
    p = select.poll()
    p.register(s.event_fd(), select.POLLIN)
    while len(got) < 4:
        assert p.poll(20000), "no completion within 20 s"
        got += s.drain()
    assert [c.id for c in got] == ids
    assert all(c.results == [0, 0] for c in got)


def test_forced_collision_never_serves_another_key(kv):
    s = kvpool.BatchStore(kv.connect(), "kv", index_bits=1)
    a = b"key-a"
    b = next(k for k in (f"key-{i}".encode() for i in range(100))
             if k != a and s.index_hash(k) == s.index_hash(a))
    va = pattern(7)
    assert s.wait(s.submit("set", [a], [va])).hits == [True]
    out = np.full(VALUE, 0x5A, np.uint8)
    assert s.wait(s.submit("get", [b], [out])).results == [0]
    assert (out == 0x5A).all()
    assert s.wait(s.submit("set", [b], [pattern(8)])).results == [0]
    assert s.wait(s.submit("get", [a], [out])).hits == [True] and np.array_equal(out, va)
    assert s.stats()["key_mismatches"] >= 2


def test_dead_daemon_is_an_error_completion_not_a_hang(kv):
    c = kv.connect(reattach=False)
    s = kvpool.BatchStore(c, "kv")
    assert s.wait(s.submit("exists", [b"x"])).ok
    kv.kill(signal.SIGKILL)
    done = s.wait(s.submit("exists", [b"x", b"y"]), timeout=20)
    assert not done.ok and done.code == int(kvpool.ErrorCode.DaemonGone)
    assert done.results == [3, 3]
    s.close()
    with pytest.raises(kvpool.InvalidState):
        s.submit("exists", [b"x"])
