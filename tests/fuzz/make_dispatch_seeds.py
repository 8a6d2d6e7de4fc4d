#!/usr/bin/env python3
"""Writes the seed corpus of dispatch_fuzz (tests/fuzz/corpus/dispatch/): a few plausible
client sessions in the fuzzer's input format (see dispatch_fuzz.cpp):
  u8 owner | u8 type | u8 flags | u16 length (LE) | record (RequestHeader + items)."""
import os
import struct
import sys

ALLOC, REGISTER, MATCH, REL_MUT, REL_IMM, PING = 1, 2, 3, 4, 5, 6
REGISTER_EXTRAS = 10  # kRegisterTokens: token ids and / or keys
FIX_COUNT, FIX_POOL, REFS, HASHES, PARENTS, SMALL_ALLOC = 1, 2, 4, 8, 16, 32


def record(owner, op, flags, corr, pool, count, items=b""):
    body = struct.pack("<QII", corr, pool, count) + items
    return struct.pack("<BBBH", owner, op, flags, len(body)) + body


def reg_items(n, seed, parent=True):
    out = b""
    for i in range(n):
        h = (seed * 1000003 + i * 7919) & 0xFFFFFFFFFFFFFFFF
        # block ref {id, gen} is patched from history with REFS; hash low bits 0 -> dedup
        out += struct.pack("<IIQQQII", i, 1, h << 2 | 1, h, h, i % 3, 1 if parent and i else 0)
    return out


def extras(n, seed, per_block=0, keys=None, key_bytes=None):
    """A kRegisterTokens payload: RegisterExtrasHeader {tokens_per_block, key_bytes}, n
    register items, n * per_block token ids, then (keys given) n u32 lengths and the keys."""
    keys = keys or []
    blob = b"".join(keys)
    total = len(blob) if key_bytes is None else key_bytes
    out = struct.pack("<II", per_block, total) + reg_items(n, seed, parent=False)
    out += b"".join(struct.pack("<I", 1000 + i) for i in range(n * per_block))
    if keys:
        out += b"".join(struct.pack("<I", len(k)) for k in keys) + blob
    return out


def refs(n):
    return b"".join(struct.pack("<II", i, 1) for i in range(n))


def hashes(n, start=0):
    return b"".join(struct.pack("<Q", i + start) for i in range(n))


def main(out_dir):
    os.makedirs(out_dir, exist_ok=True)
    patch = FIX_COUNT | FIX_POOL | REFS | HASHES | PARENTS
    seeds = {
        "lifecycle": record(0, ALLOC, FIX_POOL, 1, 0, 4)
        + record(0, REGISTER, patch, 2, 0, 4, reg_items(4, 1))
        + record(1, MATCH, patch, 3, 0, 4, hashes(4))
        + record(1, REL_IMM, patch, 0, 0, 4, refs(4))
        + record(0, REL_IMM, patch, 0, 0, 4, refs(4))
        + record(2, MATCH, patch, 4, 0, 4, hashes(4)),
        "evict": record(0, ALLOC, 0, 1, 0, 16)
        + record(0, REGISTER, patch, 2, 0, 16, reg_items(16, 2))
        + record(0, REL_IMM, patch, 0, 0, 16, refs(16))
        + record(1, ALLOC, 0, 3, 0, 16)
        + record(1, REL_MUT, patch, 0, 0, 16, refs(16))
        + record(2, ALLOC, 0, 4, 0, 17),
        "two_pools": record(0, ALLOC, 0, 1, 1, 40)
        + record(1, ALLOC, 0, 2, 1, 9)
        + record(0, REGISTER, patch, 3, 1, 20, reg_items(20, 3))
        + record(0, REL_MUT, patch, 0, 1, 20, refs(20))
        + record(2, MATCH, patch, 4, 1, 8, hashes(8)),
        "holds": record(0, ALLOC, 0, 1, 0, 8)
        + record(0, REGISTER, patch, 2, 0, 8, reg_items(8, 4))
        + b"".join(record(o, MATCH, patch, 3 + o, 0, 8, hashes(8)) for o in (1, 2, 1, 2)),
        "malformed": record(0, 0, 0, 1, 0, 0)
        + record(0, 7, 0, 2, 0, 0)
        + record(0, 0xF3, 0, 3, 0, 0)
        + struct.pack("<BBBH", 0, ALLOC, 0, 5) + b"\x01\x02\x03\x04\x05"
        + record(0, MATCH, 0, 4, 0, 3, hashes(2))
        + record(0, ALLOC, 0, 5, 7, 1)
        + record(0, ALLOC, 0, 6, 0, 189)
        + record(0, ALLOC, 0, 7, 0, 0xFFFFFFFF)
        + record(0, REL_IMM, 0, 0, 0, 2, refs(3))
        + record(0, PING, 0, 8, 99, 0)
        + record(0, REGISTER, FIX_COUNT, 9, 0, 0, b"\xff" * 45),
        "ping": record(0, PING, 0, 42, 0, 0),
        # Registers with keys (a BatchStore's), with keys and token ids, and broken ones: a
        # length over 4096, lengths that do not add up, a total past any bound, a cut-off
        # key section.
        "register_keys": record(0, ALLOC, FIX_POOL, 1, 0, 4)
        + record(0, REGISTER_EXTRAS, FIX_POOL | REFS, 2, 0, 2,
                 extras(2, 5, keys=[b"\x04\x00\x00\x00vllm" + bytes(range(36)), b""]))
        + record(0, REGISTER_EXTRAS, FIX_POOL | REFS, 3, 0, 2,
                 extras(2, 6, per_block=4, keys=[b"a" * 105, b"b" * 3]))
        + record(0, REGISTER_EXTRAS, FIX_POOL | REFS, 4, 0, 2,
                 extras(2, 7, keys=[b"", b"k" * 4097]))
        + record(0, REGISTER_EXTRAS, FIX_POOL | REFS, 5, 0, 2,
                 extras(2, 8, keys=[b"abc", b"de"], key_bytes=6))
        + record(0, REGISTER_EXTRAS, FIX_POOL | REFS, 6, 0, 2,
                 extras(2, 9, keys=[b"abc", b"def"], key_bytes=0xFFFFFFFF))
        + record(0, REGISTER_EXTRAS, FIX_POOL | REFS, 7, 0, 2,
                 extras(2, 10, keys=[b"abc", b"def"])[:-10])
        + record(1, MATCH, FIX_COUNT | FIX_POOL | HASHES, 8, 0, 2, hashes(2)),
    }
    for name, data in seeds.items():
        with open(os.path.join(out_dir, name), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "corpus", "dispatch"))
