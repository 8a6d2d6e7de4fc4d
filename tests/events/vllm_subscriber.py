#!/usr/bin/python3
"""A vLLM KV-event subscriber, as a consumer of vLLM's stream writes one (python3-zmq,
python3-msgpack), for kvpool's tests. It decodes every batch strictly into vLLM's event
structures (vllm/distributed/kv_events.py: KVEventBatch, BlockStored, BlockRemoved,
AllBlocksCleared, as msgspec encodes them: map form, tag "type" first, omit_defaults) and
fails loudly on anything a msgspec decoder of those Structs would refuse.

  vllm_subscriber.py subscribe --endpoint E --replay R --out FILE [--topic T] [--bytes-hashes]
      SUB to E; a gap in the sequence numbers is filled from the replay ROUTER at R, as
      vLLM's example subscriber does, and so are batches sent before this subscription took
      hold (asked for whenever the stream is quiet). One JSON line per batch, in sequence
      order, to FILE. Block hashes must be signed 64-bit integers; with --bytes-hashes they
      may also be bytes (vLLM's ExternalBlockHash = bytes | int: vllm/v1/core/
      kv_cache_utils.py at 001cabc1be16, vllm/distributed/kv_events.py at 0181ea3173e5),
      written to the JSON as {"bytes": HEX}.
  vllm_subscriber.py replay --replay R --start N --out FILE
      Asks R for every batch from N on; one JSON line per batch, then {"end": true} once
      the end marker (-1) came.
  vllm_subscriber.py hash-vectors --kvpoolctl PATH
      dynamo-router hash vectors computed here with python3-xxhash, independently of
      kvpool's code, compared with `kvpoolctl hash`.
"""
import argparse
import dataclasses
import json
import signal
import struct
import subprocess
import sys
from typing import Any, Optional

import msgpack
import zmq

INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
ALLOW_BYTES = False  # --bytes-hashes


class DecodeError(Exception):
    pass


# vLLM's Structs (vllm/distributed/kv_events.py). Fields with a default may be omitted
# (omit_defaults); the others must be there.
@dataclasses.dataclass
class BlockStored:
    block_hashes: list
    parent_block_hash: Any  # ExternalBlockHash | None: decode_hashes checks it
    token_ids: list
    block_size: int
    lora_id: Optional[int]
    medium: Optional[str]
    lora_name: Optional[str]
    extra_keys: Optional[list] = None
    group_idx: Optional[int] = None
    kv_cache_spec_kind: Optional[str] = None
    kv_cache_spec_sliding_window: Optional[int] = None


@dataclasses.dataclass
class BlockRemoved:
    block_hashes: list
    medium: Optional[str]
    group_idx: Optional[int] = None


@dataclasses.dataclass
class AllBlocksCleared:
    pass


@dataclasses.dataclass
class KVEventBatch:
    ts: float
    events: list
    data_parallel_rank: Optional[int] = None


EVENT_TYPES = {c.__name__: c for c in (BlockStored, BlockRemoved, AllBlocksCleared)}


def check_type(name: str, value: Any, annotation: Any) -> None:
    """The checks msgspec applies to these annotations (bool is not an int there)."""
    if annotation is Any:
        return  # a hash or None: decode_hashes checks it
    optional = annotation in (Optional[int], Optional[str], Optional[list])
    if value is None:
        if not optional:
            raise DecodeError(f"{name}: None for a required {annotation}")
        return
    base = {Optional[int]: int, Optional[str]: str, Optional[list]: list}.get(annotation, annotation)
    if base is int and (not isinstance(value, int) or isinstance(value, bool)):
        raise DecodeError(f"{name}: expected int, got {type(value).__name__}")
    if base is float and not isinstance(value, float):
        raise DecodeError(f"{name}: expected float, got {type(value).__name__}")
    if base in (str, list) and not isinstance(value, base):
        raise DecodeError(f"{name}: expected {base.__name__}, got {type(value).__name__}")


def decode_struct(cls, fields: dict, where: str, strict: bool):
    known = {f.name: f for f in dataclasses.fields(cls)}
    unknown = set(fields) - set(known)
    if strict and unknown:
        raise DecodeError(f"{where}: fields vLLM does not have: {sorted(unknown)}")
    kwargs = {}
    for name, f in known.items():
        if name not in fields:
            if f.default is dataclasses.MISSING:
                raise DecodeError(f"{where}: required field {name!r} missing")
            continue
        check_type(f"{where}.{name}", fields[name], f.type)
        kwargs[name] = fields[name]
    return cls(**kwargs), {k: fields[k] for k in unknown}


def decode_hashes(hashes: list, where: str) -> None:
    for h in hashes:
        if ALLOW_BYTES and isinstance(h, bytes) and h:
            continue
        if not isinstance(h, int) or isinstance(h, bool) or not INT64_MIN <= h <= INT64_MAX:
            raise DecodeError(f"{where}: {h!r} is not a signed 64-bit integer"
                              + (" or bytes" if ALLOW_BYTES else ""))


def decode_event(obj: Any, where: str):
    if not isinstance(obj, dict):
        raise DecodeError(f"{where}: an event must be a map (msgspec's tagged Struct), got "
                          f"{type(obj).__name__}")
    keys = list(obj)
    if not keys or keys[0] != "type":
        raise DecodeError(f"{where}: the tag field 'type' must come first, keys are {keys}")
    tag = obj["type"]
    if tag not in EVENT_TYPES:
        raise DecodeError(f"{where}: unknown tag {tag!r}")
    fields = {k: v for k, v in obj.items() if k != "type"}
    event, _ = decode_struct(EVENT_TYPES[tag], fields, f"{where}<{tag}>", strict=True)
    if isinstance(event, (BlockStored, BlockRemoved)):
        decode_hashes(event.block_hashes, f"{where}.block_hashes")
    if isinstance(event, BlockStored):
        if event.parent_block_hash is not None:
            decode_hashes([event.parent_block_hash], f"{where}.parent_block_hash")
        for t in event.token_ids:
            check_type(f"{where}.token_ids[]", t, int)
            if not 0 <= t < 2**32:
                raise DecodeError(f"{where}.token_ids: {t} is not a token id")
        # What consumers that hash tokens (llm-d's indexer) rely on: a block_size of token
        # ids per block hash, or none at all.
        want = event.block_size * len(event.block_hashes)
        if event.token_ids and len(event.token_ids) != want:
            raise DecodeError(f"{where}.token_ids: {len(event.token_ids)} ids for "
                              f"{len(event.block_hashes)} blocks of {event.block_size}")
    return event


def decode_batch(payload: bytes):
    try:
        obj = msgpack.unpackb(payload, raw=False, strict_map_key=True)
    except Exception as e:  # noqa: BLE001 - any unpack error is a decode error
        raise DecodeError(f"not msgpack: {e}") from e
    if not isinstance(obj, dict):
        raise DecodeError(f"KVEventBatch must be a map, got {type(obj).__name__}")
    # msgspec ignores unknown fields of the batch (kvpool's hash_scheme is one).
    batch, extra = decode_struct(KVEventBatch, obj, "KVEventBatch", strict=False)
    if not isinstance(batch.events, list):
        raise DecodeError("KVEventBatch.events is not a list")
    batch.events = [decode_event(e, f"events[{i}]") for i, e in enumerate(batch.events)]
    return batch, extra


def json_hash(h):
    return {"bytes": h.hex()} if isinstance(h, bytes) else h


def batch_json(seq: int, via: str, payload: bytes) -> dict:
    batch, extra = decode_batch(payload)
    events = []
    for e in batch.events:
        d = {"type": type(e).__name__}
        d.update({k: v for k, v in dataclasses.asdict(e).items()})
        if "block_hashes" in d:
            d["block_hashes"] = [json_hash(h) for h in d["block_hashes"]]
        if d.get("parent_block_hash") is not None:
            d["parent_block_hash"] = json_hash(d["parent_block_hash"])
        events.append(d)
    return {"seq": seq, "via": via, "ts": batch.ts, "dp_rank": batch.data_parallel_rank,
            "hash_scheme": extra.get("hash_scheme"), "events": events}


def replay(sock, start: int, timeout_ms: int = 10000):
    """vLLM's replay request: 8-byte big-endian start; answers (seq, payload) until -1."""
    sock.send_multipart([b"", start.to_bytes(8, "big")])
    out = []
    while True:
        if not sock.poll(timeout_ms):
            raise DecodeError(f"no replay answer within {timeout_ms} ms (start {start})")
        frames = sock.recv_multipart()
        if len(frames) != 3 or frames[0] != b"" or len(frames[1]) != 8:
            raise DecodeError(f"malformed replay answer: {len(frames)} frame(s)")
        seq = int.from_bytes(frames[1], "big", signed=True)
        if seq == -1:
            if frames[2] != b"":
                raise DecodeError("end marker with a payload")
            return out
        out.append((seq, frames[2]))


def write(out, line: dict) -> None:
    out.write(json.dumps(line) + "\n")
    out.flush()


def cmd_subscribe(args) -> int:
    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, args.topic.encode())
    sub.connect(args.endpoint)
    rep = ctx.socket(zmq.DEALER)
    rep.connect(args.replay)
    expected = 0
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    with open(args.out, "a") as out:
        def take(seq: int, via: str, payload: bytes) -> None:
            nonlocal expected
            write(out, batch_json(seq, via, payload))
            expected = seq + 1

        def fill(upto: Optional[int]) -> None:
            """Replays [expected, upto) (everything buffered when upto is None)."""
            for rseq, payload in replay(rep, expected):
                if rseq < expected or (upto is not None and rseq >= upto):
                    continue
                if rseq != expected:
                    raise DecodeError(f"replay skipped {expected} (gave {rseq})")
                take(rseq, "replay", payload)
            if upto is not None and expected != upto:
                raise DecodeError(f"replay could not fill {expected}..{upto - 1}")

        while not stop:
            if not sub.poll(200):
                # Quiet: batches published before this subscription took hold (a PUB socket
                # drops them) are only in the replay buffer. Ask for them.
                fill(None)
                continue
            frames = sub.recv_multipart()
            if len(frames) != 3 or len(frames[1]) != 8:
                raise DecodeError(f"a PUB message has {len(frames)} frame(s), not 3")
            if frames[0] != args.topic.encode():
                raise DecodeError(f"topic {frames[0]!r}, subscribed to {args.topic!r}")
            seq = int.from_bytes(frames[1], "big")
            if seq < expected:
                continue  # already taken from the replay buffer
            if seq > expected:  # missed some (or joined late): fill from the replay buffer
                fill(seq)
            take(seq, "pub", frames[2])
    return 0


def cmd_replay(args) -> int:
    ctx = zmq.Context()
    rep = ctx.socket(zmq.DEALER)
    rep.connect(args.replay)
    with open(args.out, "w") as out:
        for seq, payload in replay(rep, args.start):
            write(out, batch_json(seq, "replay", payload))
        write(out, {"end": True})
    return 0


def router_hashes(tokens, page, namespace="", lora=""):
    """Dynamo's router scheme, from its definition (kv-hashing compute_salt_hash, kv-router
    compute_block_hash_for_seq and the chain with CHAIN_XXH3_SEED = 1337)."""
    import xxhash
    mask = (1 << 64) - 1
    seed = 1337
    if lora:
        seed = (seed + xxhash.xxh3_64_intdigest(lora.encode(), seed=0)) & mask
    if namespace:
        seed = (seed + xxhash.xxh3_64_intdigest(namespace.encode(), seed=1)) & mask
    out, parent = [], None
    for i in range(0, len(tokens) - len(tokens) % page, page):
        block = xxhash.xxh3_64_intdigest(struct.pack(f"<{page}I", *tokens[i:i + page]), seed=seed)
        seq = block if parent is None else xxhash.xxh3_64_intdigest(
            struct.pack("<QQ", parent, block), seed=1337)
        out.append((block, seq))
        parent = seq
    return out


def cmd_hash_vectors(args) -> int:
    cases = [([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12], 4, "", ""),
             ([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12], 4, "", "adapter-a"),
             ([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12], 4, "tenant-1", ""),
             (list(range(1000, 1064)), 16, "tenant-1", "adapter-b"),
             ([4294967295, 0, 7, 123456789] * 8, 8, "ns", "")]
    for tokens, page, ns, lora in cases:
        cmd = [args.kvpoolctl, "hash", "--hash-scheme", "dynamo-router", "--page-size", str(page)]
        if ns:
            cmd += ["--cache-namespace", ns]
        if lora:
            cmd += ["--lora-name", lora]
        got = subprocess.run(cmd + [str(t) for t in tokens], check=True, capture_output=True,
                             text=True).stdout.split("\n")
        got = [tuple(int(x) for x in line.split()) for line in got if line]
        want = router_hashes(tokens, page, ns, lora)
        if got != want:
            print(f"FAIL: namespace {ns!r} lora {lora!r} page {page}: kvpoolctl {got}, "
                  f"independent {want}", file=sys.stderr)
            return 1
    # Without LoRA or namespace the scheme is dynamo-0.2 with Dynamo's seed.
    plain = subprocess.run([args.kvpoolctl, "hash", "--salt", "1337", "--page-size", "4"] +
                           [str(t) for t in range(1, 13)], check=True, capture_output=True,
                           text=True).stdout.split()
    if [int(x) for x in plain] != [h for pair in router_hashes(list(range(1, 13)), 4)
                                   for h in pair]:
        print("FAIL: dynamo-0.2 with salt 1337 differs from dynamo-router without LoRA",
              file=sys.stderr)
        return 1
    print(f"ok: {len(cases)} dynamo-router vector sets match")
    return 0


def main() -> int:
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("subscribe")
    s.add_argument("--endpoint", required=True)
    s.add_argument("--replay", required=True)
    s.add_argument("--topic", default="")
    s.add_argument("--out", required=True)
    s.add_argument("--bytes-hashes", action="store_true")
    r = sub.add_parser("replay")
    r.add_argument("--replay", required=True)
    r.add_argument("--start", type=int, required=True)
    r.add_argument("--out", required=True)
    h = sub.add_parser("hash-vectors")
    h.add_argument("--kvpoolctl", required=True)
    args = p.parse_args()
    global ALLOW_BYTES
    ALLOW_BYTES = getattr(args, "bytes_hashes", False)
    return {"subscribe": cmd_subscribe, "replay": cmd_replay,
            "hash-vectors": cmd_hash_vectors}[args.cmd](args)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except DecodeError as e:
        print(f"vllm_subscriber: {e}", file=sys.stderr)
        sys.exit(3)
