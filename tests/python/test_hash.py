"""kvpool.hash_tokens equals Dynamo's reference vectors and the C++ hashes."""

import random
import subprocess

import numpy as np
import pytest

import kvpool
from conftest import binary

# tests/unit/hash_test.cpp: Dynamo's block manager, salt 1337, page size 4.
DYNAMO_BLOCK = [14643705804678351452, 16777012769546811212, 483935686894639516]
DYNAMO_SEQUENCE = [14643705804678351452, 4945711292740353085, 12583592247330656132]


def test_dynamo_reference_vectors():
    blocks, seqs = kvpool.hash_tokens(list(range(1, 13)), 4, 1337)
    assert blocks == DYNAMO_BLOCK
    assert seqs == DYNAMO_SEQUENCE


def test_partial_tail_is_not_hashed():
    blocks, seqs = kvpool.hash_tokens(list(range(1, 15)), 4, 1337)
    assert (blocks, seqs) == (DYNAMO_BLOCK, DYNAMO_SEQUENCE)
    assert kvpool.hash_tokens([1, 2, 3], 4, 1337) == ([], [])


@pytest.mark.parametrize("dtype", [np.uint32, np.int32, np.int64, np.uint64, np.uint16])
def test_numpy_token_arrays_hash_like_lists(dtype):
    assert kvpool.hash_tokens(np.arange(1, 13, dtype=dtype), 4, 1337) == (DYNAMO_BLOCK, DYNAMO_SEQUENCE)


def kvpoolctl_hash(tokens, page_size, salt):
    out = subprocess.run([binary("KVPOOLCTL"), "hash", "--salt", str(salt), "--page-size",
                          str(page_size), *map(str, tokens)], capture_output=True, text=True,
                         check=True, timeout=30)
    pairs = [line.split() for line in out.stdout.splitlines()]
    return [int(b) for b, _ in pairs], [int(s) for _, s in pairs]


@pytest.mark.parametrize("page_size,salt", [(4, 0), (16, 1337), (32, 2**64 - 1), (1, 42)])
def test_equal_to_the_cxx_hashes(page_size, salt):
    rng = random.Random(page_size * 7919 + salt % 1000)
    tokens = [rng.randrange(2**32) for _ in range(page_size * 5 + 1)]
    assert kvpool.hash_tokens(tokens, page_size, salt) == kvpoolctl_hash(tokens, page_size, salt)


def test_block_token_api_gives_the_same_hashes(daemon):
    pool = daemon.connect().pool("g")
    tokens = list(range(1, 13))
    blocks = pool.allocate_blocks(3)
    parent = None
    for i, b in enumerate(blocks):
        b.init_sequence(1337, parent)
        assert b.add_tokens(tokens[4 * i:4 * i + 4]) == 4
        b.commit()
        assert b.block_hash == DYNAMO_BLOCK[i]
        assert b.sequence_hash == DYNAMO_SEQUENCE[i]
        parent = b.sequence_hash
    shared = pool.register_blocks(blocks)
    assert shared.sequence_hashes == DYNAMO_SEQUENCE


def test_bad_input():
    with pytest.raises(kvpool.InvalidArgument) as e:
        kvpool.hash_tokens([1, 2], 0, 0)
    assert e.value.code == kvpool.ErrorCode.InvalidArgument
    with pytest.raises(OverflowError):
        kvpool.hash_tokens([2**32], 1, 0)
    with pytest.raises(OverflowError):
        kvpool.hash_tokens([-1], 1, 0)
    with pytest.raises(OverflowError):
        kvpool.hash_tokens(np.array([-1], dtype=np.int64), 1, 0)
    with pytest.raises(TypeError):
        kvpool.hash_tokens("1234", 4, 0)
    with pytest.raises(TypeError):
        kvpool.hash_tokens([1.5], 1, 0)


@pytest.mark.parametrize("scheme", ["dynamo-0.2", "dynamo-router"])
def test_a_pool_hashes_tokens_with_its_own_scheme(daemon_factory, scheme):
    """Pool.hash_tokens is what commit gives the blocks, on pools of either scheme, so a
    prompt registered block by block matches whole (issue 27: the free function hashed
    dynamo-0.2 only, and a dynamo-router pool matched 1 block of 4)."""
    from conftest import host_pool
    pool_cfg = host_pool("s")
    pool_cfg["hash_scheme"] = scheme
    pool = daemon_factory(pools=[pool_cfg]).connect().pool("s")
    assert pool.hash_scheme == scheme
    page, salt = pool.page_size, 5
    tokens = list(range(300, 300 + 4 * page))
    blocks, seqs = pool.hash_tokens(tokens, salt)
    assert (blocks, seqs) == kvpool.hash_tokens(tokens, page, salt, hash_scheme=scheme)
    free_02 = kvpool.hash_tokens(tokens, page, salt)  # names its scheme: dynamo-0.2
    assert free_02[1][0] == seqs[0]
    assert (free_02[1][1] == seqs[1]) == (scheme == "dynamo-0.2")
    fresh = pool.allocate_blocks(4)
    parent = None
    for i, b in enumerate(fresh):
        b.init_sequence(salt, parent)
        b.add_tokens(tokens[i * page:(i + 1) * page])
        b.commit()
        assert b.sequence_hash == seqs[i]
        parent = b.sequence_hash
    with pool.register_blocks(fresh):
        assert len(pool.match_sequence_hashes(seqs)) == 4
    with pytest.raises(ValueError):
        kvpool.hash_tokens(tokens, page, salt, hash_scheme="dynamo-9")


def test_pool_counts_as_in_c_and_rust(daemon):
    pool = daemon.connect().pool("g")
    assert pool.counts() == {"total": 64, "free": 64, "inactive": 0, "active": 0, "mutable": 0}
    blocks = pool.allocate_blocks(3)
    assert pool.counts() == {"total": 64, "free": 61, "inactive": 0, "active": 0, "mutable": 3}
    del blocks
